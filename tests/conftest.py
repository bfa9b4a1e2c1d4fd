from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO / "bench"
CIFAR_SUBSET = (REPO.parent / "shared" / "data" / "cifar10-subset")

torch.set_num_threads(1)



def bench_on_path() -> None:
    """Put bench/ on the import path, as running a bench script does: the benches and the
    modules beside them (groundtruth, bench_common, ...) import each other by name."""
    import sys

    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))

def require_cifar_subset() -> Path:
    """The CIFAR-10 subset, or a failure saying where it was looked for.

    A failure, not a skip: a skipped end-to-end test reads as a pass in CI.
    """
    if not (CIFAR_SUBSET / "cifar-10-batches-py").is_dir():
        pytest.fail(f"this test needs the CIFAR-10 subset at {CIFAR_SUBSET} (the repository's "
                    "../shared/data/cifar10-subset, holding cifar-10-batches-py/); put it, or a "
                    "link to a CIFAR-10 copy, there", pytrace=False)
    return CIFAR_SUBSET


@pytest.fixture
def cifar_subset() -> Path:
    """The CIFAR-10 subset for tests that read it (see require_cifar_subset)."""
    return require_cifar_subset()


@pytest.fixture(scope="session")
def tiny_lut_data():
    """A quickly profiled table of the tiny space (timings are rough; shapes are what count)."""
    from fbnas.arch.space import load_space
    from fbnas.latency.lut import profile_space

    return profile_space(load_space("tiny"), rounds=2, extra_rounds=2, block_time=0.001)


@pytest.fixture
def tiny_lut_file(tmp_path, tiny_lut_data):
    from fbnas.io import write_json

    path = tmp_path / "tiny.json"
    write_json(path, tiny_lut_data)
    return path


@pytest.fixture
def ctrl_c_after(monkeypatch):
    """``ctrl_c_after(n)``: the run in this test gets a Ctrl-C (SIGINT) as its progress
    counts the ``n``-th batch, as a user pressing it mid-epoch would."""
    import signal

    import fbnas.runs.trainer as trainer_mod

    def arm(n: int) -> None:
        class InterruptingProgress(trainer_mod.Progress):
            def update(self, k=1):
                super().update(k)
                if self.done == n:
                    signal.raise_signal(signal.SIGINT)

        monkeypatch.setattr(trainer_mod, "Progress", InterruptingProgress)

    return arm
