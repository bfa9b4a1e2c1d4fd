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
