"""Post-training int8 quantization of exported networks with ONNX Runtime.

``quantize_int8`` turns the float32 ONNX bytes of ``fbnas.arch.export.onnx_program`` into an
int8 model in the QDQ format: weights stored as int8 with one scale per output channel,
activations quantized at the points a calibration on real inputs picked. ``fbnas export
--precision int8`` writes such a model for a network and reports its top-1 against float32;
device bundles (``fbnas profile --bundle --precision int8``) quantize every file with it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import numpy as np

from fbnas.errors import FbnasError


def _has_vnni() -> bool:
    """Whether this x86 CPU has VNNI, without which ONNX Runtime's u8 x s8 int8 sums can
    saturate at 8-bit weights (a Zen 3 EPYC scored int8 logits 0.8 of the fp32 spread off)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # not Linux: keep full-range weights
    return "vnni" in flags or "flags" not in flags


#: 7-bit weights where the CPU lacks VNNI (ONNX Runtime's advice for such CPUs)
REDUCE_RANGE = not _has_vnni()


#: the settings quantize_int8 uses, as recorded in every model it writes (metadata
#: ``fbnas.quantization``) and printed by the CLI
SETTINGS = {
    "tool": "onnxruntime.quantization.quantize_static",
    "format": "QDQ",
    "weights": "int8 (QInt8), symmetric, per output channel",
    "activations": "uint8 (QUInt8), asymmetric, per tensor",
    "reduce_range": REDUCE_RANGE,
    "calibration": "MinMax",
    "preprocessing": "quant_pre_process (ONNX shape inference, basic graph optimisations)",
}
METADATA_KEY = "fbnas.quantization"

#: the ONNX ops whose appearance marks a model as quantized in the QDQ format
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
#: ONNX Runtime's default log severity (warnings and worse), restored after quantizing
ORT_DEFAULT_SEVERITY = 2


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _load_model(onnx_bytes: bytes):
    """The ModelProto of ``onnx_bytes``, or a one-line error saying what was given instead."""
    import onnx

    if not isinstance(onnx_bytes, (bytes, bytearray)) or not onnx_bytes:
        raise FbnasError("int8 quantization needs the bytes of an ONNX model (fbnas export "
                         f"--format onnx writes one); got {type(onnx_bytes).__name__}"
                         f"{' (empty)' if isinstance(onnx_bytes, (bytes, bytearray)) else ''}")
    try:
        model = onnx.load_from_string(bytes(onnx_bytes))
    except Exception as e:  # protobuf raises DecodeError and others on damaged bytes
        raise FbnasError(f"int8 quantization was given bytes that are not an ONNX model "
                         f"({_first_line(e)}); pass the output of fbnas export --format onnx"
                         ) from None
    if not len(model.graph.node) and not len(model.graph.output):
        raise FbnasError("int8 quantization was given an empty ONNX graph; pass the output of "
                         "fbnas export --format onnx")
    return model


def model_input(model) -> tuple[str, list[int | None]]:
    """Name and shape (None for a symbolic dimension) of the model's only graph input."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise FbnasError(f"int8 quantization calibrates models with one input; this one has "
                         f"{len(inputs)} ({', '.join(i.name for i in inputs) or 'none'})")
    dims = inputs[0].type.tensor_type.shape.dim
    return inputs[0].name, [d.dim_value if d.HasField("dim_value") else None for d in dims]


def check_calibration(calibration: Sequence[np.ndarray], shape: list[int | None]
                      ) -> list[np.ndarray]:
    """The calibration batches as contiguous float32 arrays, each checked against ``shape``
    (the model input's; its first dimension is the batch)."""
    if isinstance(calibration, np.ndarray) or not isinstance(calibration, (list, tuple)):
        raise FbnasError("int8 calibration must be a list of arrays, each one batch of the "
                         f"model's input; got {type(calibration).__name__}")
    if not calibration:
        raise FbnasError("int8 calibration needs at least one batch of inputs; give a few "
                         "hundred real images, normalised as for training")
    want = "x".join("N" if i == 0 else str(d) if d else "?" for i, d in enumerate(shape))
    batches = []
    for k, a in enumerate(calibration):
        if not isinstance(a, np.ndarray):
            raise FbnasError(f"int8 calibration batch {k} is a {type(a).__name__}, not a numpy "
                             "array")
        if not np.issubdtype(a.dtype, np.floating):
            raise FbnasError(f"int8 calibration batch {k} holds {a.dtype} values; the model "
                             "takes float32 inputs: normalise the images as for training")
        fits = a.ndim == len(shape) and a.shape[0] >= 1 and all(
            d is None or d == n for d, n in zip(shape[1:], a.shape[1:]))
        if not fits:
            raise FbnasError(f"int8 calibration batch {k} has shape "
                             f"{'x'.join(map(str, a.shape))}; the model's input is {want}")
        a = np.ascontiguousarray(a, dtype=np.float32)
        if not np.isfinite(a).all():
            raise FbnasError(f"int8 calibration batch {k} holds inf or nan; give finite inputs")
        batches.append(a)
    return batches


class _Batches:
    """The calibration batches as ONNX Runtime's CalibrationDataReader asks for them: one
    ``{input name: array}`` per ``get_next`` call, None when done; ``rewind`` starts over."""

    def __init__(self, name: str, batches: list[np.ndarray]):
        self.name = name
        self.batches = batches
        self.position = 0

    def get_next(self) -> dict | None:
        if self.position >= len(self.batches):
            return None
        self.position += 1
        return {self.name: self.batches[self.position - 1]}

    def rewind(self) -> None:
        self.position = 0

    def __len__(self) -> int:
        return len(self.batches)


def quantize_int8(onnx_bytes: bytes, calibration: list[np.ndarray]) -> bytes:
    """Quantize a float32 ONNX model to int8 with ONNX Runtime static quantization.

    ``calibration`` holds batches for the model's single input (float32, the input's shape
    with any batch size; for a network, real images normalised as for training): ONNX
    Runtime runs the model on every batch and takes each activation's range (MinMax) to set
    its scale and zero point. Returns the bytes of the quantized model, whose input and
    output stay float32.

    Settings (``SETTINGS``):

    * QDQ format: int8 tensors appear as QuantizeLinear/DequantizeLinear pairs around the
      float ops, which ONNX Runtime's CPU provider fuses into int8 kernels; the format ONNX
      Runtime recommends for CPU inference, and one any ONNX runtime can read.
    * Weights int8 (QInt8, symmetric), one scale per output channel: the channels of a
      convolution whose batch norm was folded into it differ in range by orders of
      magnitude, which a single scale per tensor would crush to a few levels.
    * Activations uint8 (QUInt8, asymmetric, per tensor), as CPU deployments quantize them:
      ONNX Runtime's x86 int8 kernels multiply unsigned activations by signed weights (the
      u8 x s8 form of the AVX2 and VNNI dot-product instructions), and on x86 it rewrites
      int8 activations to uint8 anyway; ONNX Runtime's own guidance for x86 CPUs is QUInt8
      activations with QInt8 weights. Asymmetric uint8 spends all 256 levels on the
      non-negative output of a ReLU.
    * reduce_range off where the CPU has VNNI: weights use all 8 bits. On x86 CPUs without
      VNNI (e.g. AMD Zen 3) u8 x s8 sums saturate, so weights use 7 bits there, as ONNX
      Runtime advises.
    * Preprocessing (``quant_pre_process``): ONNX shape inference and ONNX Runtime's basic
      graph optimisations (constant folding, batch norm folded into convolutions where the
      exporter left one), so that what is quantized is the graph that runs. Symbolic shape
      inference (for transformer models) is skipped: the exporter's graphs carry full
      shapes, and it would only cost a sympy import.

    The settings are recorded in the model's metadata (``fbnas.quantization``); the model's
    other metadata (the fbnas definition, for one) is kept. Work happens in a temporary
    folder; any failure is a one-line FbnasError.
    """
    api = _quantization_api()
    model = _load_model(onnx_bytes)
    name, shape = model_input(model)
    batches = check_calibration(calibration, shape)
    metadata = {p.key: p.value for p in model.metadata_props}

    # the sessions quant_pre_process and the calibrator open take no options: keep their
    # warnings (an unused initializer removed, for one) off stderr, then restore the default
    api.ort.set_default_logger_severity(3)
    try:
        with tempfile.TemporaryDirectory(prefix="fbnas-int8-") as tmp:
            result = _quantize_in(Path(tmp), api, onnx_bytes, name, batches)
    except OSError as e:
        raise FbnasError(f"int8 quantization could not use a temporary folder: "
                         f"{e.strerror or e}") from None
    finally:
        api.ort.set_default_logger_severity(ORT_DEFAULT_SEVERITY)
    return _with_metadata(result, metadata)


def _quantization_api() -> SimpleNamespace:
    """onnx, onnxruntime and the quantization functions and enums, imported on the first
    quantization rather than with the module (they take seconds to import), or a one-line
    error saying what to reinstall."""
    try:
        import onnx
        import onnxruntime as ort
        from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                              quantize_static)
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError as e:
        raise FbnasError(f"int8 quantization needs the onnx and onnxruntime packages ({e}); "
                         "reinstall fbnas with its dependencies: pip install -e .") from None
    return SimpleNamespace(onnx=onnx, ort=ort, CalibrationMethod=CalibrationMethod,
                           QuantFormat=QuantFormat, QuantType=QuantType,
                           quantize_static=quantize_static, quant_pre_process=quant_pre_process)


def _quantize_in(tmp: Path, api: SimpleNamespace, onnx_bytes: bytes, name: str,
                 batches: list[np.ndarray]):
    """The model quantized with ``SETTINGS`` (an onnx ModelProto), its files in the folder
    ``tmp``: ONNX Runtime's preprocessing and static quantization read and write files, not
    bytes. Their many exception types become one-line FbnasErrors."""
    source, prepared, quantized = tmp / "fp32.onnx", tmp / "pre.onnx", tmp / "int8.onnx"
    source.write_bytes(bytes(onnx_bytes))
    try:
        api.quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    except Exception as e:  # shape inference and the optimiser raise many types
        raise FbnasError(f"int8 quantization could not prepare the model (shape "
                         f"inference and graph optimisation): {_first_line(e)}") from None
    try:
        api.quantize_static(
            str(prepared), str(quantized), _Batches(name, batches),
            quant_format=api.QuantFormat.QDQ, per_channel=True, reduce_range=REDUCE_RANGE,
            activation_type=api.QuantType.QUInt8, weight_type=api.QuantType.QInt8,
            calibrate_method=api.CalibrationMethod.MinMax,
            extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})
    except FbnasError:
        raise
    except Exception as e:  # the calibration session and the quantizer raise many
        raise FbnasError(f"int8 quantization failed: {_first_line(e)}") from None
    return api.onnx.load(str(quantized))


def _with_metadata(result, metadata: dict[str, str]) -> bytes:
    """``result``'s bytes with the float model's metadata (the fbnas definition, for one),
    which quantization drops, and ``SETTINGS`` under ``METADATA_KEY`` (replacing any)."""
    for key, value in metadata.items():
        if not any(p.key == key for p in result.metadata_props):
            result.metadata_props.add(key=key, value=value)
    own = [p for p in result.metadata_props if p.key == METADATA_KEY]
    for p in own:
        result.metadata_props.remove(p)
    result.metadata_props.add(key=METADATA_KEY, value=json.dumps(SETTINGS))
    return result.SerializeToString()


def qdq_counts(onnx_bytes: bytes) -> dict[str, int]:
    """How many QuantizeLinear and DequantizeLinear nodes the model has."""
    model = _load_model(onnx_bytes)
    counts = dict.fromkeys(QDQ_OPS, 0)
    for node in model.graph.node:
        if node.op_type in counts:
            counts[node.op_type] += 1
    return counts


def top1(onnx_bytes: bytes, images: np.ndarray, labels: np.ndarray, threads: int = 1,
         batch: int = 256) -> tuple[float, np.ndarray]:
    """(top-1 accuracy in percent, predicted classes) of an ONNX classifier run by ONNX
    Runtime on the CPU (``threads`` intra-op threads) over float32 N x C x H x W ``images``."""
    import onnxruntime as ort

    if len(images) != len(labels) or not len(images):
        raise FbnasError(f"top-1 needs as many labels as images, at least one "
                         f"({len(images)} images, {len(labels)} labels)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(bytes(onnx_bytes), options,
                                       providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        predicted = np.concatenate([
            session.run(None, {name: np.ascontiguousarray(images[i:i + batch],
                                                          dtype=np.float32)})[0].argmax(1)
            for i in range(0, len(images), batch)])
    except Exception as e:  # onnxruntime raises its own exception types
        raise FbnasError(f"ONNX Runtime could not run the model: {_first_line(e)}") from None
    correct = int((predicted == np.asarray(labels)).sum())
    return 100.0 * correct / len(labels), predicted
