"""A network out to a file that runs without fbnas: ``fbnas export``.

The network is built from its architecture file and given the weights of a retrain
checkpoint (or a plain state_dict, or fresh random weights), then written as a torch.export
program, a float32 ONNX model, or an int8 ONNX model quantized on drawn training images and
scored against float32 on the test set. It sits in ``runs`` because reading a checkpoint
and a data set is what a run does; the export itself is ``fbnas.arch``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

#: int8 top-1 this many points below fp32 gets a warning
INT8_DROP_WARNING = 2.0
#: training images int8 quantization calibrates on unless ``--calibration-images`` says
CALIBRATION_IMAGES = 256


def export_network(arch_path: Path, name: str | None, out: Path, fmt: str,
                   weights: Path | None = None, precision: str = "fp32",
                   data_dir: str | None = None, calibration_images: int = CALIBRATION_IMAGES,
                   seed: int = 0, force: bool = False,
                   echo: Callable[[str], None] = print) -> None:
    """Export the architecture ``name`` of ``arch_path`` with ``weights`` (None: random
    weights drawn with ``seed``) as ``fmt`` (pt2 or onnx) to ``out``; ``precision`` int8
    (onnx only) calibrates on ``calibration_images`` training images of the CIFAR-10 folder
    ``data_dir``. Lines for the user go to ``echo``. Everything that can be refused without
    building the network (the ONNX packages, a folder that cannot be written, an int8 file
    that exists) is refused first."""
    import torch

    from fbnas.arch.definition import build_model
    from fbnas.arch.export import export_model, require_onnx
    from fbnas.io import check_writable, refuse_overwrite
    from fbnas.runs.checkpoint import load_weights

    if fmt == "onnx":
        require_onnx()
    check_writable(out)
    if precision == "int8":
        refuse_overwrite(out, force)  # before reading data and quantizing, not after
    torch.manual_seed(seed)
    model = build_model(arch_path, name)
    what = load_weights(model, weights) if weights else f"random weights (seed {seed})"
    if precision == "int8":
        _export_int8(model, what, out, data_dir, calibration_images, seed,
                     evaluate=weights is not None, echo=echo)
        return
    diff = export_model(model, fmt, out, force=force)
    echo(f"exported {model.definition['name']} with {what}")
    echo(_io_line(model))
    if diff is not None:
        echo(f"checked: the saved program matches eager within {diff:.1e} (max abs)")
    echo(f"wrote {out}")



def export_command(arch_path: Path, name: str | None, out: Path, fmt: str,
                   weights: Path | None, random_weights: bool, precision: str = "fp32",
                   data_dir: str | None = None, calibration_images: int | None = None,
                   seed: int = 0, force: bool = False,
                   echo: Callable[[str], None] = print) -> None:
    """``fbnas export`` once its options are parsed: refuse options that contradict each
    other before anything is read (weights and random weights, both or neither; int8 other
    than ONNX or without data; the int8 options without int8), then :func:`export_network`.
    ``calibration_images`` None is the option not given (``CALIBRATION_IMAGES``)."""
    from fbnas.errors import UsageError

    if (weights is None) == (not random_weights):
        raise UsageError("pass --weights CKPT, or --random-weights to export an untrained "
                         "network")
    if precision == "int8":
        if fmt != "onnx":
            raise UsageError("--precision int8 quantizes the ONNX export; use --format onnx")
        if data_dir is None:
            raise UsageError("--precision int8 calibrates on real images; give --data-dir DIR, "
                             "the CIFAR-10 folder the network was trained on")
    else:
        extra = [flag for flag, value in (("--data-dir", data_dir),
                                          ("--calibration-images", calibration_images))
                 if value is not None]
        if extra:
            raise UsageError(f"{extra[0]} calibrates int8 quantization; add --precision int8 "
                             "or drop it")
    if calibration_images is None:
        calibration_images = CALIBRATION_IMAGES
    export_network(arch_path, name, out, fmt, weights=weights, precision=precision,
                   data_dir=data_dir, calibration_images=calibration_images, seed=seed,
                   force=force, echo=echo)

def _io_line(model) -> str:
    shape = "x".join(map(str, model.input_shape(1)[1:]))
    return (f"input: float32 N x {shape} (N dynamic), output: N x "
            f"{model.definition['head']['classes']} logits")


def _export_int8(model, what: str, out: Path, data_dir: str, n_images: int, seed: int,
                 evaluate: bool, echo: Callable[[str], None]) -> None:
    """Quantize on ``n_images`` drawn training images of ``data_dir``, write ``out``; with
    ``evaluate`` (trained weights) report fp32 and int8 top-1 on the folder's test set."""
    from fbnas.arch.int8 import compare_top1, int8_onnx
    from fbnas.errors import warn_stderr
    from fbnas.io import atomic_write
    from fbnas.runs.calibration_images import draw, network_data
    from fbnas.data.batches import normalize

    defn = model.definition
    data = network_data(data_dir, defn, n_images)
    fp32, int8 = int8_onnx(model, draw(data, n_images, seed))
    atomic_write(out, lambda p: p.write_bytes(int8))
    echo(f"exported {defn['name']} with {what}")
    echo(f"quantized to int8 (ONNX Runtime static, QDQ, per-channel int8 weights, uint8 "
         f"activations) on {n_images} training images of {Path(data_dir)} (seed {seed})")
    echo(_io_line(model))
    if not evaluate:
        echo("no accuracy report for random weights; give --weights (a fbnas retrain "
             "checkpoint) to compare int8 with fp32 on the test set")
    elif not data.has_test:
        echo(f"no accuracy report: {Path(data_dir)} has no test split")
    else:
        test = normalize(data.test_images, data.mean, data.std).numpy()
        scores = compare_top1(fp32, int8, test, data.test_labels.numpy())
        for line in scores.lines():
            echo(line)
        if scores.fp32 - scores.int8 > INT8_DROP_WARNING:
            warn_stderr(f"int8 top-1 is {scores.fp32 - scores.int8:.2f} points below fp32; "
                        "calibrate on more images (--calibration-images) or deploy the fp32 "
                        "export")
    echo(f"wrote {out}")
