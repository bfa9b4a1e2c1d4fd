"""bench/bench_cuda.py, the GPU paths' check, run on the CPU as --device cpu runs it: every
check passes there and the row names what ran."""

import json
import subprocess
import sys

import pytest

from tests.conftest import CIFAR_SUBSET, REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cifar_subset")]


def test_the_cuda_checks_pass_on_the_cpu_and_record_a_row(tmp_path):
    results = tmp_path / "cuda.jsonl"
    p = subprocess.run([sys.executable, str(REPO / "bench" / "bench_cuda.py"), "--device", "cpu",
                        "--data-dir", str(CIFAR_SUBSET), "--out", str(tmp_path / "runs"),
                        "--results", str(results)], capture_output=True, text=True, cwd=REPO,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    row = json.loads(results.read_text())
    assert row["device"] == "cpu" and row["gpu"] is None
    assert [c["check"] for c in row["checks"]] == ["device", "budget", "retrain", "resume"]
    assert all(c["ok"] for c in row["checks"])
    # on the CPU the kernels add in a fixed order: the resumed search equals the straight one
    assert "straight runs differ by 0, the resumed one by 0" in row["checks"][3]["seen"]
    assert p.stdout.strip().splitlines()[-1].startswith("4 of 4 checks passed")
