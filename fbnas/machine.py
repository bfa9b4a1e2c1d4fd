"""What the CPU a run starts on is and can give it: its name and identity, free cores now,
native bfloat16 units, and memory that is reused instead of faulted in afresh every step.

A CPU's name alone does not identify it: virtual machines often report a family name (every
AMD EPYC generation shows as "AMD EPYC"), and two of them time the same op differently, since
kernel libraries pick their code by instruction set (AVX2 or AVX-512, bf16 and VNNI units).
So a table records the vendor, family, model and those instruction sets too
(:func:`cpu_identity`), and :func:`cpu_difference` tells two apart by them.

Two things decide whether a run's speed (and a profile's timings) can be trusted and which
precision pays: how many cores other processes already keep busy (the 1-minute load average
against the core count; OpenMP threads that find no free core spin against the other
processes, and a step then takes several times longer), and whether the CPU computes in
bfloat16 natively (AVX512_BF16 or AMX). Without those units torch emulates bf16 in fp32 and
casts both ways, so ``run.precision: bf16`` only slows a step down.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from functools import lru_cache

import torch

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: the instruction sets that choose a kernel library's code paths (x86 flags, then ARM's
#: Features), in the order a reader names them. The device runner (run.py, which runs
#: without fbnas) holds the same list and reading; a test keeps the two equal.
ISA_FLAGS = ("avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16",
             "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimddp", "sve", "sve2", "i8mm",
             "bf16")
#: /proc/cpuinfo fields that, with the instruction sets, identify a CPU model (x86, then ARM)
_ID_FIELDS = {"vendor_id": "vendor", "cpu family": "family", "model": "model",
              "stepping": "stepping", "CPU implementer": "implementer", "CPU part": "part"}

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
# the free memory at the heap's top that glibc hands back to the kernel: 1 GiB, more than a
# step of the bundled spaces' networks allocates, so that a step's tensors stay in the heap
_TRIM_BYTES = 1 << 30
# glibc's own defaults, which a process that stops keeping freed memory goes back to
_DEFAULT_MMAP_MAX, _DEFAULT_TRIM_BYTES = 65536, 128 * 1024


@lru_cache(maxsize=1)
def _first_processor() -> dict[str, str]:
    """/proc/cpuinfo's fields for its first processor, read once ({} where there is no such
    file)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:  # the first processor's block ends at its blank line
                        break
                    continue
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (what every table records)."""
    return _first_processor().get("model name") or platform.processor() or "unknown"


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is no such file)."""
    cpu = _first_processor()
    return frozenset((cpu.get("flags") or cpu.get("Features") or "").split())


def cpu_identity() -> dict:
    """What tells this CPU from another of the same name: vendor, family, model and stepping
    (ARM: implementer and part) and the instruction sets of ``ISA_FLAGS`` it has; {} where
    /proc/cpuinfo does not say."""
    cpu = _first_processor()
    ident: dict = {name: cpu[field] for field, name in _ID_FIELDS.items() if cpu.get(field)}
    flags = cpu_flags()
    if flags:
        ident["isa"] = [f for f in ISA_FLAGS if f in flags]
    return ident


def describe_cpu(ident: dict) -> str:
    """'family 25 model 17, avx avx2 fma avx512f avx512_bf16': the fields present, then the
    instruction sets the CPU has."""
    parts = [f"{k} {ident[k]}" for k in ("family", "model", "implementer", "part") if k in ident]
    text = " ".join(parts)
    if "isa" in ident:
        isa = ident["isa"] if isinstance(ident["isa"], list) else [ident["isa"]]
        text += (", " if text else "") + (" ".join(map(str, isa)) or "no listed vector units")
    return text or "unidentified"


def cpu_difference(theirs: dict, mine: dict) -> str | None:
    """Where two :func:`cpu_identity` records differ in what changes timings (vendor, family,
    model, instruction sets; not the stepping), as 'theirs; mine' text, else None. Fields one
    of them lacks are not compared."""
    keys = [k for k in ("vendor", "family", "model", "implementer", "part", "isa")
            if k in theirs and k in mine]
    if all(theirs[k] == mine[k] for k in keys):
        return None
    return f"{describe_cpu(theirs)}; this one {describe_cpu(mine)}"


def native_bf16() -> bool:
    """Whether this CPU has bfloat16 arithmetic units torch's kernels use."""
    return any(flag in cpu_flags() for flag in BF16_FLAGS)


def keep_freed_memory(keep: bool = True) -> bool:
    """Serve every allocation from the process heap and keep what is freed there for the
    next step (glibc's malloc on Linux); True where that was set, False elsewhere. With
    ``keep`` False, go back to glibc's defaults (large blocks mapped apart and returned).

    Why: glibc gives each allocation of more than 32 MB (and, as its threshold moves, many
    smaller ones) its own fresh pages and returns them to the kernel when freed. A training
    step allocates the same large tensors again every step (batch 64 at 144 channels of
    32x32 is 38 MB), and each comes back as page faults on zeroed pages, so a large share of
    each step runs in the kernel. From the heap the same step faults almost never and runs
    faster (docs/retrain.md). The cost is memory: the process keeps its peak allocation for the rest of the run instead of shrinking
    between steps. Results are unchanged (``run.keep_freed_memory``, docs/retrain.md).

    Not for streamed data: there each batch arrives from a worker process between the step's
    allocations, and the heap, which never shrinks, fragments and grows with every batch, so
    a run's memory would grow with its data set (``fbnas.runs.loaders`` turns it off)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    mmap_max, trim = (0, _TRIM_BYTES) if keep else (_DEFAULT_MMAP_MAX, _DEFAULT_TRIM_BYTES)
    return bool(mallopt(_M_MMAP_MAX, mmap_max)) and bool(mallopt(_M_TRIM_THRESHOLD, trim))


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
    """One line when ``run.precision`` asks for bfloat16 on a CPU that only emulates it, or
    for ``bf16_products`` (a CPU route) on another device."""
    if precision == "bf16_products" and device.type != "cpu":
        return (f"run.precision bf16_products changes only CPU steps, not {device.type} ones: "
                f"set run.precision: bf16 for bfloat16 autocast on {device.type}")
    if precision != "fp32" and device.type == "cpu" and not native_bf16():
        return (f"run.precision is {precision} but this CPU has no native bfloat16 units "
                "(avx512_bf16 or amx_bf16): steps run slower than in fp32; set "
                "run.precision: fp32")
    return None
