import os

import torch

from fbnas import machine
from fbnas.latency import device_runner


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
    assert "set run.precision: fp32" in machine.precision_warning("bf16_products", cpu)
    monkeypatch.setattr(machine, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert machine.precision_warning("bf16", cpu) is None
    assert machine.precision_warning("bf16_products", cpu) is None
    line = machine.precision_warning("bf16_products", torch.device("cuda"))
    assert "changes only CPU steps" in line and "run.precision: bf16" in line


_FAULTS = """
import resource, sys, torch
from fbnas.machine import keep_freed_memory
kept = sys.argv[1] in ("keep", "released") and keep_freed_memory()
if sys.argv[1] == "released":  # kept, then given back (as a run does when it streams)
    kept = not keep_freed_memory(False)
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
    allocations after eight warm-up ones fault about 80,000 pages by default (16,384 each),
    kept at most one allocation's worth (none, or one when a small allocation has split the
    heap's free block and the heap grows once more)."""
    kept, faults = _faults("keep")
    default, default_faults = _faults("default")
    assert (kept, default) == ("True", "False")  # Linux with glibc, as CI runs
    assert default_faults > 5 * 16_384 * 0.9
    assert faults < 1.5 * 16_384


def test_released_memory_goes_back_to_glibcs_defaults():
    """A process that stops keeping freed memory gets large blocks mapped apart again, as
    by default: each is returned when freed, so a heap can no longer grow by fragments."""
    kept, faults = _faults("released")
    assert kept == "False"
    assert faults > 5 * 16_000 * 0.9


_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 sha_ni

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
"""


def test_cpu_identity_reads_the_first_processor_as_the_device_runner_does(monkeypatch,
                                                                          tmp_path):
    """A device's table and this machine's are compared by these fields, so the runner
    (run.py, which cannot import fbnas) must read them exactly as fbnas does."""
    info = tmp_path / "cpuinfo"
    info.write_text(_CPUINFO)
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(
        info if path == "/proc/cpuinfo" else path, *a, **k))
    machine._first_processor.cache_clear()
    try:
        assert machine.cpu_model() == "AMD EPYC"
        assert machine.cpu_identity() == {"vendor": "AuthenticAMD", "family": "25",
                                          "model": "17", "stepping": "1",
                                          "isa": ["avx", "avx2", "fma", "avx512f",
                                                  "avx512_bf16"]}
        assert machine.native_bf16()
        assert device_runner.cpu_identity() == machine.cpu_identity()
        assert device_runner.ISA_FLAGS == machine.ISA_FLAGS
    finally:
        machine._first_processor.cache_clear()


def test_cpus_of_one_name_told_apart_by_model_and_instruction_sets():
    zen4 = {"vendor": "AuthenticAMD", "family": "25", "model": "17", "stepping": "1",
            "isa": ["avx", "avx2", "fma", "avx512f", "avx512_bf16"]}
    assert machine.cpu_difference(zen4, dict(zen4, stepping="2")) is None  # same timings
    assert machine.cpu_difference(zen4, {"vendor": "AuthenticAMD"}) is None  # nothing to compare
    zen3 = dict(zen4, model="1", isa=["avx", "avx2", "fma"])
    assert machine.cpu_difference(zen3, zen4) == (
        "family 25 model 1, avx avx2 fma; this one family 25 model 17, avx avx2 fma avx512f "
        "avx512_bf16")
