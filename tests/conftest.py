from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
CIFAR_SUBSET = (REPO.parent / "shared" / "data" / "cifar10-subset")

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_lut_data():
    """A quickly profiled table of the tiny space (timings are rough; shapes are what count)."""
    from fbnas.lut import profile_space
    from fbnas.space import load_space

    return profile_space(load_space("tiny"), rounds=2, extra_rounds=2, block_time=0.001)


@pytest.fixture
def tiny_lut_file(tmp_path, tiny_lut_data):
    from fbnas.io import write_json

    path = tmp_path / "tiny.json"
    write_json(path, tiny_lut_data)
    return path
