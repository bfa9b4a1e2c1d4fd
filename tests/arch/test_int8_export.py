"""fbnas.arch.int8 and fbnas.runs.deploy: a network to an int8 ONNX file without the command
line (the tiny space's network; the real data's run is in test_quantize)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

from fbnas.arch.int8 import CALIBRATION_BATCH, compare_top1, int8_onnx
from fbnas.arch.quantize import qdq_counts, top1
from fbnas.errors import FbnasError
from fbnas.arch.space import load_space
from fbnas.io import write_json
from fbnas.runs.deploy import export_network
from tests.arch.test_quantize import OPS, settled_network


@pytest.fixture(scope="module")
def exported():
    torch.set_num_threads(1)
    model = settled_network()
    images = np.random.default_rng(0).standard_normal((2 * CALIBRATION_BATCH + 3, 3, 32, 32))
    images = images.astype(np.float32)
    return model, images, *int8_onnx(model, images)


@pytest.mark.slow  # an ONNX export and a quantization
def test_int8_onnx_is_the_onnx_export_with_its_definition_then_quantized(exported):
    model, _, fp32, int8 = exported
    meta = {p.key: p.value for p in onnx.load_from_string(fp32).metadata_props}
    assert json.loads(meta["fbnas.definition"]) == model.definition
    assert qdq_counts(fp32) == {"QuantizeLinear": 0, "DequantizeLinear": 0}
    assert qdq_counts(int8)["QuantizeLinear"] > 0


@pytest.mark.slow  # an ONNX export and a quantization
def test_compare_top1_scores_both_models(exported):
    _, images, fp32, int8 = exported
    _, predicted = top1(fp32, images, np.zeros(len(images), dtype=np.int64))
    # scored against fp32's own predictions: fp32 is right on all, int8 as often as it agrees
    scores = compare_top1(fp32, int8, images, predicted)
    assert scores.fp32 == 100.0 and scores.images == len(images)
    assert scores.int8 == pytest.approx(scores.same)
    assert scores.lines() == [
        f"top-1 fp32 100.00% int8 {scores.int8:.2f}% ({len(images)} test images)",
        f"int8 predicts the class fp32 predicts for {scores.same:.2f}% of them"]


@pytest.mark.slow  # an ONNX export
def test_export_network_with_random_weights_reports_each_line(tmp_path):
    arch = tmp_path / "hand.json"
    write_json(arch, load_space("tiny").definition(OPS, "hand"))
    out, lines = tmp_path / "m.onnx", []
    export_network(arch, None, out, "onnx", seed=3, echo=lines.append)
    assert out.is_file()
    assert lines[0] == "exported hand with random weights (seed 3)"
    assert lines[1].startswith("input: float32 N x 3x32x32 (N dynamic)")
    assert lines[-1] == f"wrote {out}"
    with pytest.raises(FbnasError, match="no CIFAR-10"):
        export_network(arch, None, tmp_path / "q.onnx", "onnx", precision="int8",
                       data_dir=str(tmp_path), echo=lines.append)
