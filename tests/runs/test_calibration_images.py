"""fbnas.runs.calibration_images: the one draw of int8 calibration images."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fbnas.errors import FbnasError
from fbnas.runs.calibration_images import draw, network_data
from fbnas.data.dataset import Dataset


def dataset(n=40) -> Dataset:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, 8, 8), generator=g, dtype=torch.uint8)
    return Dataset(images, torch.arange(n) % 10, None, None, [str(i) for i in range(10)],
                   mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))


def test_draw_is_seeded_normalised_and_capped():
    data = dataset()
    a, b, c = draw(data, 16, 1), draw(data, 16, 1), draw(data, 16, 2)
    assert a.dtype == np.float32 and a.shape == (16, 3, 8, 8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # every drawn image is a training image normalised with the data set's mean and std
    all_images = draw(data, 40, 0)
    assert {x.tobytes() for x in a} <= {x.tobytes() for x in all_images}
    mean = np.array(data.mean, dtype=np.float32).reshape(1, 3, 1, 1)
    std = np.array(data.std, dtype=np.float32).reshape(1, 3, 1, 1)
    restored = np.rint((all_images * std + mean) * 255).astype(np.uint8)
    assert sorted(x.tobytes() for x in restored) == \
        sorted(x.tobytes() for x in data.train_images.numpy())
    assert len(draw(data, 100, 0)) == 40  # no more than the data holds


def test_network_data_refuses_a_folder_without_cifar(tmp_path):
    defn = {"name": "n", "input": {"resolution": 32, "channels": 3}, "head": {"classes": 10}}
    with pytest.raises(FbnasError, match="holds no CIFAR-10 data"):
        network_data(tmp_path, defn, 8)
