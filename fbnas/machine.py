"""What the CPU a run starts on can give it: free cores now, and native bfloat16 units.

Two things decide whether a run's speed (and a profile's timings) can be trusted and which
precision pays: how many cores other processes already keep busy (the 1-minute load average
against the core count; OpenMP threads that find no free core spin against the other
processes, and a step then takes several times longer), and whether the CPU computes in
bfloat16 natively (AVX512_BF16 or AMX). Without those units torch emulates bf16 in fp32 and
casts both ways, so ``run.precision: bf16`` only slows a step down.
"""

from __future__ import annotations

import os
from functools import lru_cache

import torch

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is no such file)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def native_bf16() -> bool:
    """Whether this CPU has bfloat16 arithmetic units torch's kernels use."""
    return any(flag in cpu_flags() for flag in BF16_FLAGS)


def busy_warning(threads: int | None, what: str) -> str | None:
    """One line when the machine's load already leaves fewer free cores than ``threads``
    (torch's own count where None) for ``what`` ("training", "profiling"), else None."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return None
    cores = os.cpu_count() or 1
    want = threads or torch.get_num_threads()
    free = max(0.0, cores - load)
    # three quarters of a core of slack: the 1-minute average still counts processes that
    # just ended, and this one's own start; a whole core kept busy by others is what hurts
    if want <= free + 0.75:
        return None
    return (f"the machine is busy: load average {load:.1f} on {cores} cores leaves "
            f"{free:.1f} free for {what} on {want} thread(s); {what} will run slower "
            "(and time noisily) until the other processes finish")


def precision_warning(precision: str, device: torch.device) -> str | None:
    """One line when ``run.precision: bf16`` runs on a CPU that only emulates bfloat16."""
    if precision == "bf16" and device.type == "cpu" and not native_bf16():
        return ("run.precision is bf16 but this CPU has no native bfloat16 units (avx512_bf16 "
                "or amx_bf16): steps run slower than in fp32; set run.precision: fp32")
    return None
