"""The CPU timing protocol shared by profiling, calibration and whole-network latency.

Every measurement runs with an explicit thread count, under ``torch.inference_mode()``, after
warm-up calls, through ``torch.utils.benchmark``. What a timed call does is the runtime's
business (fbnas.latency.runtimes: a module in eval mode, or an ONNX Runtime session); this module only
calls it, so that every runtime is timed with the same rounds and drift correction.

A shared machine's speed drifts by several percent from one second to the next (and by far
more during a busy spell), which swamps the few-percent differences between candidate ops.
So items are not timed one after the other in long runs. Instead:

* Items come in *units* (for a table: the candidates of one layer shape; for calibration: one
  network). Every *round* visits all units in a fresh random order and times each item of a
  unit, in random order, as one short *block* of calls (a few milliseconds), so that the items
  compared with each other are timed moments apart.
* Many rounds are pooled. Before pooling, every block is divided by the machine's *local
  speed*: the median, over the neighbouring blocks in time, of how much slower than its own
  typical time each neighbour ran (``drift_correct``). A slow spell then slows an item and its
  neighbours alike and cancels out, instead of landing on whichever item ran during it.
* An item's time is the median of its corrected blocks; its IQR is that of the corrected
  blocks, its min the fastest raw block.
"""

from __future__ import annotations

import os
import platform
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch.utils import benchmark

import fbnas
from fbnas.latency.runtimes import DEFAULT_BLOCK_TIME
from fbnas.machine import cpu_identity, cpu_model
from fbnas.progress import Progress

#: neighbouring blocks on each side whose slowdown estimates the machine's local speed
DRIFT_NEIGHBOURS = 4


def set_threads(threads: int) -> None:
    """Pin torch's intra-op thread count (recorded with every measurement)."""
    if threads < 1:
        raise ValueError("threads must be at least 1")
    torch.set_num_threads(threads)


def environment(threads: int, device: str = "cpu") -> dict:
    """What a reader needs to reproduce or distrust a measurement."""
    return {
        "fbnas": fbnas.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_id": cpu_identity(),  # the name alone can be a whole family (fbnas/machine.py)
        "machine": platform.machine(),
        "system": platform.system(),
        "logical_cpus": os.cpu_count(),
        "threads": threads,
        "device": device,
    }


def protocol(rounds: int, block_time: float, warmup: int) -> dict:
    """How ``measure_rounds`` timed: stored with every table."""
    return {
        "timer": "torch.utils.benchmark.Timer.timeit, one block of calls per item and round",
        "rounds": rounds, "block_time_s": block_time, "warmup_calls": warmup,
        "order": "rounds visit units in random order; a unit's items back to back, random order",
        "statistic": "median of drift-corrected block times",
        "drift_correction": f"each block divided by the median slowdown of the "
                            f"{2 * DRIFT_NEIGHBOURS} blocks around it",
    }


def drift_correct(items: np.ndarray, times: np.ndarray, visits: np.ndarray | None = None,
                  neighbours: int = DRIFT_NEIGHBOURS, iterations: int = 3) -> np.ndarray:
    """Divide each block time by the machine's local speed factor around it.

    ``items`` holds the item index of each block and ``times`` its time, both in the order
    the blocks ran; ``visits`` (default: every block alone) numbers runs of consecutive
    blocks that share one correction, such as the items of a unit timed back to back, so
    that comparisons inside a visit stay plain paired comparisons. Model: log time = item
    level + drift(t) + noise. The item levels (medians) and the drift (for each visit, the
    median residual of the ``neighbours`` blocks before it and after it) are estimated in
    turn; the drift is centred on its median so that corrected times keep the typical speed
    of the whole run.
    """
    items = np.asarray(items)
    logt = np.log(np.asarray(times, dtype=np.float64))
    n = logt.size
    if len(np.unique(items)) < 2 or n < 3:
        return np.exp(logt)  # nothing to tell an item's own spread from the machine's
    visits = np.arange(n) if visits is None else np.asarray(visits)
    starts = np.flatnonzero(np.r_[True, visits[1:] != visits[:-1]])
    ends = np.r_[starts[1:], n]
    offsets = np.arange(1, neighbours + 1)
    window = np.concatenate([starts[:, None] - offsets, ends[:, None] - 1 + offsets], axis=1)
    valid = (window >= 0) & (window < n)
    window = np.clip(window, 0, n - 1)
    lengths = ends - starts
    order = np.argsort(items, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(items[order])) + 1)
    drift = np.zeros_like(logt)
    for _ in range(iterations):
        resid = logt - drift
        level = np.empty_like(logt)
        for sel in groups:
            level[sel] = np.median(resid[sel])
        around = np.where(valid, (logt - level)[window], np.nan)
        per_visit = np.nanmedian(around, axis=1) if valid.any(axis=1).all() else \
            np.array([np.median(r[v]) if v.any() else 0.0 for r, v in zip(around, valid)])
        drift = np.repeat(per_visit, lengths)
        drift -= np.median(drift)
    return np.exp(logt - drift)


@dataclass
class Timings:
    """Every timed block in the order it ran: item key, round, seconds per call."""

    keys: list[str]
    calls: dict[str, int]
    block_keys: list[str] = field(default_factory=list)
    block_rounds: list[int] = field(default_factory=list)
    block_times: list[float] = field(default_factory=list)
    block_visits: list[int] = field(default_factory=list)

    @property
    def rounds_run(self) -> int:
        return max(self.block_rounds, default=-1) + 1

    def _index(self) -> np.ndarray:
        pos = {k: i for i, k in enumerate(self.keys)}
        return np.array([pos[k] for k in self.block_keys], dtype=np.int64)

    def corrected(self) -> np.ndarray:
        return drift_correct(self._index(), np.array(self.block_times),
                             np.array(self.block_visits))

    def blocks(self, key: str, parity: int | None = None, corrected: np.ndarray | None = None
               ) -> np.ndarray:
        """Seconds per call of ``key``'s blocks (corrected if given); ``parity`` 0/1 keeps the
        even/odd rounds only."""
        source = np.asarray(self.block_times if corrected is None else corrected)
        sel = self._index() == self.keys.index(key)
        if parity is not None:
            sel &= np.asarray(self.block_rounds) % 2 == parity
        return source[sel]

    def summaries(self) -> dict[str, dict]:
        """Per item: median and IQR of corrected blocks, min raw block (us), block count."""
        index = self._index()
        order = np.argsort(index, kind="stable")
        bounds = np.searchsorted(index[order], np.arange(len(self.keys) + 1))
        corr = self.corrected()[order] * 1e6
        raw = np.asarray(self.block_times)[order] * 1e6
        out = {}
        for i, k in enumerate(self.keys):
            c, r = corr[bounds[i]:bounds[i + 1]], raw[bounds[i]:bounds[i + 1]]
            q1, med, q3 = np.percentile(c, [25, 50, 75])
            out[k] = {"median": float(med), "iqr": float(q3 - q1), "min": float(r.min()),
                      "runs": int(c.size), "calls_per_run": self.calls[k],
                      "raw_median": float(np.median(r))}
        return out


def measure_rounds(
    items: dict[str, Callable[[], object]],
    threads: int,
    units: list[list[str]] | None = None,
    rounds: int = 60,
    block_time: float = DEFAULT_BLOCK_TIME,
    warmup: int = 3,
    refine: Callable[[dict[str, dict]], list[list[str]]] | None = None,
    extra_rounds: int = 0,
    extra_time: float | None = None,
    refine_every: int = 10,
    seed: int = 0,
    desc: str = "timing",
) -> Timings:
    """Time every item once per round, unit by unit (see the module docstring).

    ``units`` groups the keys of ``items`` that should be timed back to back (default: every
    item alone). After the regular rounds, up to ``extra_rounds`` more rounds (and at most
    ``extra_time`` seconds of them) time only the units that ``refine`` picks, given the
    current summaries; it is asked again every ``refine_every`` rounds and returns an empty
    list when nothing needs more timing.
    """
    set_threads(threads)
    rng = random.Random(seed)
    keys = list(items)
    units = [list(u) for u in units] if units is not None else [[k] for k in keys]
    if sorted(k for u in units for k in u) != sorted(keys):
        raise ValueError("units must hold every item exactly once")
    timers = {k: benchmark.Timer(stmt="fn()", globals={"fn": items[k]}, num_threads=threads)
              for k in keys}
    with torch.inference_mode():
        calls = {}
        for k in keys:
            for _ in range(warmup):
                items[k]()
            probe = timers[k].timeit(max(1, warmup)).times[0]
            calls[k] = max(1, int(round(block_time / max(probe, 1e-9))))
        out = Timings(keys=keys, calls=calls)
        progress = Progress(total=len(keys) * rounds, desc=desc)

        def one_round(r: int, todo: list[list[str]]) -> None:
            order = todo[:]
            rng.shuffle(order)
            for unit in order:
                unit = unit[:]
                rng.shuffle(unit)
                visit = len(out.block_visits) and out.block_visits[-1] + 1
                for k in unit:
                    out.block_visits.append(visit)
                    out.block_times.append(timers[k].timeit(calls[k]).times[0])
                    out.block_keys.append(k)
                    out.block_rounds.append(r)
                    progress.update()

        for r in range(rounds):
            one_round(r, units)
        started = time.monotonic()
        todo: list[list[str]] = []
        for r in range(rounds, rounds + extra_rounds):
            if extra_time is not None and time.monotonic() - started >= extra_time:
                break
            if (r - rounds) % max(1, refine_every) == 0:
                todo = [u for u in refine(out.summaries()) if u] if refine is not None else []
            if not todo:
                break
            progress.add(sum(len(u) for u in todo))
            one_round(r, todo)
        progress.close()
    return out
