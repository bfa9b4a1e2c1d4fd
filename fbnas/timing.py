"""The CPU timing protocol shared by profiling, calibration and whole-network latency.

Every measurement runs with an explicit thread count, in eval mode under
``torch.inference_mode()``, after warm-up calls, through ``torch.utils.benchmark``. Items are
timed in interleaved rounds (round-robin in a shuffled order) so that slow drifts of a shared
machine spread over all items instead of biasing whichever ran during a busy spell; the
block times of all rounds are pooled, and items whose IQR stays above a share of their median
get extra rounds.
"""

from __future__ import annotations

import os
import platform
import random
from typing import Callable

import numpy as np
import torch
from torch.utils import benchmark

import fbnas
from fbnas.progress import Progress


def set_threads(threads: int) -> None:
    """Pin torch's intra-op thread count (recorded with every measurement)."""
    if threads < 1:
        raise ValueError("threads must be at least 1")
    torch.set_num_threads(threads)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment(threads: int, device: str = "cpu") -> dict:
    """What a reader needs to reproduce or distrust a measurement."""
    return {
        "fbnas": fbnas.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "system": platform.system(),
        "logical_cpus": os.cpu_count(),
        "threads": threads,
        "device": device,
    }


def summarize(times_s: list[float]) -> dict:
    """Median, IQR and min in microseconds, plus the number of timed blocks."""
    t = np.asarray(times_s, dtype=np.float64) * 1e6
    q1, med, q3 = np.percentile(t, [25, 50, 75])
    return {"median": float(med), "iqr": float(q3 - q1), "min": float(t.min()), "runs": int(t.size)}


def runner(module: torch.nn.Module, x: torch.Tensor) -> Callable[[], object]:
    """A zero-argument call of ``module`` on ``x`` in eval mode."""
    module.eval()
    return lambda: module(x)


def measure_interleaved(
    items: dict[str, Callable[[], object]],
    threads: int,
    rounds: int = 5,
    min_run_time: float = 0.05,
    rel_iqr: float = 0.10,
    extra_rounds: int = 4,
    warmup: int = 3,
    seed: int = 0,
    desc: str = "timing",
    per_round: dict[str, list[list[float]]] | None = None,
) -> dict[str, list[float]]:
    """Time every item in interleaved rounds; return pooled per-call block times in seconds.

    With ``per_round`` (a dict to fill), the block times of each regular round are also kept
    apart, so that halves of the rounds can serve as independent repeat measurements.
    """
    set_threads(threads)
    rng = random.Random(seed)
    keys = list(items)
    times: dict[str, list[float]] = {k: [] for k in keys}
    if per_round is not None:
        per_round.update({k: [] for k in keys})
    with torch.inference_mode():
        for k in keys:
            for _ in range(warmup):
                items[k]()
        timers = {k: benchmark.Timer(stmt="fn()", globals={"fn": items[k]}, num_threads=threads)
                  for k in keys}
        progress = Progress(total=len(keys) * rounds, desc=desc)
        for _ in range(rounds):
            order = keys[:]
            rng.shuffle(order)
            for k in order:
                block = timers[k].blocked_autorange(min_run_time=min_run_time).times
                times[k].extend(block)
                if per_round is not None:
                    per_round[k].append(list(block))
                progress.update()
        for _ in range(extra_rounds):
            noisy = [k for k in keys if _rel_iqr(times[k]) > rel_iqr]
            if not noisy:
                break
            progress.add(len(noisy))
            rng.shuffle(noisy)
            for k in noisy:
                times[k].extend(timers[k].blocked_autorange(min_run_time=min_run_time).times)
                progress.update()
        progress.close()
    return times


def _rel_iqr(times: list[float]) -> float:
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return float((q3 - q1) / med) if med > 0 else float("inf")
