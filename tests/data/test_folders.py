"""Image folders: scanning, class lists, and decoding a small folder into memory."""

import numpy as np
import pytest
import torch
from PIL import Image

from fbnas.data.dataset import channel_stats
from fbnas.data.memory import load_dataset
from fbnas.errors import FbnasError

torch.set_num_threads(1)


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
