"""The data of a training run: its splits and the batch loaders over them.

The training images are split once per seed into the search's weight, theta and held-out
(validation) parts (see :func:`fbnas.runs.data.make_splits`); which parts a run trains on is the
run's choice (a search trains on two, a retraining on both together), the held-out part and
the test set are scored the same way by every run. Each process scores a disjoint, unpadded
share of them, so that counts summed over processes cover every image exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fbnas.config import Config
from fbnas.errors import FbnasError
from fbnas.runs.data import BatchLoader, Dataset, load_dataset, make_splits
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


def load_run_data(cfg: Config, info: DistInfo, device: torch.device, resolution: int,
                  num_classes: int, in_channels: int = 3) -> RunData:
    """Load the data set, check it fits the network, split it and build the eval loaders."""
    data = load_dataset(cfg.data.dir, cfg.data.kind, cfg.data.resolution)
    if data.resolution != resolution:
        raise FbnasError(f"the data is {data.resolution}x{data.resolution} but the network "
                         f"expects {resolution}x{resolution} inputs")
    channels = data.train_images.shape[1]
    if channels != in_channels:
        raise FbnasError(f"the data's images have {channels} channels but the network expects "
                         f"{in_channels}-channel inputs; use a space or architecture with "
                         f"input channels: {channels}")
    if len(data.classes) != num_classes:
        raise FbnasError(f"the data has {len(data.classes)} classes but the network's head has "
                         f"{num_classes}")
    n = data.train_images.shape[0]
    if cfg.data.limit:
        n = min(n, cfg.data.limit)
    splits = make_splits(n, cfg.run.seed, cfg.data.theta_fraction, cfg.data.val_fraction)
    common = dict(mean=data.mean, std=data.std, rank=info.rank, world_size=info.world_size,
                  device=device)
    val = eval_batches(cfg, info, data.train_images, data.train_labels, splits["val"], common)
    test = None
    if data.has_test:
        test = eval_batches(cfg, info, data.test_images, data.test_labels,
                            torch.arange(data.test_images.shape[0]), common)
    return RunData(data, splits, common, val, test)


def eval_batches(cfg: Config, info: DistInfo, images, labels, indices, common
                 ) -> BatchLoader | None:
    """This process's share of ``indices``, in order and unaugmented; None if it is empty."""
    share = indices[info.rank::info.world_size]
    if not len(share):
        return None
    opts = {**common, "rank": 0, "world_size": 1}
    return BatchLoader(images, labels, share, cfg.data.eval_batch_size, train=False, seed=0,
                       drop_last=False, **opts)


def train_batches(cfg: Config, data: Dataset, indices: torch.Tensor, seed: int, **common
                  ) -> BatchLoader:
    """A shuffled, augmented (unless data.augment is false) loader over ``indices``."""
    aug = cfg.data.augment
    return BatchLoader(data.train_images, data.train_labels, indices, cfg.data.batch_size,
                       train=True, seed=seed, drop_last=True, padding=4 if aug else 0,
                       flip=aug, **common)
