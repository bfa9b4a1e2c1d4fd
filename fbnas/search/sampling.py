"""Sampling architectures from a search's theta, as entries of the architecture file.

A search ends with one probability distribution per layer, softmax(theta). FBNet takes the
most probable candidate of every layer (``--hard``) or draws several architectures from the
distributions and keeps the best; with a latency budget, ``--hard`` takes the most probable
architecture predicted within it (:mod:`fbnas.search.budget`), or within a window below it
(:mod:`fbnas.search.window`). All become entries that record, next to the model definition,
where they came from (checkpoint, table, hashes), the per-layer probabilities and the
table's predicted latency, multiply-adds (MACs) and params.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

import numpy as np

import fbnas
from fbnas.arch.definition import CORE_KEYS
from fbnas.arch.space import SearchSpace
from fbnas.config import Budget
from fbnas.errors import FbnasError, UsageError, brief
from fbnas.io import file_hash
from fbnas.search.checkpoint import SearchCheckpoint
from fbnas.search.window import ops_in_window

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def safe_name(text: str) -> str:
    """``text`` with characters outside [A-Za-z0-9_.-] replaced, usable as a default name."""
    s = re.sub(r"[^A-Za-z0-9_.\-]", "_", text).lstrip("_.-")
    return s or "arch"


def check_name(name: str) -> str:
    """Raise FbnasError unless ``name`` is a usable architecture name."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise FbnasError(f"architecture name {brief(name)} must start with a letter or digit and "
                         "hold only letters, digits, '_', '.' and '-'")
    return name


def run_name(ck: SearchCheckpoint) -> str:
    """The run folder's name, the stem of the default architecture names."""
    return safe_name(ck.run_dir.resolve().name or "arch")


def hard_ops(space: SearchSpace, probs: list[np.ndarray]) -> list[str]:
    """Each layer's most probable candidate (the first one on ties)."""
    return [layer.candidates[int(np.argmax(p))] for layer, p in zip(space.layers, probs)]


def draw_ops(space: SearchSpace, probs: list[np.ndarray], num: int,
             seed: int) -> list[list[str]]:
    """``num`` architectures, each layer drawn from softmax(theta); draw i depends on seed only."""
    rng = np.random.default_rng(seed % 2 ** 64)  # numpy takes no negative seeds; torch does
    return [[layer.candidates[int(rng.choice(len(p), p=p))]
             for layer, p in zip(space.layers, probs)] for _ in range(num)]


def log_probability(space: SearchSpace, probs: list[np.ndarray], ops: list[str]) -> float:
    """log P(ops) under the independent per-layer softmax(theta)."""
    return float(sum(math.log(max(float(p[layer.candidates.index(op)]), 1e-300))
                     for layer, p, op in zip(space.layers, probs, ops)))


def make_entry(ck: SearchCheckpoint, lut, ops: list[str], name: str, sampling: dict) -> dict:
    """The architecture file entry of ``ops`` sampled from checkpoint ``ck``."""
    return architecture_entry(ck.space, ck.probs, lut, ops, name, sampling, {
        "checkpoint": str(ck.path),
        "checkpoint_hash": ck.hash,
        "epoch": ck.epoch,
        "lut": str(lut.path) if lut.path else None,
        "lut_hash": file_hash(lut.path) if lut.path else None,
        "search_lut_hash": ck.lut_hash,
    })


def architecture_entry(space: SearchSpace, probs: list[np.ndarray], lut, ops: list[str],
                       name: str, sampling: dict, source: dict) -> dict:
    """The architecture file entry of ``ops``: model definition, the table's predictions,
    how it was chosen (``sampling``) under which probabilities (``probs``), and where from
    (``source``: the checkpoint and table and their hashes)."""
    defn = space.definition(ops, name)
    for block, layer in zip(defn["blocks"], space.layers):
        block["stage"] = layer.stage
    cal = lut.calibration is not None
    env = lut.data["environment"]
    logp = log_probability(space, probs, ops)
    return {
        "name": name,
        "space": {"name": space.name, "hash": space.hash},
        **{k: defn[k] for k in CORE_KEYS},
        "predicted": {
            "latency_us": round(lut.predict(ops), 3),
            "calibrated": cal,
            "table_sum_us": round(lut.raw_sum(ops), 3),
            "macs": int(lut.raw_sum(ops, "macs")),
            "params": int(lut.raw_sum(ops, "params")),
            "batch": lut.batch,
            "threads": lut.threads,
            "cpu": env.get("cpu"),
        },
        "sampling": sampling,
        "probability": float(math.exp(logp)),
        "log_probability": round(logp, 6),
        "theta_softmax": [{op: round(float(x), 6) for op, x in zip(layer.candidates, p)}
                          for layer, p in zip(space.layers, probs)],
        "source": source,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "fbnas": fbnas.__version__,
    }


def sample_architectures(ck: SearchCheckpoint, lut, hard: bool, num: int = 1, seed: int = 0,
                         name: str | None = None, budget: Budget | None = None) -> list[dict]:
    """Entries for the hard architecture or ``num`` distinct draws, fastest predicted first.

    With ``budget``, the hard architecture is the most probable one whose (calibrated)
    predicted latency is at most ``budget.us`` and, where any network of the space reaches
    it, at least ``budget.floor`` of it; at the search's own budget (``ck.budget``, floor
    included), the network its last-epoch one-shot check picked among those
    (``search.rerank``), where it fits ``lut``'s prediction too.
    """
    if budget is not None and not hard:
        raise UsageError("a latency budget (--target-ms) picks the most probable architecture "
                         "within it; it needs --hard")
    if hard:
        base = check_name(name) if name else f"{run_name(ck)}_hard"
        if budget is None:
            return [make_entry(ck, lut, hard_ops(ck.space, ck.probs), base,
                               {"method": "argmax"})]
        searched = (ck.decision is not None and ck.budget is not None
                    and abs(budget.us - ck.budget.us) < 1e-6 and budget.floor == ck.budget.floor
                    and lut.predict(ck.decision) <= budget.us)
        if searched:
            # the search's own budget, floor and a table it fits: its one-shot check chose
            ops = ck.decision
            how = {"method": "one_shot_rerank", "target_ms": round(budget.ms, 9)}
            if ck.decision_rank is not None:
                how["rank"], how["of"] = ck.decision_rank
            how["by"] = ck.config.search.rerank_by
        else:
            ops = ops_in_window(lut, ck.space, ck.probs, budget.us, budget.floor)
            how = {"method": "argmax_under_budget", "target_ms": round(budget.ms, 9)}
        if budget.floor:
            how["floor"] = budget.floor
        return [make_entry(ck, lut, ops, base, how)]
    if num < 1:
        raise FbnasError("--num must be at least 1")
    draws = draw_ops(ck.space, ck.probs, num, seed)
    first: dict[tuple[str, ...], int] = {}
    for i, ops in enumerate(draws):
        first.setdefault(tuple(ops), i)
    entries = []
    for ops, i in first.items():
        if name:
            nm = check_name(name) if num == 1 else f"{check_name(name)}_{i}"
        else:
            nm = f"{run_name(ck)}_seed{seed}_{i}"
        times = sum(1 for d in draws if tuple(d) == ops)
        entries.append(make_entry(ck, lut, list(ops), nm,
                                  {"method": "softmax", "seed": seed, "draw": i,
                                   "times_drawn": times, "draws": num}))
    entries.sort(key=lambda e: e["predicted"]["latency_us"])
    return entries
