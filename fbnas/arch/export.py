"""Export of a built architecture to torch.export (.pt2) or ONNX.

``onnx_program`` is the one ONNX export of fbnas: ``fbnas export --format onnx`` writes it
for a network, and ONNX Runtime tables (fbnas.latency.runtimes) time it for every entry,
so that what is timed is what is deployed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
from torch import nn

from fbnas.arch.model import Network
from fbnas.errors import FbnasError
from fbnas.io import atomic_write, refuse_overwrite

ONNX_HINT = "reinstall fbnas with its dependencies: pip install -e ."
#: the batch of the example input an export traces; 1 would be specialised to a constant
EXAMPLE_BATCH = 2
FORMATS = ("pt2", "onnx")
DEFINITION_FILE = "fbnas/definition.json"


def require_onnx() -> None:
    """Raise a one-line FbnasError naming the fix when the ONNX packages cannot be imported."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise FbnasError(f"ONNX export and timing need the onnx, onnxscript and onnxruntime "
                         f"packages; {ONNX_HINT}") from None


def dynamic_batch() -> tuple:
    """``dynamic_shapes`` that keep dimension 0 of the only input free in an export."""
    from torch.export import Dim

    return ({0: Dim("batch", min=1, max=4096)},)


def onnx_program(module: nn.Module, example: torch.Tensor, output_name: str = "output"):
    """Export ``module`` (in eval mode) to an ONNX program: the one export of fbnas.

    ``fbnas export --format onnx`` writes this program for a network, and ``onnxruntime``
    tables time it for every entry and network, so that what is timed is what is deployed.
    ``example`` should have a batch of at least 2 (see EXAMPLE_BATCH).
    """
    require_onnx()
    module.eval()
    try:
        return torch.onnx.export(module, (example,), None, dynamo=True,
                                 dynamic_shapes=dynamic_batch(), input_names=["input"],
                                 output_names=[output_name], verbose=False)
    except Exception as e:  # the exporter wraps failures from several layers of tooling
        raise FbnasError(f"ONNX export failed: {str(e).splitlines()[0][:200]}") from None


def example_like(x: torch.Tensor) -> torch.Tensor:
    """A random export example of ``x``'s shape but a batch of EXAMPLE_BATCH."""
    return torch.randn(EXAMPLE_BATCH, *x.shape[1:])


def export_pt2(model: Network, out: str | Path) -> float:
    """torch.export the model (dynamic batch) to ``out``; return max |exported - eager|."""
    out = Path(out)
    if out.suffix != ".pt2":
        raise FbnasError(f"--out {out} must end in .pt2 (torch.export.load requires it)")
    model.eval()
    x = torch.randn(model.input_shape(EXAMPLE_BATCH))
    try:
        program = torch.export.export(model, (x,), dynamic_shapes=dynamic_batch())
    except Exception as e:  # torch.export reports unsupported graphs with many exception types
        raise FbnasError(f"torch.export failed: {str(e).splitlines()[0][:200]}") from None
    buf = io.BytesIO()
    extra = {DEFINITION_FILE: json.dumps(model.definition)}
    torch.export.save(program, buf, extra_files=extra)
    atomic_write(out, lambda p: p.write_bytes(buf.getvalue()))
    diff = check_pt2(model, out)
    if not diff <= 1e-3:
        raise FbnasError(f"the saved program {out} differs from the eager model by {diff:.2e}; "
                         "do not deploy it")
    return diff


def check_pt2(model: Network, path: str | Path, batch: int = 3) -> float:
    """Max absolute difference of the saved program's outputs from eager ones."""
    loaded = torch.export.load(str(path)).module()
    x = torch.randn(model.input_shape(batch))
    with torch.inference_mode():
        return float((loaded(x) - model(x)).abs().max())


def export_onnx(model: Network, out: str | Path) -> None:
    """Export to ONNX (fbnas.latency.runtimes.onnx_program, what onnxruntime tables time), with the
    definition in the model's metadata."""
    program = onnx_program(model, torch.randn(model.input_shape(EXAMPLE_BATCH)), "logits")
    program.model.metadata_props["fbnas.definition"] = json.dumps(model.definition)
    atomic_write(out, lambda p: program.save(str(p)))


def export_model(model: Network, fmt: str, out: str | Path, force: bool = False) -> float | None:
    """Export in ``fmt`` (pt2 or onnx) to ``out``; for pt2 return the checked max difference."""
    if fmt not in FORMATS:
        raise FbnasError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "onnx":
        require_onnx()  # before any work, so a missing extra fails fast
    refuse_overwrite(out, force)
    if fmt == "pt2":
        return export_pt2(model, out)
    export_onnx(model, out)
    return None
