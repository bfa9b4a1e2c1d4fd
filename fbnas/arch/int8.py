"""A network exported to ONNX and quantized to int8, and its int8 top-1 against float32.

``fbnas export --precision int8`` needs the float32 ONNX program of ``export --format onnx``
as bytes (with the model definition in its metadata), the int8 model ``quantize_int8``
makes of it on calibration images, and both models' predictions on test images. This
module takes the images as arrays, so it knows nothing of data sets: the caller draws and
normalises them (``fbnas.runs.calibration_images``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from fbnas.arch.model import Network

#: images per calibration batch (MinMax ranges do not depend on how the images are batched)
CALIBRATION_BATCH = 32


def int8_onnx(model: Network, images: np.ndarray) -> tuple[bytes, bytes]:
    """(float32, int8) ONNX bytes of ``model``: the float32 one as ``export --format onnx``
    writes it, the int8 one quantized on ``images`` (float32 N x C x H x W, normalised as
    the network saw them in training)."""
    import torch

    from fbnas.arch.export import EXAMPLE_BATCH, onnx_program
    from fbnas.arch.quantize import quantize_int8

    batches = [images[i:i + CALIBRATION_BATCH] for i in range(0, len(images), CALIBRATION_BATCH)]
    program = onnx_program(model, torch.randn(model.input_shape(EXAMPLE_BATCH)), "logits")
    program.model.metadata_props["fbnas.definition"] = json.dumps(model.definition)
    fp32 = program.model_proto.SerializeToString()
    return fp32, quantize_int8(fp32, batches)


@dataclass
class Agreement:
    """Top-1 of a float32 and an int8 model on the same test images."""

    fp32: float  # top-1 in percent
    int8: float
    same: float  # percent of images both models put in the same class
    images: int

    def lines(self) -> list[str]:
        return [f"top-1 fp32 {self.fp32:.2f}% int8 {self.int8:.2f}% ({self.images} test images)",
                f"int8 predicts the class fp32 predicts for {self.same:.2f}% of them"]


def compare_top1(fp32: bytes, int8: bytes, images: np.ndarray, labels: np.ndarray) -> Agreement:
    """Run both ONNX models on ``images`` and score them against ``labels``: the cost of
    quantizing a trained network, which only real test images show."""
    from fbnas.arch.quantize import top1

    acc32, pred32 = top1(fp32, images, labels)
    acc8, pred8 = top1(int8, images, labels)
    return Agreement(acc32, acc8, 100.0 * float((pred32 == pred8).mean()), len(labels))
