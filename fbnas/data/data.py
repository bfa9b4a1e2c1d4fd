"""Training input: CIFAR-10 and small image folders as uint8 tensors, splits, augmentation.

These datasets are held whole in memory as ``uint8`` tensors of shape N x 3 x R x R with
``int64`` labels; augmentation and normalisation run on a whole batch at once with tensor
ops, so the input pipeline needs no worker processes and costs little next to a supernet
step. Image folders too large for that are streamed from disk instead (``fbnas.data.stream``).

Reproducibility: the shuffle order and the augmentation of an epoch depend only on
``(seed, epoch)`` (and the rank, for augmentation), so a resumed run sees the same batches as
an uninterrupted one.
"""

from __future__ import annotations

import io
import math
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from fbnas.errors import FbnasError, UsageError
from fbnas.data.folders import SKIP_HINT, FolderIndex, check_resolution, scan_folder

CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST_FILE = "test_batch"
CIFAR_LAYOUT = (f"{CIFAR_FOLDER}/data_batch_1..5 and test_batch (CIFAR-10 python format, "
                "each a pickled dict with 'data': uint8 N x 3072 and 'labels': N ints in 0..9)")
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer",
                 "dog", "frog", "horse", "ship", "truck")
# Per-channel statistics of the 50,000 CIFAR-10 training images (in 0..1 units); the usual
# published constants, kept fixed so that runs on a subset normalise like runs on the full set.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)

# The only globals a CIFAR-10 batch pickle needs (numpy arrays and, from Python 3 writers,
# bytes encoded as latin-1 text). Anything else is refused, so a crafted file cannot run code.
_PICKLE_GLOBALS = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),
}


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


def load_dataset(data_dir: str | Path, kind: str = "cifar10", resolution: int = 32) -> Dataset:
    """Load CIFAR-10 (python format) or an image folder into memory as uint8 tensors."""
    if kind == "cifar10":
        if resolution != 32:
            raise UsageError(f"CIFAR-10 images are 32x32 but resolution {resolution} was asked "
                             "for; use a search space with 32x32 input or an image folder")
        return load_cifar10(data_dir)
    if kind == "folder":
        return load_image_folder(scan_folder(data_dir), resolution)
    raise UsageError(f"unknown dataset kind {kind!r}; use 'cifar10' or 'folder'")


# ----------------------------------------------------------------------------- CIFAR-10


def cifar10_folder(data_dir: str | Path) -> Path:
    """The folder holding the batch files: DIR/cifar-10-batches-py, or DIR itself."""
    data_dir = Path(data_dir)
    expected = f"expected {data_dir}/{CIFAR_LAYOUT}; pass --download to fetch it"
    if not data_dir.is_dir():
        raise FbnasError(f"data directory {data_dir} does not exist: point --data-dir (data.dir) "
                         f"at your CIFAR-10 copy, {expected}")
    if (data_dir / CIFAR_FOLDER).is_dir():
        return data_dir / CIFAR_FOLDER
    if (data_dir / CIFAR_TRAIN_FILES[0]).exists():
        return data_dir
    raise FbnasError(f"no CIFAR-10 data in {data_dir}: {expected}")


def load_cifar10(data_dir: str | Path) -> Dataset:
    """Read the 5 training batches and the test batch, whatever their number of images."""
    folder = cifar10_folder(data_dir)
    missing = [n for n in (*CIFAR_TRAIN_FILES, CIFAR_TEST_FILE) if not (folder / n).is_file()]
    if missing:
        raise FbnasError(f"{folder} lacks {', '.join(missing)}: expected "
                         f"{folder.parent}/{CIFAR_LAYOUT}; pass --download to fetch it")
    classes = _cifar_classes(folder)
    parts = [_read_cifar_batch(folder / n, len(classes)) for n in CIFAR_TRAIN_FILES]
    train_x = np.concatenate([p[0] for p in parts])
    train_y = np.concatenate([p[1] for p in parts])
    test_x, test_y = _read_cifar_batch(folder / CIFAR_TEST_FILE, len(classes))
    return Dataset(
        train_images=torch.from_numpy(train_x),
        train_labels=torch.from_numpy(train_y),
        test_images=torch.from_numpy(test_x),
        test_labels=torch.from_numpy(test_y),
        classes=classes,
        mean=CIFAR_MEAN,
        std=CIFAR_STD,
        kind="cifar10",
        source=str(folder),
    )


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _unpickle(path: Path) -> object:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise FbnasError(f"cannot read {path}: {e.strerror}") from None
    try:
        # latin-1 is how Python 3 reads the Python 2 pickles of the original archive.
        return _RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except Exception as e:  # a damaged pickle can fail in many ways; all mean the same
        raise FbnasError(f"{path} is truncated or not in CIFAR-10 python format ({e}); "
                         f"expected {path.parent.parent}/{CIFAR_LAYOUT}") from None


def _cifar_classes(folder: Path) -> list[str]:
    meta = folder / "batches.meta"
    if not meta.is_file():
        return list(CIFAR_CLASSES)
    d = _unpickle(meta)
    names = d.get("label_names") if isinstance(d, dict) else None
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise FbnasError(f"{meta} has no 'label_names' list of class names; expected the "
                         "batches.meta of the CIFAR-10 python format (or no such file)")
    return names


def _read_cifar_batch(path: Path, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    d = _unpickle(path)
    layout = f"expected {path.parent.parent}/{CIFAR_LAYOUT}"
    if not isinstance(d, dict) or "data" not in d or "labels" not in d:
        raise FbnasError(f"{path} is not a CIFAR-10 batch (no 'data' and 'labels'); {layout}")
    x, y = d["data"], d["labels"]
    if not (isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 2
            and x.shape[1] == 3 * 32 * 32):
        shape = getattr(x, "shape", None)
        raise FbnasError(f"{path}: 'data' is {type(x).__name__} {shape}, not uint8 N x 3072; "
                         f"{layout}")
    try:
        raw = np.asarray(y)
        # a float or string label would be truncated or parsed into another class
        if raw.dtype.kind not in "iu" and raw.size:
            raise TypeError
        y = raw.astype(np.int64)
    except (TypeError, ValueError, OverflowError):
        raise FbnasError(f"{path}: 'labels' is not a list of integers; {layout}") from None
    if y.shape != (x.shape[0],):
        raise FbnasError(f"{path}: {x.shape[0]} images but {y.size} labels; {layout}")
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise FbnasError(f"{path}: labels outside 0..{num_classes - 1}; {layout}")
    # The rows are already channel-major (1024 red, 1024 green, 1024 blue values), so a
    # reshape gives N x 3 x 32 x 32 without touching single images.
    return np.ascontiguousarray(x.reshape(-1, 3, 32, 32)), y


def download_cifar10(root: str | Path) -> Path:
    """Fetch and unpack CIFAR-10 into ROOT/cifar-10-batches-py unless it is already there."""
    root = Path(root)
    folder = root / CIFAR_FOLDER
    if all((folder / n).is_file() for n in (*CIFAR_TRAIN_FILES, CIFAR_TEST_FILE)):
        return folder
    from torchvision.datasets.utils import download_and_extract_archive

    try:
        download_and_extract_archive(CIFAR_URL, str(root), md5=CIFAR_MD5)
    except Exception as e:  # network, disk and checksum failures all end the command
        raise FbnasError(f"cannot download CIFAR-10 from {CIFAR_URL} into {root}: {e}") from None
    return folder


# ----------------------------------------------------------------------------- image folders


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
            with Image.open(path) as img:
                # JPEG can decode at a reduced scale directly, which is much cheaper than
                # decoding the full image only to shrink it.
                img.draft("RGB", (resolution, resolution))
                img = ImageOps.fit(img.convert("RGB"), (resolution, resolution),
                                   Image.Resampling.BICUBIC)
                out[len(keep)] = np.asarray(img)
                keep.append(n)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
            if not skip_bad:
                raise FbnasError(f"image {path} cannot be decoded ({e}); {SKIP_HINT}") from None
            index.skipped.append((path, f"cannot be decoded ({e})"))
    images = torch.from_numpy(out[:len(keep)]).permute(0, 3, 1, 2).contiguous()
    return images, split.labels[torch.tensor(keep, dtype=torch.int64)]


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


# ----------------------------------------------------------------------------- splits


def make_splits(n: int, seed: int, theta_fraction: float = 0.2,
                val_fraction: float = 0.1) -> dict[str, torch.Tensor]:
    """Split indices 0..n-1 into disjoint, covering "weights", "theta" and "val" parts.

    One seeded permutation of the n training images is cut in order: the first
    ``round(n * val_fraction)`` go to "val" (held out: neither optimizer trains on them), then
    ``round(rest * theta_fraction)`` of the remaining ones go to "theta", and everything else
    to "weights". With the defaults and n = 50,000: 5,000 val, 9,000 theta, 36,000 weights.
    Each part is returned sorted (int64); the same (n, seed, fractions) always give the same
    parts. ``val_fraction=0`` gives an empty "val".
    """
    if not 0.0 < theta_fraction < 1.0:
        raise UsageError(f"theta fraction must be strictly between 0 and 1, not {theta_fraction}")
    if not 0.0 <= val_fraction < 1.0:
        raise UsageError(f"val fraction must be in [0, 1), not {val_fraction}")
    g = torch.Generator().manual_seed(_mix_seed(seed, 0x5B1175))
    perm = torch.randperm(n, generator=g)
    n_val = int(round(n * val_fraction))
    n_theta = int(round((n - n_val) * theta_fraction))
    n_weights = n - n_val - n_theta
    if n_weights < 1 or n_theta < 1 or (val_fraction > 0 and n_val < 1):
        raise FbnasError(f"{n} training images are too few to split into weights/theta/val "
                         f"with theta fraction {theta_fraction} and val fraction {val_fraction}")
    parts = {
        "weights": perm[n_val + n_theta:],
        "theta": perm[n_val:n_val + n_theta],
        "val": perm[:n_val],
    }
    return {k: v.sort().values for k, v in parts.items()}


def _mix_seed(*parts: int) -> int:
    """One well-mixed 64-bit generator seed from several integers (seed, epoch, stream...)."""
    words = [int(p) & 0xFFFF_FFFF_FFFF_FFFF for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, dtype=np.uint64)[0])


# ----------------------------------------------------------------------------- augmentation


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


# ----------------------------------------------------------------------------- loader


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
            g = torch.Generator().manual_seed(_mix_seed(self.seed, self.epoch, 1))
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
        g = torch.Generator().manual_seed(_mix_seed(self.seed, self.epoch, 2, self.rank))
        src = self.images.device
        for k in range(len(self)):
            idx = order[k * self.batch_size:(k + 1) * self.batch_size].to(src)
            # index_select copies whole rows; plain indexing goes element by element on CPU.
            x = self.images.index_select(0, idx).to(self.device, non_blocking=True)
            y = self.labels.index_select(0, idx).to(self.device, non_blocking=True)
            if self.train:
                x = augment(x, g, self.padding, self.flip)
            yield x.to(torch.float32).mul_(self._scale).add_(self._shift), y
