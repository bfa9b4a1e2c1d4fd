"""Device tables end to end: bundle here, time with run.py in a bare environment, import.

What a user does for another device, done on this machine so the result can be checked
against `fbnas profile` here:

1. `fbnas profile --space S --bundle WORK/bundle [--precision P]` (wall time);
2. a fresh virtual environment WORK/ortenv holding only onnxruntime and numpy (made with
   `python -m venv` and pip unless it exists; the script checks that torch and fbnas do not
   import there), and the bundle's `run.py` run with it from WORK, outside the checkout, with
   no PYTHONPATH (wall time);
3. `fbnas profile --space S --from-results ... --out WORK/device.json` (wall time);
4. for fp32, `fbnas profile --space S --out WORK/here.json --check 50` here, the same
   entries and as many calibration networks timed by fbnas itself (wall time), and the two
   tables compared entry by entry (bench_profile's comparison);
   for int8, the comparison is against the fp32 table named by --against (a device table of
   the same machine), which shows how the int8 ranking differs.

Prints each step's wall time, the device table's calibration fidelity (as `fbnas calibrate`
reports it) and the comparison, and appends them as one JSON line to
bench/results/device.jsonl.

    python bench/bench_device.py --space fbnet_cifar --work /tmp/dev_fp32
    python bench/bench_device.py --space fbnet_cifar --work /tmp/dev_int8 --precision int8 \\
        --data-dir ../shared/data/cifar10-subset --against /tmp/dev_fp32/device.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_profile import compare

from fbnas.latency.lut import load_lut

RESULTS = Path(__file__).resolve().parent / "results" / "device.jsonl"


def run(cmd: list[str], cwd: Path, env: dict | None = None) -> float:
    """Run ``cmd`` (its output shown as it comes), stop on failure; return its wall time."""
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=cwd, env=env, check=True)
    return time.monotonic() - t0


def bare_env(work: Path, onnxruntime: str) -> Path:
    """A virtual environment with onnxruntime and numpy only; returns its python."""
    venv = work / "ortenv"
    py = venv / "bin" / "python"
    if not py.exists():
        run([sys.executable, "-m", "venv", str(venv)], work)
        run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             f"onnxruntime=={onnxruntime}", "numpy"], work)
    for module in ("torch", "fbnas"):
        probe = subprocess.run([str(py), "-c", f"import {module}"], cwd=work, env=clean_env(),
                               capture_output=True)
        if probe.returncode == 0:
            sys.exit(f"{venv} can import {module}; use a fresh --work folder")
    return py


def clean_env() -> dict:
    """This environment without anything that would let run.py find fbnas or its packages."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def fidelity(lut) -> dict:
    """The table's calibration and its stored fidelity figures (as fbnas calibrate prints)."""
    cal = lut.data.get("calibration") or {}
    rows = ("noise_floor", "raw_table_test", "calibrated_table_test")
    return {"a": cal.get("a"), "b": cal.get("b"),
            **{row: cal["report"][row] for row in rows if row in cal.get("report", {})}}


def op_ratios(a, b, networks: int = 200) -> dict:
    """Print b / a per candidate op (median over its shapes) and for the calibrated
    predictions of random whole networks, with their Kendall tau: how far b's ranking of
    networks is from a's, which is what a search sees."""
    import numpy as np
    from scipy.stats import kendalltau

    from fbnas.latency.fidelity import random_archs

    keys: dict[str, set] = {}
    for layer in a.data["layers"]:
        for op, key in layer["candidates"].items():
            keys.setdefault(op, set()).add(key)
    out = {"ops": {}}
    print("per op, b / a over its layer shapes: median (range)")
    for op, ks in sorted(keys.items()):
        r = [b.entry(k)["median"] / a.entry(k)["median"] for k in ks]
        out["ops"][op] = [float(np.median(r)), min(r), max(r)]
        print(f"  {op:<10}{np.median(r):6.2f} ({min(r):.2f} .. {max(r):.2f})")
    archs = random_archs(a, networks, seed=5)
    pa = np.array([a.predict(ops) for ops in archs])
    pb = np.array([b.predict(ops) for ops in archs])
    r = pb / pa
    tau = float(kendalltau(pa, pb).statistic)
    print(f"{networks} random networks, predicted b / a: median {np.median(r):.3f} "
          f"({r.min():.3f} .. {r.max():.3f}), Kendall tau {tau:.3f}")
    out["networks"] = {"n": networks, "median": float(np.median(r)), "min": float(r.min()),
                       "max": float(r.max()), "kendall_tau": tau}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="fbnet_cifar")
    ap.add_argument("--work", type=Path,
                    help="Folder outside the checkout for the bundle, the environment and "
                         "the tables (reused: an existing bundle or environment is kept).")
    ap.add_argument("--precision", choices=["fp32", "int8"], default="fp32")
    ap.add_argument("--data-dir", help="CIFAR-10 images for int8 calibration.")
    ap.add_argument("--against", type=Path, help="Table to compare with (int8: an fp32 "
                                                 "device table); fp32 profiles one here.")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--networks", type=int, default=50)
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"),
                    help="Only compare two tables of one space (B against A) and exit.")
    args = ap.parse_args()
    if args.compare:
        a, b = (load_lut(p) for p in args.compare)
        compare(a, b, args.compare[0].name, args.compare[1].name)
        op_ratios(a, b)
        return

    import onnxruntime

    if args.work is None:
        ap.error("--work is required (unless --compare)")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    fbnas = [sys.executable, "-m", "fbnas.cli"]
    walls = {}
    py = bare_env(work, onnxruntime.__version__)
    bundle = work / "bundle"
    if not bundle.exists():
        cmd = fbnas + ["profile", "--space", args.space, "--bundle", str(bundle),
                       "--precision", args.precision, "--networks", str(args.networks)]
        if args.data_dir:
            cmd += ["--data-dir", str(Path(args.data_dir).resolve())]
        walls["bundle"] = run(cmd, work)
    results = work / "results.json"
    walls["runner"] = run([str(py), str(bundle / "run.py"), "--out", str(results), "--threads",
                           str(args.threads), "--force"], work, env=clean_env())
    device = work / "device.json"
    walls["import"] = run(fbnas + ["profile", "--space", args.space, "--from-results",
                                   str(results), "--out", str(device), "--force"], work)
    against = args.against
    if against is None and args.precision == "fp32":
        against = work / "here.json"
        walls["profile_here"] = run(fbnas + ["profile", "--space", args.space, "--out",
                                             str(against), "--threads", str(args.threads),
                                             "--check", str(args.networks), "--force"], work)
    dev = load_lut(device)
    row = {"space": args.space, "precision": args.precision, "threads": args.threads,
           "cpu": dev.data["environment"]["cpu"], "created": dev.data["created"],
           "walls_s": {k: round(v, 1) for k, v in walls.items()}, "device": fidelity(dev),
           "load_average": os.getloadavg()[0]}
    print(f"\nwall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in walls.items()))
    if "bundle" in walls and "profile_here" in walls:
        print(f"bundle + runner {walls['bundle'] + walls['runner']:.0f} s against fbnas profile "
              f"--check {args.networks} {walls['profile_here']:.0f} s")
    print(f"device table calibration: {json.dumps(row['device'])}")
    if against is not None:
        other = load_lut(against)
        print(f"\ncomparison, device table ({args.precision}) against {against}:")
        row["against"] = {"table": str(against), "fidelity": fidelity(other),
                          **compare(other, dev, against.name, "device"),
                          **op_ratios(other, dev)}
    RESULTS.parent.mkdir(exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(f"appended to {RESULTS}")


if __name__ == "__main__":
    main()
