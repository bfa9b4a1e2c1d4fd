"""Reading a search's checkpoint: its space, theta and one-shot pick, checked before use.

A search checkpoint is the trainer's generic checkpoint (:mod:`fbnas.runs.checkpoint`) plus
what only a search keeps: the ``space`` it searched, one ``theta`` tensor per layer, the
table it ran with (``lut_path``, ``lut_hash``) and, after its last epoch, the ``decision`` of
its one-shot check. Sampling reads these, and the run's config with its latency budget,
through :func:`load_search_checkpoint`; a resumed search refuses missing or non-finite theta
through :func:`check_search_parts` before any weights are loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fbnas.arch.space import SearchSpace
from fbnas.config import Budget, Config, from_saved
from fbnas.errors import FbnasError
from fbnas.io import file_hash
from fbnas.runs.checkpoint import RESUME_FIX, load_checkpoint, resolve_checkpoint


def check_theta(index: int, t: Any, where: str) -> None:
    """Refuse a layer's theta holding NaN or inf."""
    import torch

    if isinstance(t, torch.Tensor) and not bool(torch.isfinite(t).all()):
        raise FbnasError(f"{where}: theta of layer {index} is not finite; the search diverged "
                         "- resume from an earlier checkpoint or rerun with a lower "
                         "optim.theta.lr")


def check_search_parts(ck: dict, where: str) -> None:
    """Refuse a search checkpoint to resume from that lacks theta, in itself or among its
    model weights, or whose theta is not finite (``where`` starts the error)."""
    if ck.get("kind") != "search":
        return
    theta = ck.get("theta")
    if not isinstance(theta, (list, tuple)) or not theta:
        raise FbnasError(f"{where}: it lacks 'theta' (truncated or not written by fbnas "
                         f"train?); {RESUME_FIX}")
    for i, t in enumerate(theta):
        check_theta(i, t, where)
    held = sum(1 for k in ck["model"] if k.rsplit(".", 1)[-1] == "theta")
    if held < len(theta):
        raise FbnasError(f"{where}: its model weights lack theta ({held} of {len(theta)} "
                         f"layers hold one; truncated or hand-edited?); {RESUME_FIX}")


@dataclass
class SearchCheckpoint:
    """A search checkpoint reduced to what sampling needs: its space and softmax(theta)."""

    path: Path
    run_dir: Path
    space: SearchSpace
    probs: list[np.ndarray]
    epoch: int
    lut_path: str | None
    lut_hash: str | None
    hash: str
    #: the run's config, as this version reads a saved one (fbnas.config.from_saved)
    config: Config
    #: the latency budget the search ran under, or None
    budget: Budget | None = None
    #: the architecture the search's last-epoch one-shot check picked (search.rerank), if any
    decision: list[str] | None = None
    #: (its place in probability order from 0, how many were scored) where there is one
    decision_rank: tuple[int, int] | None = None

    @property
    def floor(self) -> float:
        """The share of a budget the search's network must spend (``loss.target_floor``),
        also for a budget given when sampling a search that had none."""
        return self.config.loss.target_floor


def load_search_checkpoint(path: str | Path) -> SearchCheckpoint:
    """Load a search checkpoint (a run folder or file) and check its theta against its space."""
    import torch

    ckpt_path, run_dir = resolve_checkpoint(path)
    where = f"checkpoint {ckpt_path}"
    ck = load_checkpoint(ckpt_path, "search", fix="sample from the run folder of fbnas train")
    for key in ("space", "theta"):
        if key not in ck:
            raise FbnasError(f"{where} lacks '{key}' (truncated or from an older fbnas?)")
    if not isinstance(ck["space"], dict):
        raise FbnasError(f"{where}: 'space' must be the space mapping")
    try:
        space = SearchSpace.from_dict(ck["space"])
    except FbnasError as e:
        raise FbnasError(f"{where} holds an invalid space: {e}") from None
    if ck.get("space_hash") not in (None, space.hash):
        raise FbnasError(f"{where}: its space hashes to {space.hash}, but it records "
                         f"{ck['space_hash']}; it was written by an incompatible fbnas")
    theta = ck["theta"]
    if not isinstance(theta, (list, tuple)) or len(theta) != len(space.layers):
        n = len(theta) if isinstance(theta, (list, tuple)) else type(theta).__name__
        raise FbnasError(f"{where}: theta has {n} layers, space {space.name} has "
                         f"{len(space.layers)}")
    probs = []
    for layer, t in zip(space.layers, theta):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() != len(layer.candidates):
            raise FbnasError(f"{where}: theta of layer {layer.index} must be a 1-D tensor of "
                             f"{len(layer.candidates)} values (one per candidate)")
        check_theta(layer.index, t, where)
        v = t.detach().double().numpy()
        e = np.exp(v - v.max())
        probs.append(e / e.sum())
    try:
        config = from_saved(ck["config"])
    except FbnasError as e:
        raise FbnasError(f"{where} holds a config this fbnas cannot read: {e}") from None
    epoch = ck.get("epoch")
    decision, rank = _decision(ck, space)
    return SearchCheckpoint(
        path=ckpt_path, run_dir=run_dir, space=space, probs=probs,
        epoch=int(epoch) if isinstance(epoch, int) else -1,
        lut_path=ck.get("lut_path") if isinstance(ck.get("lut_path"), str) else None,
        lut_hash=ck.get("lut_hash") if isinstance(ck.get("lut_hash"), str) else None,
        hash=file_hash(ckpt_path), config=config, budget=Budget.of(config),
        decision=decision, decision_rank=rank)


def _decision(ck: dict, space: SearchSpace) -> tuple[list[str] | None, tuple[int, int] | None]:
    """The ops of the search's recorded one-shot pick, if it holds a valid one, and its
    (rank, of) among the networks checked, where recorded."""
    d = ck.get("decision")
    if not isinstance(d, dict):
        return None, None
    ops, rank, cands = d.get("ops"), d.get("rank"), d.get("candidates")
    if not isinstance(ops, list) or len(ops) != len(space.layers) or not all(
            isinstance(o, str) and o in layer.candidates for o, layer in zip(ops, space.layers)):
        return None, None
    if not isinstance(cands, list) or isinstance(rank, bool) or not isinstance(rank, int) \
            or not 0 <= rank < len(cands):
        return list(ops), None
    return list(ops), (rank, len(cands))
