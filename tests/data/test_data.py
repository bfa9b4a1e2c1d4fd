import os
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from fbnas.errors import FbnasError, UsageError
from fbnas.data.data import (CIFAR_MEAN, CIFAR_STD, BatchLoader, augment, channel_stats,
                             load_dataset, make_splits, normalize)
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


# --------------------------------------------------------------------------- CIFAR-10


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


# --------------------------------------------------------------------------- splits


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


# --------------------------------------------------------------------------- augmentation


def crop_matches(img, out, padding):
    """All (dy, dx, flipped) whose padded crop of ``img`` equals ``out``."""
    h, w = img.shape[-2:]
    p = torch.nn.functional.pad(img, (padding,) * 4)
    found = []
    for dy in range(2 * padding + 1):
        for dx in range(2 * padding + 1):
            crop = p[:, dy:dy + h, dx:dx + w]
            for flipped, cand in ((False, crop), (True, crop.flip(-1))):
                if torch.equal(cand, out):
                    found.append((dy, dx, flipped))
    return found


def test_augment_crops_and_flips_each_image_independently():
    x = torch.randint(1, 256, (24, 3, 12, 12), dtype=torch.uint8)  # no zeros: padding shows
    out = augment(x, torch.Generator().manual_seed(0), padding=4)
    assert out.shape == x.shape and out.dtype == torch.uint8
    matches = [crop_matches(x[i], out[i], 4) for i in range(len(x))]
    assert all(len(m) == 1 for m in matches)
    offsets = {m[0][:2] for m in matches}
    assert len(offsets) > 5 and offsets != {(4, 4)}  # content really moves
    assert {m[0][2] for m in matches} == {True, False}
    shifted = [i for i, m in enumerate(matches) if m[0][0] == 0]
    assert shifted and all((out[i, :, :4] == 0).all() for i in shifted)  # zero padding enters


def test_flip_alone_mirrors_whole_images():
    x = torch.randint(0, 256, (32, 3, 8, 8), dtype=torch.uint8)
    out = augment(x, torch.Generator().manual_seed(1), padding=0)
    same = [torch.equal(out[i], x[i]) for i in range(32)]
    mirrored = [torch.equal(out[i], x[i].flip(-1)) for i in range(32)]
    assert all(s or m for s, m in zip(same, mirrored)) and any(same) and any(mirrored)
    assert torch.equal(augment(x, torch.Generator().manual_seed(1), padding=0, flip=False), x)


def test_augment_is_deterministic_per_generator_seed():
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    a = augment(x, torch.Generator().manual_seed(5))
    b = augment(x, torch.Generator().manual_seed(5))
    c = augment(x, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


# --------------------------------------------------------------------------- loader


def toy(n=40, size=8):
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    return images, torch.arange(n)  # labels double as image ids


def loader(images, labels, indices, **kw):
    args = dict(batch_size=8, train=True, seed=0, drop_last=False,
                mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
    args.update(kw)
    return BatchLoader(images, labels, indices, **args)


def test_eval_loader_serves_normalised_images_in_order():
    images, labels = toy()
    idx = torch.tensor([5, 1, 7, 30, 2, 9, 11, 12, 13, 0, 3])
    ld = loader(images, labels, idx, train=False, batch_size=4)
    batches = list(ld)
    assert len(ld) == len(batches) == 3 and [len(y) for _, y in batches] == [4, 4, 3]
    x = torch.cat([b[0] for b in batches])
    assert x.dtype == torch.float32 and torch.equal(torch.cat([b[1] for b in batches]), idx)
    mean = torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)
    std = torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)
    ref = (images[idx].float() / 255 - mean) / std
    assert torch.allclose(x, ref, atol=1e-5)
    assert torch.allclose(normalize(images[idx], (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)), ref,
                          atol=1e-5)


def test_train_batches_depend_only_on_seed_and_epoch():
    images, labels = toy()
    idx = torch.arange(3, 40)
    a = loader(images, labels, idx)
    a.set_epoch(3)
    first = list(a)
    again = list(a)
    resumed = loader(images, labels, idx)  # a fresh process resuming at epoch 3
    resumed.set_epoch(3)
    for (x1, y1), (x2, y2), (x3, y3) in zip(first, again, list(resumed)):
        assert torch.equal(x1, x2) and torch.equal(x1, x3) and torch.equal(y1, y3)
    a.set_epoch(4)
    assert not torch.equal(torch.cat([y for _, y in a]), torch.cat([y for _, y in first]))
    other_seed = loader(images, labels, idx, seed=1)
    other_seed.set_epoch(3)
    assert not torch.equal(next(iter(other_seed))[1], first[0][1])
    # Every training index is served once per epoch, shuffled.
    served = torch.cat([y for _, y in first])
    assert torch.equal(served.sort().values, idx) and not torch.equal(served, idx)
    assert first[0][0].shape == (8, 3, 8, 8) and len(a) == 5


def test_drop_last_drops_the_short_batch():
    images, labels = toy()
    ld = loader(images, labels, torch.arange(37), drop_last=True)
    assert len(ld) == 4 and [len(y) for _, y in ld] == [8, 8, 8, 8]


def test_sharded_ranks_get_disjoint_equal_parts():
    images, labels = toy()
    idx = torch.arange(40)
    parts = []
    for rank in range(2):
        ld = loader(images, labels, idx, rank=rank, world_size=2, batch_size=6)
        ld.set_epoch(2)
        parts.append(torch.cat([y for _, y in ld]))
        assert len(ld) == 4
    assert len(parts[0]) == len(parts[1]) == 20
    assert not set(parts[0].tolist()) & set(parts[1].tolist())
    assert torch.equal(torch.cat(parts).sort().values, idx)
    # An odd count is padded with one repeat (or trimmed with drop_last) to stay even.
    odd = torch.arange(1, 40)
    padded = [loader(images, labels, odd, rank=r, world_size=2).epoch_indices() for r in (0, 1)]
    assert len(padded[0]) == len(padded[1]) == 20
    assert set(torch.cat(padded).tolist()) == set(odd.tolist())
    trimmed = [loader(images, labels, odd, rank=r, world_size=2, drop_last=True).epoch_indices()
               for r in (0, 1)]
    assert len(trimmed[0]) == len(trimmed[1]) == 19
    assert not set(trimmed[0].tolist()) & set(trimmed[1].tolist())


def test_loader_refuses_a_split_too_small_for_one_batch():
    images, labels = toy()
    with pytest.raises(FbnasError, match="5 images make no batch of 8"):
        loader(images, labels, torch.arange(5), drop_last=True)


@pytest.mark.slow  # reads the CIFAR-10 subset
@pytest.mark.usefixtures("cifar_subset")
def test_loader_on_the_real_subset():
    ds = load_dataset(SUBSET)
    splits = make_splits(len(ds.train_labels), seed=0)
    ld = BatchLoader(ds.train_images, ds.train_labels, splits["theta"], 64, True, 0, True,
                     ds.mean, ds.std)
    x, y = next(iter(ld))
    assert x.shape == (64, 3, 32, 32) and y.shape == (64,)
    assert set(y.tolist()) <= set(range(10))
    assert -2.5 < float(x.mean()) < 2.5 and 0.5 < float(x.std()) < 2.0


# --------------------------------------------------------------------------- image folders


def save(path, size, color=None, left=None, right=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    a = np.zeros((h, w, 3), dtype=np.uint8)
    a[:] = color if color is not None else (0, 0, 0)
    if left is not None:
        a[:, : w // 4] = left
        a[:, w - w // 4:] = right
    Image.fromarray(a).save(path)


def test_image_folder_with_train_and_test(tmp_path):
    save(tmp_path / "train" / "dog" / "a.png", (20, 20), color=(200, 10, 10))
    save(tmp_path / "train" / "dog" / "b.jpg", (30, 30), color=(200, 10, 10))
    # Wide image with coloured outer quarters: the centre crop must drop them.
    save(tmp_path / "train" / "cat" / "c.png", (64, 16), color=(0, 255, 0),
         left=(255, 0, 0), right=(0, 0, 255))
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    save(tmp_path / "test" / "dog" / "d.png", (10, 40), color=(1, 2, 3))
    ds = load_dataset(tmp_path, kind="folder", resolution=16)
    assert ds.classes == ["cat", "dog"] and ds.kind == "folder"
    assert ds.train_images.shape == (3, 3, 16, 16) and ds.train_images.dtype == torch.uint8
    assert ds.train_labels.tolist() == [0, 1, 1]
    assert (ds.train_images[0, 1] == 255).all() and (ds.train_images[0, 0] == 0).all()
    red = torch.tensor([200., 10., 10.]).view(3, 1, 1)
    assert (ds.train_images[1].float() - red).abs().max() < 2  # a JPEG, so nearly
    assert ds.test_images.shape == (1, 3, 16, 16) and ds.test_labels.tolist() == [1]
    assert ds.mean == pytest.approx(channel_stats(ds.train_images)[0])


def test_image_folder_without_test_split(tmp_path):
    for cls in ("b", "a"):
        for i in range(3):
            save(tmp_path / cls / f"{i}.png", (12, 12), color=(i * 50, 0, 0))
    ds = load_dataset(tmp_path, kind="folder", resolution=8)
    assert ds.classes == ["a", "b"] and ds.train_images.shape == (6, 3, 8, 8)
    assert ds.test_images is None and ds.test_labels is None and not ds.has_test


def test_image_folder_errors(tmp_path):
    with pytest.raises(FbnasError, match="nothing does not exist.*<class>"):
        load_dataset(tmp_path / "nothing", kind="folder")
    with pytest.raises(FbnasError, match="has no class folders"):
        load_dataset(tmp_path, kind="folder")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FbnasError, match="class folder .*empty has no readable images.*data.skip_bad"):
        load_dataset(tmp_path, kind="folder")
    save(tmp_path / "empty" / "ok.png", (8, 8))
    (tmp_path / "empty" / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(FbnasError, match="image .*broken.png cannot be read as an image.*skip_bad"):
        load_dataset(tmp_path, kind="folder")


def test_image_folder_test_classes_must_exist_in_train(tmp_path):
    save(tmp_path / "train" / "a" / "0.png", (8, 8))
    save(tmp_path / "test" / "z" / "0.png", (8, 8))
    with pytest.raises(FbnasError, match="classes not in .*train: z"):
        load_dataset(tmp_path, kind="folder", resolution=8)


def test_class_lists_name_what_is_wrong(tmp_path):
    from fbnas.data.folders import read_class_list, scan_folder

    for cls in ("a", "b"):
        save(tmp_path / "imgs" / "train" / cls / "0.png", (8, 8))
    listed = tmp_path / "list.txt"
    listed.write_text("# two of them\nb\n\na  # the first\n")
    assert read_class_list(listed) == ["b", "a"]
    index = scan_folder(tmp_path / "imgs", classes=["b", "a"])  # the list's order: the ids
    labels = dict(zip(index.train.files, index.train.labels.tolist()))
    assert index.classes == ["b", "a"]
    assert labels[str(tmp_path / "imgs" / "train" / "a" / "0.png")] == 1
    with pytest.raises(FbnasError, match="no class folder zebra named in the class list"):
        scan_folder(tmp_path / "imgs", classes=["a", "zebra"])
    listed.write_text("a\na\n")
    with pytest.raises(FbnasError, match="names a twice"):
        read_class_list(listed)
    listed.write_text("# nothing\n")
    with pytest.raises(FbnasError, match="names no classes"):
        read_class_list(listed)
    with pytest.raises(FbnasError, match="cannot read class list .*missing.txt"):
        read_class_list(tmp_path / "missing.txt")
