"""Every file and value a run reads is checked before the run spends time on it: bad input is
one line naming the file or key and the fix, never a traceback, and nothing is left behind."""

from __future__ import annotations

import pytest

from fbnas.config import MAX_WORKERS, load_config
from fbnas.errors import FbnasError, UsageError


# -- bounds -------------------------------------------------------------------------------------

def test_data_workers_is_bounded():
    with pytest.raises(UsageError, match=rf"data.workers must be from 0 to {MAX_WORKERS}.*10000"):
        load_config(None, ["data.workers=10000"])
    assert load_config(None, [f"data.workers={MAX_WORKERS}"]).data.workers == MAX_WORKERS
    assert load_config(None, ["data.workers=-1"]).data.workers == -1


def test_a_class_list_for_cifar10_is_refused():
    with pytest.raises(UsageError, match="data.classes .*data.kind is cifar10") as e:
        load_config(None, ["data.classes=list.txt"])
    assert "\n" not in str(e.value)
    assert load_config(None, ["data.classes=list.txt", "data.kind=folder"]).data.classes


@pytest.mark.parametrize("k,phase", [(1000000, "weights"), (3, "theta")])
def test_an_accumulate_a_phase_never_reaches_is_refused_under_epoch_alternation(
        tmp_path, tiny_lut_file, k, phase):
    """The default alternation (epoch) exited 0 with an optimizer that never stepped."""
    from fbnas.search.run import run_search
    from tests.whole.test_search import quiet, small_config

    cfg = small_config(tiny_lut_file, **{"search.accumulate": k})
    assert cfg.search.alternation == "epoch"
    with pytest.raises(UsageError, match=rf"search.accumulate \({k}\) is above the \d+ {phase} "
                                         r"batches.*--set search.accumulate=\d+") as e:
        run_search(cfg, tmp_path / "run", echo=quiet)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_an_accumulate_within_both_phases_still_runs(tmp_path, tiny_lut_file):
    from fbnas.search.run import run_search
    from tests.whole.test_search import quiet, small_config

    cfg = small_config(tiny_lut_file, **{"search.accumulate": 2, "search.epochs": 1})
    assert run_search(cfg, tmp_path / "run", echo=quiet)["epochs_done"] == 1
