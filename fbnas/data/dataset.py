"""The dataset record every data source fills in and every loader reads.

CIFAR-10 (``fbnas.data.cifar``) and small image folders (``fbnas.data.memory``) arrive as
``uint8`` tensors of shape N x 3 x R x R with ``int64`` labels; a folder too large for memory
arrives as its file list (``fbnas.data.stream``). One record for all of them lets a run's
loaders and checks ask the same questions (resolution, channels, classes, test split) of
each. The per-channel mean and std it carries are what the loaders normalise with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fbnas.data.folders import FolderIndex
from fbnas.errors import FbnasError


@dataclass(eq=False)  # tensors have no single truth value for ==
class Dataset:
    """uint8 N x 3 x R x R images and int64 labels; test_* are None without a test split.

    A streamed folder (``files`` set) holds no images: ``train_images`` and ``test_images``
    are None and ``files`` lists what the loaders decode, batch by batch."""

    train_images: torch.Tensor | None
    train_labels: torch.Tensor
    test_images: torch.Tensor | None
    test_labels: torch.Tensor | None
    classes: list[str]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    kind: str = "cifar10"
    source: str = ""
    #: for a streamed folder: the scan (files per split, what was skipped)
    files: FolderIndex | None = None
    #: side length the loaders produce; taken from the images when they are in memory
    size: int = 0
    #: how the data is served and why, for the run's start line
    how: str = ""
    #: decoding processes per training process (streamed folders)
    workers: int = 0
    #: (path, why) of every file or class folder skipped under data.skip_bad
    skipped: list = field(default_factory=list)

    @property
    def streamed(self) -> bool:
        return self.files is not None

    @property
    def has_test(self) -> bool:
        """Whether the dataset came with a separate test split."""
        return self.test_labels is not None

    @property
    def resolution(self) -> int:
        """Side length of the (square) images."""
        return self.size or int(self.train_images.shape[-1])

    @property
    def channels(self) -> int:
        return 3 if self.streamed else int(self.train_images.shape[1])

    def __len__(self) -> int:
        return int(self.train_labels.shape[0])


def channel_stats(images: torch.Tensor, chunk: int = 64) -> tuple[tuple, tuple]:
    """Per-channel mean and std (0..1 units) of uint8 N x 3 x H x W images."""
    if images.shape[0] == 0:
        raise FbnasError("cannot compute channel statistics of an empty image set")
    s = torch.zeros(3, dtype=torch.float64)
    s2 = torch.zeros(3, dtype=torch.float64)
    # Chunks keep the float64 copy small for large images.
    for start in range(0, images.shape[0], chunk):
        x = images[start:start + chunk].to(torch.float64) / 255.0
        s += x.sum(dim=(0, 2, 3))
        s2 += (x * x).sum(dim=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = s / count
    std = (s2 / count - mean * mean).clamp_min(1e-12).sqrt()
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)
