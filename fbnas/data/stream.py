"""Image folders streamed from disk: decoded and augmented per batch by worker processes.

Memory then holds the file list, not the pixels, so a dataset of any size fits (ImageNet-100
at 224 px would be about 19 GB decoded). Augmentation follows ImageNet training recipes:
RandomResizedCrop (scale 0.08..1, aspect 3/4..4/3) to the network's resolution and a
horizontal flip for training; for evaluation the shorter side is resized to R / 0.875 and the
centre R x R cropped (256 -> 224 at ImageNet's size).

Reproducibility: the loader shares :class:`fbnas.data.batches.BatchLoader`'s order and sharding,
a function of (seed, epoch, rank), and each image's crop and flip are drawn from a generator
seeded by (seed, epoch, rank, image index). Which worker decodes an image therefore changes
nothing: 0, 1 or 8 workers give the same batches, and a resumed run sees the batches of an
uninterrupted one. Workers only decode; batches come back as uint8 (4x fewer bytes than
floats) and are normalised where they are used.
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np
import torch

from fbnas.data.batches import BatchLoader
from fbnas.data.dataset import channel_stats
from fbnas.data.folders import SKIP_HINT, FolderIndex, drop_unreadable, open_rgb, shown
from fbnas.data.splits import mix_seed
from fbnas.errors import FbnasError

#: the shorter side is resized to resolution / EVAL_CROP before the centre crop
EVAL_CROP = 0.875
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)
#: seconds a batch may take before a stuck worker is reported (a hung network mount, say)
WORKER_TIMEOUT = 600


def crop_box(h: int, w: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(top, left, height, width) of a random crop covering CROP_SCALE of the area with an
    aspect ratio in CROP_RATIO, drawn as RandomResizedCrop draws it: up to 10 tries, then
    the largest central crop within the ratio range."""
    area = h * w
    lo, hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(10):
        target = area * rng.uniform(*CROP_SCALE)
        ratio = math.exp(rng.uniform(lo, hi))
        cw = int(round(math.sqrt(target * ratio)))
        ch = int(round(math.sqrt(target / ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
    if w / h < CROP_RATIO[0]:
        cw, ch = w, int(round(w / CROP_RATIO[0]))
    elif w / h > CROP_RATIO[1]:
        ch, cw = h, int(round(h * CROP_RATIO[1]))
    else:
        ch, cw = h, w
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def train_view(img, size: int, rng: np.random.Generator) -> torch.Tensor:
    """uint8 3 x size x size: a random resized crop of a Pillow image, flipped with
    probability 1/2 (Pillow crops and resizes in one antialiased pass)."""
    from PIL import Image

    top, left, ch, cw = crop_box(img.height, img.width, rng)
    out = img.resize((size, size), Image.Resampling.BILINEAR,
                     box=(left, top, left + cw, top + ch))
    if rng.random() < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return _tensor(out)


def eval_view(img, size: int) -> torch.Tensor:
    """uint8 3 x size x size: the centre of the image with its shorter side resized to
    size / EVAL_CROP, as one crop-and-resize of the original."""
    from PIL import Image

    side = min(img.width, img.height) * EVAL_CROP  # the crop, in original pixels
    left, top = (img.width - side) / 2, (img.height - side) / 2
    out = img.resize((size, size), Image.Resampling.BILINEAR,
                     box=(left, top, left + side, top + side))
    return _tensor(out)


def _tensor(img) -> torch.Tensor:
    return torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).contiguous()


class _Images(torch.utils.data.Dataset):
    """Decodes and transforms single images for the workers; one instance per epoch."""

    def __init__(self, files: list[str], labels: torch.Tensor, size: int, augment: bool,
                 seed: int, epoch: int, rank: int):
        self.files, self.labels, self.size, self.augment = files, labels, size, augment
        self.seed, self.epoch, self.rank = seed, epoch, rank

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        path = self.files[i]
        try:
            img = open_rgb(path)
        except ValueError as e:
            return None, int(self.labels[i]), (path, f"cannot be decoded ({e})")
        if self.augment:
            rng = np.random.default_rng(mix_seed(self.seed, self.epoch, 2, self.rank, i))
            img = train_view(img, self.size, rng)
        else:
            img = eval_view(img, self.size)
        return img, int(self.labels[i]), None


def _collate(items):
    good = [(x, y) for x, y, bad in items if bad is None]
    bad = [bad for _, _, bad in items if bad is not None]
    if not good:
        return None, None, bad
    return (torch.stack([x for x, _ in good]),
            torch.tensor([y for _, y in good], dtype=torch.int64), bad)


class StreamLoader(BatchLoader):
    """Batches of (float32 normalised images, int64 labels) decoded from image files.

    The order, sharding and batching are BatchLoader's; ``workers`` processes decode (0:
    this process). With ``skip_bad`` an image that fails to decode is left out of its batch
    and recorded in ``bad``; without, it is a one-line error naming the file.
    """

    def __init__(self, files: list[str], labels: torch.Tensor, indices: torch.Tensor,
                 batch_size: int, train: bool, seed: int, drop_last: bool,
                 mean: Sequence[float], std: Sequence[float], size: int, workers: int = 0,
                 skip_bad: bool = False, device: str | torch.device = "cpu", rank: int = 0,
                 world_size: int = 1, augment: bool = True):
        if len(files) != labels.shape[0]:
            raise ValueError("files and labels differ in length")
        self.files, self.size, self.workers = files, size, workers
        self.skip_bad, self.augment = skip_bad, augment
        #: path -> why, for every image skipped so far
        self.bad: dict[str, str] = {}
        self._setup(labels, indices, batch_size, train, seed, drop_last, mean, std, device, rank,
                    world_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor] | None]:
        if self._dry:
            yield from self._tokens()
            return
        skip = self._skips.pop(0) if self._skips else 0
        order = self.epoch_indices().tolist()
        batches = [order[k * self.batch_size:(k + 1) * self.batch_size]
                   for k in range(skip, len(self))]
        # every image's view is seeded by its own index, so leaving out batches a resumed
        # epoch discards changes none of the others: they are not decoded at all
        for _ in range(skip):
            yield None
        if not batches:
            return
        images = _Images(self.files, self.labels, self.size, self.train and self.augment,
                         self.seed, self.epoch, self.rank)
        loader = torch.utils.data.DataLoader(
            images, batch_sampler=batches, num_workers=self.workers, collate_fn=_collate,
            pin_memory=self.device.type == "cuda",
            timeout=WORKER_TIMEOUT if self.workers else 0,
            # the loader draws its workers' base seed from this generator; from the global
            # one it would shift the Gumbel noise of a resumed run (nothing here uses it)
            generator=torch.Generator().manual_seed(0))
        it = iter(loader)
        try:
            yield from self._batches(it, len(batches))
        finally:
            # workers left running by an error hold copies of the run's descriptors (its
            # lock among them) for as long as the error's traceback is kept
            _stop_workers(it)

    def _batches(self, it, count: int):
        for _ in range(count):
            try:
                x, y, bad = next(it)
            except RuntimeError as e:  # a worker killed (out of memory?) or timed out
                raise FbnasError(f"reading images from {self.source()} failed: "
                                 f"{str(e).splitlines()[0]}; lower data.workers or "
                                 "data.batch_size") from None
            for path, why in bad:
                if not self.skip_bad:
                    # every image decoded when the run started: this one changed since. Left
                    # out, it would change the splits, which a resumed run must keep
                    raise FbnasError(f"image {shown(path)} {why}, though it decoded when the "
                                     "run started; restore it and resume the run (--resume), "
                                     "or remove it (or set data.skip_bad: true) and start "
                                     "over (--force)")
                self.bad[shown(path)] = why
            if x is None:
                raise FbnasError(f"every image of a batch of {self.source()} failed to decode "
                                 f"(first: {shown(bad[0][0])}); check the folder")
            x = x.to(self.device, non_blocking=True)
            yield (x.to(torch.float32).mul_(self._scale).add_(self._shift),
                   y.to(self.device, non_blocking=True))

    def source(self) -> str:
        from pathlib import Path

        return shown(Path(self.files[0]).parent.parent) if self.files else "the image folder"


class _Decodes(torch.utils.data.Dataset):
    """Decodes single images for :func:`check_decodes`: (index, why it failed or None)."""

    def __init__(self, files: list[str]):
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        try:
            open_rgb(self.files[i])
        except ValueError as e:
            return i, f"cannot be decoded ({e})"
        return i, None


def _stop_workers(it) -> None:
    """End the worker processes of a DataLoader iterator now, not when it is collected."""
    stop = getattr(it, "_shutdown_workers", None)
    if stop is not None:
        stop()


def _items(items):
    return items


def check_decodes(index: FolderIndex, workers: int, skip_bad: bool) -> None:
    """Decode every image of ``index`` once, in ``workers`` processes, before anything trains,
    as the in-memory loader does: the scan reads headers only, and a file damaged further in
    (a truncated JPEG) would otherwise pass it and stop the run when a batch first meets it.
    An image that fails is a one-line error naming it, or with ``skip_bad`` is dropped from
    its split and added to ``index.skipped``."""
    for part in (index.train, index.test):
        if part is None:
            continue
        loader = torch.utils.data.DataLoader(
            _Decodes(part.files), batch_size=32, num_workers=workers, collate_fn=_items,
            timeout=WORKER_TIMEOUT if workers else 0)
        bad: dict[int, str] = {}
        it = iter(loader)
        try:
            for batch in it:
                bad.update((i, why) for i, why in batch if why is not None)
        except RuntimeError as e:  # a worker killed (out of memory?) or timed out
            raise FbnasError(f"checking the images of {shown(index.root)} failed: "
                             f"{str(e).splitlines()[0]}; lower data.workers") from None
        finally:
            _stop_workers(it)
        if bad:
            drop_unreadable(index, part, bad, skip_bad)


def sample_stats(files: list[str], size: int, count: int = 256) -> tuple[tuple, tuple]:
    """Per-channel mean and std (0..1 units) estimated on ``count`` training images drawn
    with a fixed seed and viewed as for evaluation: they depend on the folder alone, and cost
    a few seconds instead of a pass over the whole set."""
    rng = np.random.default_rng(0)
    pick = sorted(rng.choice(len(files), size=min(count, len(files)), replace=False).tolist())
    views = []
    for i in pick:
        try:
            views.append(eval_view(open_rgb(files[i]), size))
        except ValueError:
            continue  # reported when a loader reaches it
    if not views:
        raise FbnasError(f"none of {len(pick)} images sampled from {files[0]}'s folder decodes; "
                         "check the folder")
    return channel_stats(torch.stack(views))
