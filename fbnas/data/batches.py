"""Batches of in-memory images: shuffle, sharding, augmentation and normalisation.

:class:`BatchLoader` serves an index subset of uint8 images in batches; augmentation (random
crop after padding, horizontal flip) and normalisation run on a whole batch with tensor ops.
Its order, sharding and batching are shared by the streaming loader
(``fbnas.data.stream``), which decodes the same batches from files instead.

Reproducibility: the shuffle order and the augmentation of an epoch depend only on
``(seed, epoch)`` (and the rank, for augmentation), so a resumed run sees the same batches as
an uninterrupted one.
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import torch

from fbnas.data.splits import mix_seed
from fbnas.errors import FbnasError, UsageError


def augment(images: torch.Tensor, generator: torch.Generator, padding: int = 4,
            flip: bool = True) -> torch.Tensor:
    """Random crop after zero padding and random horizontal flip of a uint8 batch, loop-free.

    Offsets and flips are drawn from ``generator`` (a CPU generator, so the result does not
    depend on the device the batch lives on). The padded batch is viewed (no copy) as every
    possible crop window per image, and one indexing call picks each image's own window.
    """
    b, c, h, w = images.shape
    dev = images.device
    dy = torch.randint(0, 2 * padding + 1, (b,), generator=generator).to(dev)
    dx = torch.randint(0, 2 * padding + 1, (b,), generator=generator).to(dev)
    mirrored = torch.rand(b, generator=generator) < 0.5
    padded = torch.nn.functional.pad(images, (padding,) * 4) if padding else images
    windows = padded.unfold(2, h, 1).unfold(3, w, 1)  # B x C x (2p+1) x (2p+1) x H x W
    out = windows[torch.arange(b, device=dev), :, dy, dx]
    if not flip:
        return out
    # Picking from [batch, flipped batch] by index is several times cheaper on CPU than a
    # broadcast torch.where over every pixel.
    pick = torch.arange(b) + b * mirrored.long()
    return torch.cat([out, out.flip(3)]).index_select(0, pick.to(dev))


def normalize(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 N x 3 x H x W -> float32 (x / 255 - mean) / std."""
    scale, shift = _affine(mean, std, images.device)
    return images.to(torch.float32).mul_(scale).add_(shift)


def _affine(mean, std, device) -> tuple[torch.Tensor, torch.Tensor]:
    m = torch.tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    return 1.0 / (255.0 * s), -m / s


class BatchLoader:
    """Batches of (float32 normalised images, int64 labels) from an index subset of a dataset.

    In train mode each epoch shuffles ``indices`` with a generator seeded by (seed, epoch)
    and augments (random crop with ``padding`` and horizontal flip) with one seeded by
    (seed, epoch, rank); call ``set_epoch`` before each epoch, as with DistributedSampler.
    Iterating twice in the same epoch gives the same batches, so a run resumed at epoch k
    reproduces the batches of an uninterrupted one. In eval mode the order is ``indices``
    as given and nothing is augmented.

    Sharding (``world_size`` > 1): every rank builds the same epoch order, makes its length
    a multiple of ``world_size`` (dropping the tail if ``drop_last``, else repeating the
    first few indices, at most world_size - 1 of them), and takes every world_size-th index
    starting at ``rank``. The ranks' parts are then equal-sized and disjoint (apart from
    the repeats when padding). ``drop_last`` also drops a last batch smaller than
    ``batch_size``.

    Images are indexed where they live (usually the CPU) and each uint8 batch is moved to
    ``device`` before augmentation and normalisation, which moves 4x fewer bytes than floats.
    """

    def __init__(self, images_uint8: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor,
                 batch_size: int, train: bool, seed: int, drop_last: bool,
                 mean: Sequence[float], std: Sequence[float], device: str | torch.device = "cpu",
                 rank: int = 0, world_size: int = 1, padding: int = 4, flip: bool = True):
        if images_uint8.dtype != torch.uint8 or images_uint8.dim() != 4:
            raise ValueError("images must be a uint8 N x C x H x W tensor")
        if labels.shape[0] != images_uint8.shape[0]:
            raise ValueError("images and labels differ in length")
        self.images = images_uint8
        self.padding = padding
        self.flip = flip
        self._setup(labels, indices, batch_size, train, seed, drop_last, mean, std, device, rank,
                    world_size)

    def _setup(self, labels: torch.Tensor, indices, batch_size: int, train: bool, seed: int,
               drop_last: bool, mean: Sequence[float], std: Sequence[float],
               device: str | torch.device, rank: int, world_size: int) -> None:
        """What every loader shares: the index subset, its sharding, order and batching."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..world_size-1 ({world_size})")
        if batch_size < 1:
            raise UsageError(f"batch size must be at least 1, not {batch_size}")
        indices = torch.as_tensor(indices, dtype=torch.int64).flatten()
        if indices.numel() and (indices.min() < 0 or indices.max() >= labels.shape[0]):
            raise ValueError("indices out of range of the images")
        self.labels = labels
        self.indices = indices
        self.batch_size = batch_size
        self.train = train
        self.seed = seed
        self.drop_last = drop_last
        self.device = torch.device(device)
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.dry_run(False)
        self._scale, self._shift = _affine(mean, std, self.device)
        if len(self) == 0:
            raise FbnasError(f"{indices.numel()} images make no batch of {batch_size} on each of "
                             f"{world_size} process(es); lower the batch size or use more data")

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose shuffle order and augmentation the next iteration uses."""
        self.epoch = int(epoch)

    @property
    def samples_per_rank(self) -> int:
        """How many images this rank sees per epoch (before dropping a short last batch)."""
        n, ws = self.indices.numel(), self.world_size
        return n // ws if self.drop_last else -(-n // ws)

    def __len__(self) -> int:
        per = self.samples_per_rank
        return per // self.batch_size if self.drop_last else -(-per // self.batch_size)

    def epoch_indices(self) -> torch.Tensor:
        """This rank's dataset indices for the current epoch, in the order they are served."""
        order = self.indices
        if self.train:
            g = torch.Generator().manual_seed(mix_seed(self.seed, self.epoch, 1))
            order = order[torch.randperm(order.numel(), generator=g)]
        ws = self.world_size
        if ws > 1:
            n = order.numel()
            if self.drop_last:
                order = order[: n - n % ws]
            elif n % ws:
                extra = ws - n % ws
                order = torch.cat([order, order.repeat(math.ceil(extra / n))[:extra]])
            order = order[self.rank::ws]
        return order

    def dry_run(self, on: bool) -> None:
        """While on, iterating yields ``(loader, iteration, batch number)`` tokens instead of
        batches, and counts the iterations: how a trainer finds which batches of a resumed
        epoch it will discard (see :meth:`skip_leading`)."""
        self._dry, self._iterations, self._skips = on, 0, []

    def skip_leading(self, counts: list[int]) -> None:
        """The leading batches of each coming iteration that the caller will discard; a
        loader whose later batches do not depend on them yields None for them instead of
        making them (the in-memory loader's augmentation draws from one generator batch by
        batch, so it makes them all)."""
        self._skips = list(counts)

    def _tokens(self):
        it = self._iterations
        self._iterations += 1
        for k in range(len(self)):
            yield self, it, k

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._dry:
            yield from self._tokens()
            return
        order = self.epoch_indices()
        g = torch.Generator().manual_seed(mix_seed(self.seed, self.epoch, 2, self.rank))
        src = self.images.device
        for k in range(len(self)):
            idx = order[k * self.batch_size:(k + 1) * self.batch_size].to(src)
            # index_select copies whole rows; plain indexing goes element by element on CPU.
            x = self.images.index_select(0, idx).to(self.device, non_blocking=True)
            y = self.labels.index_select(0, idx).to(self.device, non_blocking=True)
            if self.train:
                x = augment(x, g, self.padding, self.flip)
            yield x.to(torch.float32).mul_(self._scale).add_(self._shift), y
