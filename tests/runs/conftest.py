"""A tiny training setup that needs neither the CIFAR-10 data nor a subprocess: an image
folder of 8x8 pictures in three colours and a one-block network that reads them."""

import json

import numpy as np
import pytest
from PIL import Image

from fbnas.config import load_config

CLASSES = ("blue", "green", "red")
TRAIN_PER_CLASS, TEST_PER_CLASS = 20, 4


def write_folder(root, per_class: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            a = rng.integers(0, 90, (8, 8, 3), dtype=np.uint8)
            a[..., 2 - c] += 150  # each class leans to its own colour: learnable
            Image.fromarray(a).save(root / name / f"{i}.png")


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory):
    """train/ and test/ folders of 8x8 PNGs: 20 and 4 per class."""
    root = tmp_path_factory.mktemp("images")
    write_folder(root / "train", TRAIN_PER_CLASS, seed=0)
    write_folder(root / "test", TEST_PER_CLASS, seed=1)
    return root


TINY_NET = {
    "name": "dot",
    "input": {"channels": 3, "resolution": 8},
    "stem": {"channels": 4, "kernel": 3, "stride": 2},
    "blocks": [{"op": "k3_e1", "c_in": 4, "c_out": 8, "stride": 1}],
    "head": {"channels": 16, "classes": len(CLASSES)},
}


@pytest.fixture(scope="session")
def tiny_arch(tmp_path_factory):
    """A bare model definition of a one-block network for 8x8 inputs and three classes."""
    path = tmp_path_factory.mktemp("arch") / "dot.json"
    path.write_text(json.dumps(TINY_NET))
    return path


def tiny_retrain(image_folder, arch, *sets: str):
    """A config that retrains ``arch`` for 2 epochs on the image folder, batches of 8;
    ``sets`` (key=value) come last."""
    return load_config(None, [
        f"retrain.arch={arch}", "data.kind=folder", f"data.dir={image_folder}",
        "data.batch_size=8", "data.eval_batch_size=16", "retrain.epochs=2",
        "run.threads=1", "run.progress=false", "run.device=cpu", *sets])


@pytest.fixture
def retrain_config(image_folder, tiny_arch):
    """tiny_retrain of the tiny network, taking the extra key=value settings."""
    return lambda *sets: tiny_retrain(image_folder, tiny_arch, *sets)
