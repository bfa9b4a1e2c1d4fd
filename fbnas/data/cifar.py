"""CIFAR-10 in its python format: checking, reading and downloading the batch files.

The five training batches and the test batch are pickles; they are read with an unpickler
that accepts what numpy arrays need and nothing else, so a crafted file cannot run code.
Every field is then checked: a damaged or foreign file is a one-line error naming it and the
expected layout, never a wrong label or a traceback.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import torch

from fbnas.data.dataset import Dataset
from fbnas.errors import FbnasError

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
