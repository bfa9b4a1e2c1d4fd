"""Profiling speed and run-to-run agreement of `fbnas profile` on one machine.

Profiles a space twice in one process, in one runtime, and prints the wall time of each run
(for onnxruntime also the part spent exporting), the median and 90th percentile of the
per-entry relative difference (|a - b| / mean(a, b)), the same after dividing out the overall
speed ratio between the two runs, and in how many layers both runs pick the same fastest
non-skip candidate. Each run prepares its entries afresh, as a `fbnas profile` would.

    python bench/bench_profile.py --space fbnet_cifar --threads 1 --runtime onnxruntime
    python bench/bench_profile.py --space fbnet_cifar --threads 1 --runtime eager
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from scipy.stats import kendalltau

from fbnas.arch.space import load_space
from fbnas.latency.lut import LUT, fastest_non_skip, profile_space
from fbnas.latency.runtimes import DEFAULT_BLOCK_TIME, DEFAULT_RUNTIME, RUNTIMES


def compare(a: LUT, b: LUT, name_a: str, name_b: str) -> dict:
    """Print how two tables of one space agree, entry by entry and in each layer's fastest
    non-skip candidate, and return the figures: the overall speed ratio b / a (the median
    over entries) and the per-entry differences around it, which is what two timings of the
    same entries on one machine can be expected to share."""
    keys = list(a.data["entries"])
    ma = np.array([a.entry(k)["median"] for k in keys])
    mb = np.array([b.entry(k)["median"] for k in keys])
    diff = np.abs(ma - mb) / ((ma + mb) / 2)
    names_cost = list(zip(a.layer_candidates(), a.layer_costs(), b.layer_costs()))
    same = sum(fastest_non_skip(n, ca) == fastest_non_skip(n, cb) for n, ca, cb in names_cost)
    print(f"per-entry difference: median {100 * np.median(diff):.1f}%, "
          f"90th percentile {100 * np.percentile(diff, 90):.1f}%, max {100 * diff.max():.1f}%")
    level = float(np.median(mb / ma))
    rel = np.abs(np.log(mb / ma / level))
    print(f"{name_b} / {name_a} overall: {level:.3f} (the machines' speed between the two); "
          f"differences around that: median {100 * np.median(rel):.1f}%, 90th percentile "
          f"{100 * np.percentile(rel, 90):.1f}%")
    tau = float(kendalltau(ma, mb).statistic)
    print(f"Kendall tau of the entries: {tau:.3f}")
    print(f"same fastest non-skip candidate in {same} of {len(names_cost)} layers")
    for row, (names, ca, cb) in zip(a.data["layers"], names_cost):
        fa, fb = fastest_non_skip(names, ca), fastest_non_skip(names, cb)
        if fa != fb:
            print(f"  layer {row['index']}: {name_a} {names[fa]} ({ca[fa]:.1f} us vs "
                  f"{names[fb]} {ca[fb]:.1f}), {name_b} {names[fb]} ({cb[fb]:.1f} us vs "
                  f"{names[fa]} {cb[fa]:.1f})")
    return {"median_difference": float(np.median(diff)), "speed_ratio": level,
            "median_difference_around_ratio": float(np.median(rel)),
            "p90_difference_around_ratio": float(np.percentile(rel, 90)), "kendall_tau": tau,
            "same_fastest_non_skip": int(same), "layers": len(names_cost)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="fbnet_cifar")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runtime", choices=RUNTIMES, default=DEFAULT_RUNTIME)
    ap.add_argument("--rounds", type=int, default=80)
    ap.add_argument("--extra-time", type=float, default=50.0)
    ap.add_argument("--block-time", type=float, default=DEFAULT_BLOCK_TIME)
    args = ap.parse_args()

    space = load_space(args.space)
    print(f"space {space.name}, {args.runtime}, {args.threads} thread(s), load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    luts, walls = [], []
    for run in range(2):
        t0 = time.monotonic()
        data = profile_space(space, threads=args.threads, rounds=args.rounds,
                             extra_time=args.extra_time, block_time=args.block_time,
                             seed=run, runtime=args.runtime)
        walls.append(time.monotonic() - t0)
        luts.append(LUT(data))
        prot = data["protocol"]
        export = prot["runtime_settings"].get("export_seconds")
        print(f"run {run + 1}: {len(data['entries'])} entries in {walls[-1]:.1f} s wall"
              + (f" ({export:.1f} s of it exporting)" if export is not None else "")
              + f", {prot['rounds']} rounds + {prot['extra_rounds']['run']} extra rounds")
    a, b = luts
    compare(a, b, "run 1", "run 2")
    print(f"wall time per profile: {max(walls):.1f} s (slowest of the two)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
