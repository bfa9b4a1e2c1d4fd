"""The supernet learns on real images: a few dozen hard-mode steps lower the training CE."""

import math

import pytest
import torch
import torch.nn.functional as F

from fbnas.arch.space import SearchSpace
from fbnas.data.batches import BatchLoader
from fbnas.data.memory import load_dataset
from fbnas.data.splits import make_splits
from fbnas.latency.lut import LUT, profile_space
from fbnas.search.supernet import Supernet
from tests.conftest import require_cifar_subset

pytestmark = pytest.mark.slow  # trains on real images

# Eight searchable layers, three of them transitions, the shape of fbnet_cifar in small.
SLICE = {
    "name": "slice", "input": {"channels": 3, "resolution": 32},
    "stem": {"channels": 8, "kernel": 3, "stride": 2},
    "stages": [{"channels": 8, "blocks": 3, "stride": 1},
               {"channels": 16, "blocks": 3, "stride": 2},
               {"channels": 24, "blocks": 2, "stride": 2}],
    "candidates": ["k3_e1", "k3_e3", "k5_e3", "k3_e1_g2", "skip"],
    "head": {"channels": 64, "classes": 10},
}


@pytest.fixture(scope="module")
def batches():
    data = load_dataset(require_cifar_subset())
    split = make_splits(data.train_images.shape[0], 0)["weights"]
    loader = BatchLoader(data.train_images, data.train_labels, split, 64, train=True, seed=0,
                         drop_last=True, mean=data.mean, std=data.std)
    return list(loader)


def train_ce(batches, steps: int, **recipe) -> list[float]:
    torch.manual_seed(0)
    space = SearchSpace.from_dict(SLICE)
    lut = LUT(profile_space(space, rounds=1, extra_rounds=0, block_time=0.0002))
    net = Supernet(space, lut, impl="fast", **recipe)
    opt = torch.optim.SGD(net.weight_parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    ces = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        logits, _ = net(x, tau=5.0, mode="hard")
        ce = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        ce.backward()
        opt.step()
        ces.append(float(ce.detach()))
    return ces


def test_hard_mode_supernet_lowers_training_ce(batches):
    ces = train_ce(batches, 48)
    first, last = sum(ces[:8]) / 8, sum(ces[-8:]) / 8
    # chance is ln 10 = 2.30; a supernet that learns nothing stays there
    assert last < math.log(10) - 0.2, ces
    assert last < first - 0.15, ces
