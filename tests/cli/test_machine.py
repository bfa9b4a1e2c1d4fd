import os

import torch

from fbnas import machine


def test_busy_warning_counts_free_cores(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 0.0, 0.0))
    line = machine.busy_warning(2, "training")
    assert "load average 3.0 on 4 cores leaves 1.0 free for training on 2 thread(s)" in line
    assert machine.busy_warning(1, "training") is None
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.0, 0.0))
    assert machine.busy_warning(4, "profiling") is None


def test_bf16_warning_only_where_the_cpu_emulates_it(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(machine, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert "set run.precision: fp32" in machine.precision_warning("bf16", cpu)
    assert machine.precision_warning("fp32", cpu) is None
    monkeypatch.setattr(machine, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert machine.precision_warning("bf16", cpu) is None


_FAULTS = """
import resource, sys, torch
from fbnas.machine import keep_freed_memory
kept = sys.argv[1] == "keep" and keep_freed_memory()
for _ in range(8):  # warm-up steps: 64 MB, above glibc's largest threshold for fresh pages
    torch.empty(16 << 20).fill_(1.0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    torch.empty(16 << 20).fill_(1.0)
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0], int(out[1])


def test_kept_memory_is_reused_without_page_faults():
    """A step's large tensors come from the heap again instead of fresh pages: five 64 MB
    allocations after eight warm-up ones fault about 80,000 pages by default, next to none
    kept."""
    kept, faults = _faults("keep")
    default, default_faults = _faults("default")
    assert (kept, default) == ("True", "False")  # Linux with glibc, as CI runs
    assert default_faults > 5 * 16_000 * 0.9
    assert faults < 1_000
