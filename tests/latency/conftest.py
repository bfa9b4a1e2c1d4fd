"""The tiny bundle, its timed results and the table made from them, built once for the whole
run: exporting the bundle's 22 entries with torch's ONNX exporter is most of the time of the
tests that use them (tests/latency/test_bundle.py, test_device_input.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def bundle(tmp_path_factory):
    """A tiny fp32 bundle with 5 calibration networks, written by the CLI with 2 jobs."""
    from tests.latency.test_bundle import cli

    out = tmp_path_factory.mktemp("bundle") / "tiny_bundle"
    res = cli("profile", "--space", "tiny", "--bundle", out, "--networks", 5, "--jobs", 2)
    assert res.exit_code == 0, res.output
    assert f"wrote {out}" in res.stdout and "run.py --out results.json" in res.stdout
    return out


@pytest.fixture(scope="session")
def results(bundle, tmp_path_factory):
    """The bundle timed by its run.py in a subprocess, torch and fbnas unimportable."""
    from tests.latency.test_bundle import RUN, run_py

    where = tmp_path_factory.mktemp("device")
    proc = run_py(bundle, "--out", "results.json", *RUN, cwd=where, without_fbnas=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "entries:" in proc.stderr and "files match the manifest" in proc.stderr
    assert "wrote results.json" in proc.stdout
    return where / "results.json"


@pytest.fixture(scope="session")
def table(results, tmp_path_factory):
    """The table ``fbnas profile --from-results`` makes of those results."""
    from tests.latency.test_bundle import cli

    out = tmp_path_factory.mktemp("table") / "device.json"
    res = cli("profile", "--space", "tiny", "--from-results", results, "--out", out)
    assert res.exit_code == 0, res.output
    assert "calibrated table, test" in res.stdout and f"wrote {out}" in res.stdout
    return out
