"""The training-speed bench's report: the newest run of each network from its results file."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def speed_row(date: str, network: str, path: str, ms: float, cpu: str = "AMD EPYC") -> dict:
    return {"date": date, "cpu": cpu, "cpu_id": None, "native_bf16": False, "threads": 1,
            "torch": "2.x", "what": "retrain step", "network": network, "batch": 64,
            "path": path, "ms": ms, "images_per_s": round(64000 / ms, 1), "vs_nchw": 1.0,
            "vs_floor": 2.0}


@pytest.mark.slow  # a subprocess: the bench is a script, run as its user runs it
def test_report_prints_each_networks_newest_run(tmp_path):
    rows = [speed_row("2026-11-28", "found-1.8ms", "nchw", 900.0),
            speed_row("2026-11-29", "found-1.8ms", "nchw", 800.0),
            speed_row("2026-11-29", "found-1.8ms", "channels_last-kept", 500.0),
            # the same table again the same day: a path that comes again starts a new run
            speed_row("2026-11-29", "found-1.8ms", "nchw", 800.0),
            speed_row("2026-11-29", "found-1.8ms", "channels_last-kept", 400.0),
            speed_row("2026-11-29", "fbnet_c", "nchw", 3000.0, cpu="Intel Xeon")]
    results = tmp_path / "speed.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def report(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "bench" / "bench_speed.py"), "report",
                               "--results", str(results), *more],
                              capture_output=True, text=True, cwd=REPO)

    out = report().stdout
    assert "| nchw | 800.0 | 80.0 | 1.00x | 2.00x |" in out and "| 900.0 |" not in out
    assert "| channels_last-kept | 400.0 |" in out and "| 500.0 |" not in out
    assert out.count("| nchw | 800.0 |") == 1 and "fbnet_c, retrain step" in out
    assert "AMD EPYC (no native bfloat16), torch 2.x, 2026-11-29" in out
    assert "| 500.0 |" not in report("--network", "found-1.8ms").stdout
    only = report("--cpu", "xeon").stdout
    assert "fbnet_c" in only and "found-1.8ms" not in only
    none = report("--date", "2026-01-01")
    assert none.returncode != 0 and "no rows" in none.stderr and "Traceback" not in none.stderr
