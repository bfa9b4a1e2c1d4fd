"""Weights for a built architecture, and export to torch.export (.pt2) or ONNX."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch

from fbnas.checkpoint import load_weights_file
from fbnas.definition import space_hash_of, structure_difference
from fbnas.errors import FbnasError
from fbnas.io import atomic_write, refuse_overwrite
from fbnas.model import Network
from fbnas.runtimes import EXAMPLE_BATCH, dynamic_batch, onnx_program, require_onnx

FORMATS = ("pt2", "onnx")
DEFINITION_FILE = "fbnas/definition.json"


def load_weights(model: Network, path: str | Path) -> str:
    """Load a retrained-model checkpoint or a plain state_dict into ``model``; say what it was.

    A checkpoint must have been trained for the same architecture: same space (when both
    record one) and the same input, stem, blocks and head.
    """
    state, theirs = load_weights_file(path)
    defn = model.definition
    name = defn.get("name", "the architecture")
    if theirs is None:
        what = f"state_dict {path}"
    else:
        mine_h, theirs_h = space_hash_of(defn), space_hash_of(theirs)
        if mine_h and theirs_h and mine_h != theirs_h:
            raise FbnasError(f"checkpoint {path} was trained in space "
                             f"{theirs['space'].get('name', '?')} (hash {theirs_h}), {name} is "
                             f"from space {defn['space'].get('name', '?')} (hash {mine_h})")
        try:
            diff = structure_difference(theirs, defn)
        except (KeyError, TypeError):
            raise FbnasError(f"checkpoint {path} holds an invalid model definition") from None
        if diff:
            raise FbnasError(f"checkpoint {path} was trained for architecture "
                             f"{theirs.get('name', '?')}, which differs from {name}: {diff}")
        what = f"model checkpoint {path} (architecture {theirs.get('name')})"
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    extra = [k for k in state if k not in own]
    shape = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or extra or shape:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (e.g. {missing[0]})")
        if extra:
            parts.append(f"{len(extra)} unexpected (e.g. {extra[0]})")
        if shape:
            k = shape[0]
            parts.append(f"{len(shape)} of another shape (e.g. {k}: {tuple(state[k].shape)} vs "
                         f"{tuple(own[k].shape)})")
        raise FbnasError(f"weights in {path} do not fit {name}: {'; '.join(parts)} tensors")
    model.load_state_dict(state)
    return what


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
    """Export to ONNX (fbnas.runtimes.onnx_program, what onnxruntime tables time), with the
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
