"""The training images that calibrate int8 quantization, drawn one way for every caller.

``fbnas export --precision int8`` calibrates one network and ``fbnas profile --bundle
--precision int8`` the bundle's calibration networks; both draw a seeded random subset of a
CIFAR-10 folder's training images and normalise it as training does, so the same folder and
seed give the same images in both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fbnas.errors import FbnasError, UsageError
from fbnas.data.batches import normalize
from fbnas.data.cifar import CIFAR_FOLDER, CIFAR_TRAIN_FILES
from fbnas.data.dataset import Dataset
from fbnas.data.memory import load_dataset


def draw(data: Dataset, n: int, seed: int) -> np.ndarray:
    """``n`` training images of ``data`` (all of them if it has fewer) drawn with ``seed``,
    normalised with the data set's mean and std as training normalises them
    (``fbnas.data.batches.BatchLoader``), as a float32 array."""
    pick = torch.randperm(len(data.train_images), generator=torch.Generator().manual_seed(seed))
    return normalize(data.train_images[pick[:n]], data.mean, data.std).numpy()


def bundle_images(data_dir: str | Path, resolution: int, seed: int) -> np.ndarray:
    """The images that calibrate an int8 bundle's networks: as many as
    ``fbnas.latency.bundle.NETWORK_CALIBRATION_IMAGES`` from the CIFAR-10 folder
    ``data_dir`` at the space's ``resolution``."""
    from fbnas.latency.bundle import NETWORK_CALIBRATION_IMAGES

    data = load_dataset(data_dir, "cifar10", resolution=resolution)
    return draw(data, NETWORK_CALIBRATION_IMAGES, seed)



def bundle_command(space_name: str | Path, out: Path, data_dir: str | Path | None,
                   precision: str = "fp32", batch: int = 1, networks: int = 50, seed: int = 0,
                   jobs: int = 0, force: bool = False,
                   echo: Callable[[str], None] = print) -> dict:
    """``fbnas profile --bundle`` once its options are parsed (and ``check_mode`` passed
    them): the space ``space_name`` as a device bundle in ``out``, its int8 networks
    calibrated on :func:`bundle_images` of ``data_dir``. It sits here, not in
    fbnas.latency.profiling, because reading a data set is above the latency step."""
    from fbnas.arch.space import load_space
    from fbnas.latency.profiling import bundle_for_device

    space = load_space(space_name)
    # check_mode lets --data-dir through only with --precision int8
    images = None if data_dir is None else bundle_images(data_dir, space.resolution, seed)
    return bundle_for_device(
        space, out, str(space_name), precision=precision, batch=batch, networks=networks,
        seed=seed, images=images, images_source=None if images is None else str(data_dir),
        jobs=jobs, force=force, echo=echo)

def network_data(data_dir: str | Path, defn: dict, n_images: int) -> Dataset:
    """The CIFAR-10 folder ``data_dir`` loaded for the network ``defn``, checked before
    minutes of quantizing: that it holds CIFAR-10 at all, that its images and classes fit the
    network, and that it has ``n_images`` training images to calibrate on."""
    folder = Path(data_dir)
    if not (folder / CIFAR_FOLDER).is_dir() and not (folder / CIFAR_TRAIN_FILES[0]).is_file():
        raise FbnasError(f"--data-dir {folder} holds no CIFAR-10 data: give the folder with "
                         f"{CIFAR_FOLDER}/ (python format) the network was trained on")
    data = load_dataset(folder, "cifar10", resolution=defn["input"]["resolution"])
    channels, classes = defn["input"]["channels"], defn["head"]["classes"]
    if data.train_images.shape[1] != channels or len(data.classes) != classes:
        raise FbnasError(f"the images of {folder} ({data.train_images.shape[1]} channels, "
                         f"{len(data.classes)} classes) do not fit {defn['name']} ({channels} "
                         f"channels, {classes} classes); give the data it was trained on")
    available = len(data.train_images)
    if n_images > available:
        raise UsageError(f"--calibration-images {n_images} is more than the {available} "
                         f"training images in {folder}; give at most {available}")
    return data
