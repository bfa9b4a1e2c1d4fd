"""Fidelity of a lookup table against whole-network timings, FLOPs and the noise floor.

Times N random networks of the table's space twice with the profile's protocol, fits the
calibration on the first --fit of them and scores it on the rest (see fbnas.latency.fidelity).
Leaves the table unchanged.

    python bench/bench_fidelity.py lookup_tables/fbnet_cifar.json --networks 50 --fit 20
"""

from __future__ import annotations

import argparse
import os
import time

from fbnas.latency.fidelity import calibrate_lut
from fbnas.latency.lut import load_lut
from fbnas.latency.runtimes import DEFAULT_BLOCK_TIME


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lut")
    ap.add_argument("--networks", type=int, default=50)
    ap.add_argument("--fit", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--block-time", type=float, default=DEFAULT_BLOCK_TIME)
    args = ap.parse_args()
    lut = load_lut(args.lut)
    print(f"{args.lut}: batch {lut.batch}, {lut.threads} thread(s); load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    t0 = time.monotonic()
    report = calibrate_lut(lut, networks=args.networks, fit=args.fit, seed=args.seed,
                           rounds=args.rounds, block_time=args.block_time)
    print(report.text())
    cal, flops = report.figures["calibrated_table_test"], report.figures["flops_calibrated_test"]
    print(f"targets: tau {cal['kendall_tau']:.3f} (>= 0.85), MAPE {cal['mape_pct']:.1f}% (<= 10%), "
          f"beats FLOPs on tau: {cal['kendall_tau'] > flops['kendall_tau']}, "
          f"on MAPE: {cal['mape_pct'] < flops['mape_pct']}")
    print(f"{time.monotonic() - t0:.0f} s; load average after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
