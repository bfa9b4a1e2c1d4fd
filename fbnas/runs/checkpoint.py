"""Reading and writing checkpoints: the one place a ``.pt`` file becomes Python objects.

Every checkpoint fbnas reads (a search to sample from or resume, a retraining run to resume,
weights to export) goes through :func:`load_torch`, so each is loaded the same safe way
(``torch.load(weights_only=True)``, which refuses pickled code) and every failure is the same
kind of one-line error. A checkpoint is a dict ``{"format": CHECKPOINT_FORMAT, "kind":
"search" | "model", "epoch", "config", "model", ...}``, plus what its kind of run keeps: a
model checkpoint the ``definition`` it trained; a search checkpoint is read by
:mod:`fbnas.search.checkpoint`.
"""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from fbnas.arch.definition import space_hash_of, structure_difference
from fbnas.errors import FbnasError, brief
from fbnas.io import atomic_write

if TYPE_CHECKING:
    from fbnas.arch.model import Network

CHECKPOINT_FORMAT = "fbnas.checkpoint/1"
#: where a run folder keeps the checkpoint written after its latest epoch
LAST = Path("checkpoints") / "last.pt"


def load_torch(path: str | Path) -> Any:
    """``torch.load`` with ``weights_only=True``; any failure is a one-line FbnasError."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FbnasError(f"checkpoint {path} does not exist")
    try:
        with warnings.catch_warnings():  # torch warns of odd pickle protocols before refusing
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        refused = _refused(str(e))
        if refused is None:
            raise FbnasError(f"cannot load checkpoint {path} (truncated or corrupted?): "
                             f"{_first_line(e)}") from None
        raise FbnasError(f"checkpoint {path} {refused}; fbnas loads only weights-only "
                         "checkpoints, so it refused the file and ran nothing in it: use a "
                         "checkpoint written by fbnas, or a state_dict saved with "
                         "torch.save") from None
    except Exception as e:  # torch raises many types for corrupt, truncated or unsafe files
        raise FbnasError(f"cannot load checkpoint {path} (truncated, corrupted or not a "
                         f"torch file?): {_first_line(e)}") from None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _refused(text: str) -> str | None:
    """What torch's weights-only unpickler refused, in words read from its message (None if
    it refused nothing): a Python global such as os.system, or a pickle instruction."""
    if "weights only load failed" not in text.lower():
        return None
    m = re.search(r"GLOBAL ([\w.]+)", text)
    if m:
        return (f"holds a Python object that is not plain tensors/containers "
                f"(GLOBAL {m.group(1)})")
    m = re.search(r"Unsupported operand (\d+)", text)
    if m:
        return (f"is a pickle with an instruction weights-only loading does not run "
                f"(operand {m.group(1)}; a plain pickle rather than a torch.save file?)")
    return "holds something weights-only loading does not allow"


def check_finite_weights(state: Any, where: str, fix: str) -> None:
    """Refuse weights holding NaN or inf: a diverged or damaged run, never a result."""
    import torch

    if not isinstance(state, dict):
        return
    bad = [k for k, v in state.items() if isinstance(v, torch.Tensor)
           and v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise FbnasError(f"{where}: its weights are not finite ({len(bad)} tensor(s) hold NaN "
                         f"or inf, e.g. {bad[0]}); {fix}")


#: what a run refused to resume should do instead
RESUME_FIX = "resume from an earlier checkpoint, or start over with --force"


def check_resumable(ck: dict, where: str,
                    check_parts: Callable[[dict, str], None] | None = None) -> None:
    """Refuse to continue from a checkpoint lacking its model weights or holding non-finite
    ones, before anything is built from it. ``check_parts`` (the checkpoint, the start of the
    error) refuses what a kind of run keeps beside the weights, before the weights are
    checked, so that the error names the part that went wrong."""
    where = f"cannot resume from {where}"
    if not isinstance(ck.get("model"), dict):
        raise FbnasError(f"{where}: it lacks the model weights (truncated or not written by "
                         f"fbnas?); {RESUME_FIX}")
    if check_parts is not None:
        check_parts(ck, where)
    check_finite_weights(ck["model"], where, RESUME_FIX)


def save_checkpoint(state: dict, path: str | Path) -> None:
    """Write a checkpoint atomically: a crash mid-write leaves the previous one intact."""
    import torch

    atomic_write(path, lambda p: torch.save(state, p))


def resolve_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(checkpoint file, run folder) for a run folder or a checkpoint file."""
    path = Path(path)
    if path.is_dir():
        ckpt = path / LAST
        if not ckpt.is_file():
            raise FbnasError(f"{path} holds no {LAST.as_posix()}; give a run folder written "
                             "by fbnas train or a checkpoint file")
        return ckpt, path
    if not path.exists():
        raise FbnasError(f"{path} does not exist; give a run folder or a checkpoint file")
    run_dir = path.parent.parent if path.parent.name == LAST.parent.name else path.parent
    return path, run_dir


def _check_format(ck: Any, where: str) -> dict:
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT:
        got = ck.get("format") if isinstance(ck, dict) else type(ck).__name__
        raise FbnasError(f"{where} is not an fbnas checkpoint (format {brief(got)}, want "
                         f"{CHECKPOINT_FORMAT!r})")
    return ck


def load_checkpoint(path: str | Path, kind: str | None = None, fix: str = "") -> dict:
    """An fbnas checkpoint (a file, or a run folder's last one), of ``kind`` when given.

    ``fix`` is appended to the error for a checkpoint of another kind (what to pass instead).
    """
    ckpt_path, _ = resolve_checkpoint(path)
    where = f"checkpoint {ckpt_path}"
    ck = _check_format(load_torch(ckpt_path), where)
    if kind is not None and ck.get("kind") != kind:
        raise FbnasError(f"{where} is a {brief(ck.get('kind'))} checkpoint, not a {kind} "
                         f"checkpoint{'; ' + fix if fix else ''}")
    if not isinstance(ck.get("config"), dict):
        raise FbnasError(f"{where} lacks its run's 'config' (truncated or hand-edited?)")
    return ck


_UNUSABLE = "the training diverged or the file is damaged; use an earlier checkpoint"


def load_weights_file(path: str | Path) -> tuple[dict, dict | None]:
    """(state_dict, the definition it was trained for) of a model checkpoint, or
    (state_dict, None) of a plain state_dict file."""
    import torch

    obj = load_torch(path)
    if isinstance(obj, dict) and "format" in obj:
        if obj.get("format") != CHECKPOINT_FORMAT:
            raise FbnasError(f"checkpoint {path} has format {brief(obj.get('format'))}; this fbnas "
                             f"reads {CHECKPOINT_FORMAT!r}")
        if obj.get("kind") == "search":
            raise FbnasError(f"{path} is a search (supernet) checkpoint; retrain the "
                             "architecture first, or pass --random-weights to try the export")
        if obj.get("kind") != "model" or not isinstance(obj.get("definition"), dict) \
                or not isinstance(obj.get("model"), dict):
            raise FbnasError(f"checkpoint {path} is not a model checkpoint (want kind 'model' "
                             "with 'definition' and 'model')")
        check_finite_weights(obj["model"], f"checkpoint {path}", _UNUSABLE)
        return obj["model"], obj["definition"]
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        check_finite_weights(obj, f"checkpoint {path}", _UNUSABLE)
        return obj, None
    raise FbnasError(f"{path} is neither an fbnas model checkpoint nor a state_dict of the "
                     "network")


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
