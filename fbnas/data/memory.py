"""Datasets held whole in memory: CIFAR-10, or an image folder decoded once at load time.

These sit in memory as ``uint8`` tensors of shape N x 3 x R x R, which the in-memory loader
(``fbnas.data.batches``) indexes, augments and normalises a whole batch at a time, so the
input pipeline needs no worker processes and costs little next to a supernet step. Image
folders too large for that are streamed from disk instead (``fbnas.data.stream``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fbnas.data.cifar import load_cifar10
from fbnas.data.dataset import Dataset, channel_stats
from fbnas.data.folders import (SKIP_HINT, FolderIndex, ImageTooLarge, check_resolution, open_image,
                                 scan_folder, shown)
from fbnas.errors import FbnasError, UsageError, brief


def load_dataset(data_dir: str | Path, kind: str = "cifar10", resolution: int = 32) -> Dataset:
    """Load CIFAR-10 (python format) or an image folder into memory as uint8 tensors."""
    if kind == "cifar10":
        if resolution != 32:
            raise UsageError(f"CIFAR-10 images are 32x32 but resolution {resolution} was asked "
                             "for; use a search space with 32x32 input or an image folder")
        return load_cifar10(data_dir)
    if kind == "folder":
        return load_image_folder(scan_folder(data_dir), resolution)
    raise UsageError(f"unknown dataset kind {brief(kind)}; use 'cifar10' or 'folder'")


def load_image_folder(index: FolderIndex, resolution: int, skip_bad: bool = False) -> Dataset:
    """Decode a scanned folder's images into R x R uint8 tensors, all at once.

    Every image is scaled so its shorter side is ``resolution`` and centre-cropped to a square,
    once, at load time; the whole set then sits in memory (N * 3 * R * R bytes), which suits
    small datasets only (larger ones stream, see ``fbnas.data.stream``). With ``skip_bad`` an
    image that fails to decode is dropped and added to ``index.skipped``.
    """
    check_resolution(resolution)
    train_x, train_y = _decode_split(index, index.train, resolution, skip_bad)
    test_x = test_y = None
    if index.test is not None:
        test_x, test_y = _decode_split(index, index.test, resolution, skip_bad)
    mean, std = channel_stats(train_x)
    return Dataset(train_x, train_y, test_x, test_y, index.classes, mean, std,
                   kind="folder", source=str(index.root), skipped=index.skipped)


def _decode_split(index: FolderIndex, split, resolution: int, skip_bad: bool):
    from PIL import Image, ImageOps

    out = np.empty((len(split.files), resolution, resolution, 3), dtype=np.uint8)
    keep = []
    for n, path in enumerate(split.files):
        try:
            with open_image(path) as img:
                # JPEG can decode at a reduced scale directly, which is much cheaper than
                # decoding the full image only to shrink it.
                img.draft("RGB", (resolution, resolution))
                img = ImageOps.fit(img.convert("RGB"), (resolution, resolution),
                                   Image.Resampling.BICUBIC)
                out[len(keep)] = np.asarray(img)
                keep.append(n)
        except (OSError, ValueError, SyntaxError) as e:
            why = str(e) if isinstance(e, ImageTooLarge) else shown(f"cannot be decoded ({e})")
            if not skip_bad:
                raise FbnasError(f"image {shown(path)} {why}; {SKIP_HINT}") from None
            index.skipped.append((shown(path), why))
    images = torch.from_numpy(out[:len(keep)]).permute(0, 3, 1, 2).contiguous()
    return images, split.labels[torch.tensor(keep, dtype=torch.int64)]
