"""CIFAR-10's python-format batch files: read in order, and refused when damaged or crafted."""

import os
import pickle

import numpy as np
import pytest
import torch

from fbnas.data.cifar import CIFAR_MEAN, CIFAR_STD
from fbnas.data.dataset import channel_stats
from fbnas.data.memory import load_dataset
from fbnas.errors import FbnasError, UsageError
from tests.conftest import CIFAR_SUBSET as SUBSET

torch.set_num_threads(1)


def write_batch(path, n, seed=0, labels=None, data=None):
    rng = np.random.default_rng(seed)
    d = {
        "batch_label": path.name,
        "labels": list(rng.integers(0, 10, n)) if labels is None else labels,
        "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8) if data is None else data,
        "filenames": [f"{path.name}_{i}.png" for i in range(n)],
    }
    d["labels"] = [int(v) for v in d["labels"]]
    with open(path, "wb") as f:
        pickle.dump(d, f, protocol=2)
    return d


def make_cifar(root, sizes=(7, 3, 1, 5, 2), test=4):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = [write_batch(folder / f"data_batch_{i + 1}", n, seed=i) for i, n in enumerate(sizes)]
    write_batch(folder / "test_batch", test, seed=99)
    return folder, batches


@pytest.mark.slow  # reads the CIFAR-10 subset
@pytest.mark.usefixtures("cifar_subset")
def test_real_subset_loads_with_right_shapes_and_labels():
    ds = load_dataset(SUBSET)
    assert ds.train_images.shape == (5085, 3, 32, 32) and ds.train_images.dtype == torch.uint8
    assert ds.test_images.shape == (1017, 3, 32, 32) and ds.test_images.dtype == torch.uint8
    assert ds.train_labels.shape == (5085,) and ds.train_labels.dtype == torch.int64
    assert ds.test_labels.shape == (1017,)
    for y in (ds.train_labels, ds.test_labels):
        assert int(y.min()) == 0 and int(y.max()) == 9
    assert ds.classes[0] == "airplane" and len(ds.classes) == 10
    assert ds.mean == CIFAR_MEAN and ds.std == CIFAR_STD
    # Computed statistics of real images land near the published full-set constants.
    mean, std = channel_stats(ds.train_images)
    assert np.allclose(mean, CIFAR_MEAN, atol=0.01) and np.allclose(std, CIFAR_STD, atol=0.01)


@pytest.mark.slow  # reads the CIFAR-10 subset
@pytest.mark.usefixtures("cifar_subset")
def test_batches_folder_itself_is_accepted():
    a = load_dataset(SUBSET)
    b = load_dataset(SUBSET / "cifar-10-batches-py")
    assert torch.equal(a.test_images, b.test_images) and torch.equal(a.train_labels, b.train_labels)


def test_odd_sized_batch_files_load_in_order_channel_major(tmp_path):
    _, batches = make_cifar(tmp_path, sizes=(7, 3, 1, 5, 2), test=4)
    ds = load_dataset(tmp_path)
    assert ds.train_images.shape == (18, 3, 32, 32) and ds.test_images.shape == (4, 3, 32, 32)
    data = np.concatenate([b["data"] for b in batches])
    labels = sum((b["labels"] for b in batches), [])
    assert ds.train_labels.tolist() == labels
    k = 9  # second image of the second file
    assert ds.train_images[k, 0, 0, 0] == data[k, 0]        # red plane first
    assert ds.train_images[k, 1, 0, 0] == data[k, 1024]     # then green
    assert ds.train_images[k, 2, 31, 31] == data[k, 3071]   # blue, last pixel
    assert ds.train_images[k, 0, 1, 2] == data[k, 32 + 2]   # rows of 32


def test_truncated_batch_file_is_a_clear_error(tmp_path):
    folder, _ = make_cifar(tmp_path, sizes=(50, 50, 50, 50, 50))
    f = folder / "data_batch_3"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(FbnasError, match="data_batch_3 is truncated or not in CIFAR-10 python "
                                         "format.*data_batch_1..5 and test_batch"):
        load_dataset(tmp_path)


def test_missing_data_names_the_expected_layout(tmp_path):
    expected = "cifar-10-batches-py/data_batch_1..5 and test_batch (CIFAR-10 python format"
    with pytest.raises(FbnasError, match=f"{tmp_path}/nowhere does not exist.*") as e:
        load_dataset(tmp_path / "nowhere")
    assert expected in str(e.value) and "--download" in str(e.value)
    with pytest.raises(FbnasError, match="no CIFAR-10 data in") as e:
        load_dataset(tmp_path)
    assert f"{tmp_path}/{expected}" in str(e.value)
    folder, _ = make_cifar(tmp_path / "partial")
    (folder / "test_batch").unlink()
    with pytest.raises(FbnasError, match="lacks test_batch"):
        load_dataset(tmp_path / "partial")


def test_wrong_contents_are_rejected(tmp_path):
    folder, _ = make_cifar(tmp_path)
    write_batch(folder / "data_batch_2", 4, data=np.zeros((4, 1000), dtype=np.uint8))
    with pytest.raises(FbnasError, match="data_batch_2: 'data' is ndarray \\(4, 1000\\)"):
        load_dataset(tmp_path)
    write_batch(folder / "data_batch_2", 3, labels=[0, 10, 1])
    with pytest.raises(FbnasError, match="labels outside 0..9"):
        load_dataset(tmp_path)
    write_batch(folder / "data_batch_2", 3, labels=[0, 1])
    with pytest.raises(FbnasError, match="3 images but 2 labels"):
        load_dataset(tmp_path)


class _Payload:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_batch_pickles_cannot_run_code(tmp_path):
    folder, _ = make_cifar(tmp_path)
    marker = tmp_path / "created-by-pickle"
    with open(folder / "data_batch_1", "wb") as f:
        pickle.dump({"data": _Payload(str(marker)), "labels": []}, f, protocol=2)
    with pytest.raises(FbnasError, match="refusing to load"):
        load_dataset(tmp_path)
    assert not marker.exists()


def test_cifar_at_another_resolution_and_unknown_kind_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="32x32"):
        load_dataset(SUBSET, resolution=64)
    with pytest.raises(UsageError, match="unknown dataset kind"):
        load_dataset(SUBSET, kind="mnist")
