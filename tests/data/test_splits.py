"""The seeded weights/theta/val split of the training images."""

import pytest
import torch

from fbnas.data.splits import make_splits
from fbnas.errors import FbnasError, UsageError

torch.set_num_threads(1)


def test_splits_are_disjoint_covering_and_sized_as_documented():
    s = make_splits(50_000, seed=0)
    assert [len(s[k]) for k in ("val", "theta", "weights")] == [5000, 9000, 36000]
    everything = torch.cat([s["weights"], s["theta"], s["val"]]).sort().values
    assert torch.equal(everything, torch.arange(50_000))
    for v in s.values():
        assert v.dtype == torch.int64


def test_splits_depend_only_on_the_seed():
    a, b, c = make_splits(1000, 3), make_splits(1000, 3), make_splits(1000, 4)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["theta"], c["theta"])


def test_split_edge_cases():
    s = make_splits(100, 0, theta_fraction=0.5, val_fraction=0.0)
    assert len(s["val"]) == 0 and len(s["theta"]) == 50 and len(s["weights"]) == 50
    with pytest.raises(FbnasError, match="too few"):
        make_splits(2, 0)
    with pytest.raises(UsageError):
        make_splits(100, 0, theta_fraction=1.0)
