"""The data of a training run: its splits and the batch loaders over them.

The training images are split once per seed into the search's weight, theta and held-out
(validation) parts (see :func:`fbnas.data.splits.make_splits`); which parts a run trains on is the
run's choice (a search trains on two, a retraining on both together), the held-out part and
the test set are scored the same way by every run. Each process scores a disjoint, unpadded
share of them, so that counts summed over processes cover every image exactly once.

CIFAR-10 and small image folders are held in memory (:class:`~fbnas.data.batches.BatchLoader`);
larger folders are streamed from disk by worker processes
(:class:`~fbnas.data.stream.StreamLoader`). ``data.loader: auto`` decides by the size the
decoded images would take against ``data.memory_mb``, and the run's log says which it chose.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from fbnas.config import Config
from fbnas.data.batches import BatchLoader
from fbnas.data.cifar import load_cifar10
from fbnas.data.dataset import Dataset
from fbnas.data.folders import read_class_list, scan_folder, shown
from fbnas.data.memory import load_image_folder
from fbnas.data.splits import make_splits
from fbnas.errors import FbnasError, UsageError
from fbnas.machine import keep_freed_memory
from fbnas.runs.dist import DistInfo


@dataclass
class RunData:
    data: Dataset
    splits: dict[str, torch.Tensor]
    #: BatchLoader options every loader of this process shares
    common: dict
    val_loader: BatchLoader | None
    test_loader: BatchLoader | None

    @property
    def classes(self) -> int:
        return len(self.data.classes)


def default_workers(world_size: int) -> int:
    """Decoding processes per training process: the usable cores left after one for each
    training process, shared among them, at least 1 and at most 8."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(8, (cores or 1) // world_size - 1))


def open_dataset(cfg: Config, resolution: int, world_size: int = 1) -> Dataset:
    """The run's data set: CIFAR-10 in memory, or an image folder in memory or streamed.

    ``resolution`` is the network's input side, which the images follow unless data.resolution
    says otherwise."""
    d = cfg.data
    size = d.resolution or resolution
    if d.kind == "cifar10":
        if size != 32:
            raise UsageError(f"CIFAR-10 images are 32x32 but the run asks for {size}x{size}; use "
                             "a search space with 32x32 input or an image folder "
                             "(data.kind: folder)")
        data = load_cifar10(d.dir)
        data.how = "CIFAR-10, in memory"
        return data
    classes = read_class_list(d.classes) if d.classes else None
    index = scan_folder(d.dir, classes, d.skip_bad)
    images = len(index.train) + (len(index.test) if index.test else 0)
    mb = images * 3 * size * size / 2**20
    stream = d.loader == "stream" or (d.loader == "auto" and mb > d.memory_mb)
    why = (f"data.loader: {d.loader}" if d.loader != "auto" else
           f"decoded they would take {mb:,.0f} MB, " + ("above" if stream else "within")
           + f" data.memory_mb {d.memory_mb}")
    if not stream:
        data = load_image_folder(index, size, d.skip_bad)
        data.how = (f"image folder {shown(index.root)}, {images} images decoded into memory "
                    f"at {size}x{size} ({why})")
        return data
    from fbnas.data.stream import check_decodes, sample_stats

    if cfg.run.keep_freed_memory:
        # batches from the workers would fragment a heap that never shrinks: memory would
        # grow with every batch, and so with the data set, which streaming exists to avoid
        keep_freed_memory(False)
    workers = d.workers if d.workers >= 0 else default_workers(world_size)
    check_decodes(index, workers, d.skip_bad)
    images = len(index.train) + (len(index.test) if index.test else 0)  # those that decode
    mean, std = sample_stats(index.train.files, size)
    test = index.test.labels if index.test is not None else None
    data = Dataset(None, index.train.labels, None, test, index.classes, mean, std, kind="folder",
                   source=str(index.root), files=index, size=size, workers=workers,
                   skipped=index.skipped)
    data.how = (f"image folder {shown(index.root)}, {images} images streamed at {size}x{size} "
                f"by {workers} worker process(es) per training process ({why}), each decoded "
                f"once before training to check it; mean/std "
                f"estimated on {min(256, len(index.train))} training images")
    return data


def load_run_data(cfg: Config, info: DistInfo, device: torch.device, resolution: int,
                  num_classes: int, in_channels: int = 3) -> RunData:
    """Load the data set, check it fits the network, split it and build the eval loaders."""
    data = open_dataset(cfg, resolution, info.world_size)
    if data.resolution != resolution:
        raise FbnasError(f"the data is {data.resolution}x{data.resolution} but the network "
                         f"expects {resolution}x{resolution} inputs; set data.resolution: 0 "
                         "(the network's) or use a space of that resolution")
    if data.channels != in_channels:
        raise FbnasError(f"the data's images have {data.channels} channels but the network "
                         f"expects {in_channels}-channel inputs; use a space or architecture "
                         f"with input channels: {data.channels}")
    if len(data.classes) != num_classes:
        raise FbnasError(f"the data has {len(data.classes)} classes but the network's head has "
                         f"{num_classes}")
    n = len(data)
    if cfg.data.limit:
        n = min(n, cfg.data.limit)
    splits = make_splits(n, cfg.run.seed, cfg.data.theta_fraction, cfg.data.val_fraction)
    common = dict(mean=data.mean, std=data.std, rank=info.rank, world_size=info.world_size,
                  device=device)
    val = eval_batches(cfg, info, data, "train", splits["val"], common)
    test = None
    if data.has_test:
        test = eval_batches(cfg, info, data, "test", torch.arange(len(data.test_labels)), common)
    return RunData(data, splits, common, val, test)


def loader(cfg: Config, data: Dataset, split: str, indices: torch.Tensor, batch_size: int,
           train: bool, seed: int, drop_last: bool, **common) -> BatchLoader:
    """A loader over ``indices`` of ``split`` ("train" or "test"), of the data's kind."""
    aug = cfg.data.augment
    if data.streamed:
        from fbnas.data.stream import StreamLoader

        part = data.files.train if split == "train" else data.files.test
        return StreamLoader(part.files, part.labels, indices, batch_size, train=train, seed=seed,
                            drop_last=drop_last, size=data.size, workers=data.workers,
                            skip_bad=cfg.data.skip_bad, augment=aug, **common)
    images, labels = ((data.train_images, data.train_labels) if split == "train"
                      else (data.test_images, data.test_labels))
    return BatchLoader(images, labels, indices, batch_size, train=train, seed=seed,
                       drop_last=drop_last, padding=4 if aug else 0, flip=aug, **common)


def eval_batches(cfg: Config, info: DistInfo, data: Dataset, split: str, indices, common
                 ) -> BatchLoader | None:
    """This process's share of ``indices``, in order and unaugmented; None if it is empty."""
    share = indices[info.rank::info.world_size]
    if not len(share):
        return None
    opts = {**common, "rank": 0, "world_size": 1}
    return loader(cfg, data, split, share, cfg.data.eval_batch_size, train=False, seed=0,
                  drop_last=False, **opts)


def train_batches(cfg: Config, data: Dataset, indices: torch.Tensor, seed: int, **common
                  ) -> BatchLoader:
    """A shuffled, augmented (unless data.augment is false) loader over ``indices``."""
    return loader(cfg, data, "train", indices, cfg.data.batch_size, train=True, seed=seed,
                  drop_last=True, **common)


def skipped_files(data: Dataset, loaders) -> list[tuple[str, str]]:
    """Every file skipped under data.skip_bad so far: at the scan and by the loaders."""
    out = list(data.skipped)
    seen = {p for p, _ in out}
    for ld in loaders:
        for path, why in getattr(ld, "bad", {}).items():
            if path not in seen:
                seen.add(path)
                out.append((path, why))
    return out
