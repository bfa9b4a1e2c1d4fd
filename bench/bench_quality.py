"""Search quality: is the found architecture better than random ones of the same latency?

quality: search once, take the argmax architecture, draw random architectures of the same
space whose predicted latency is within +-TOL of it, retrain all of them with the same
budget and seeds (the found one with every --seeds value, each random one with the first),
and print predicted latency, params and test top-1 with the found one's rank.

sweep: search once per value of the trade-off knob (loss.beta, or loss.target_ms with
loss.form=target), retrain each found architecture, and print latency and accuracy per value.

``--jobs J`` retrains J networks at a time, each in its own process with --threads / J
threads (quality mode).

    python bench/bench_quality.py quality --out runs/bench-quality
    python bench/bench_quality.py sweep --knob beta --values 0.3 0.6 1.2 --out runs/bench-sweep

They read the search settings from --config (default configs/demo.yaml) and print what they
measured; nothing is cached between runs (--out is replaced) unless --reuse-search. Latency
budgets have their own script, bench_budget.py.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

from fbnas.latency.lut import load_lut
from fbnas.runs.checkpoint import LAST

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import (common_options, fmt_ops, params_of, parse, random_matching,  # noqa: E402
                          retrain, retrain_many, reused_search, search)


def quality(args) -> None:
    out = Path(args.out)
    if args.reuse_search and (out / "search" / LAST).is_file():
        if not args.resume:
            shutil.rmtree(out / "retrain", ignore_errors=True)
        ops, info = reused_search(args, out / "search")
    else:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        ops, info = search(args, out / "search", [])
    lut = load_lut(info["lut"], info["space"])
    lat = lut.predict(ops)
    print(f"search: {len(info['val_top1'])} epochs in {info['minutes']:.1f} min, supernet val "
          f"top-1 per epoch {info['val_top1']}")
    print(f"found: {fmt_ops(ops)}  ({lat / 1000:.3f} ms predicted, "
          f"{sum(o == 'skip' for o in ops)}/{len(ops)} skip)")
    randoms = random_matching(lut, lat, args.randoms, args.tol, args.seed)
    if len(randoms) < args.randoms:
        print(f"only {len(randoms)} random architectures within +-{args.tol:.0%} were found")
    rows = []
    seeds = args.seeds
    t0 = time.monotonic()
    todo = [(ops, "found", s) for s in seeds]
    todo += [(r, f"random{i}", seeds[0]) for i, r in enumerate(randoms)]
    done = [r["top1"] for r in retrain_many(args, info["space"], todo, out)]
    accs = done[:len(seeds)]
    rows.append(("found", ops, accs))
    for i, (r, acc) in enumerate(zip(randoms, done[len(seeds):])):
        rows.append((f"random{i}", r, [acc]))
    print(f"retrained {sum(len(a) for _, _, a in rows)} networks for {args.retrain_epochs} "
          f"epochs each in {(time.monotonic() - t0) / 60:.1f} min")
    print(f"{'name':10} {'latency ms':>10} {'params':>9} {'skip':>5} {'test top-1 %':>22}")
    for name, o, a in rows:
        spread = f" (+-{statistics.pstdev(a):.2f}, {len(a)} seeds)" if len(a) > 1 else ""
        print(f"{name:10} {lut.predict(o) / 1000:10.3f} {params_of(info['space'], o):9,d} "
              f"{sum(x == 'skip' for x in o):5d} {statistics.mean(a):8.2f}{spread}")
    found = statistics.mean(accs)
    rand = sorted(statistics.mean(a) for _, _, a in rows[1:])
    if rand:
        beaten = sum(found > v for v in rand)
        print(f"random: median {statistics.median(rand):.2f}%, range {rand[0]:.2f}..{rand[-1]:.2f}%")
        print(f"found architecture beats {beaten} of {len(rand)} random ones "
              f"({100 * beaten / len(rand):.0f}th percentile)")


def sweep(args) -> None:
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    key = "loss.beta" if args.knob == "beta" else "loss.target_ms"
    extra = [] if args.knob == "beta" else ["loss.form=target"]
    print(f"{key:16} {'latency ms':>10} {'skip':>5} {'params':>9} {'supernet val':>12} "
          f"{'retrained test top-1 %':>22}")
    for v in args.values:
        ops, info = search(args, out / f"search_{v}", [f"{key}={v}", *extra])
        lut = load_lut(info["lut"], info["space"])
        acc = retrain(args, info["space"], ops, f"found_{v}".replace(".", "_"), args.seeds[0],
                      out)["top1"] if args.retrain_epochs else float("nan")
        print(f"{v:<16g} {lut.predict(ops) / 1000:10.3f} {sum(o == 'skip' for o in ops):5d} "
              f"{params_of(info['space'], ops):9,d} {info['val_top1'][-1]:11.2f}% {acc:21.2f}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["quality", "sweep"])
    common_options(ap)
    ap.add_argument("--knob", choices=["beta", "target_ms"], default="beta")
    ap.add_argument("--values", type=float, nargs="+", default=[0.3, 0.6, 1.2])
    args = parse(ap)
    args.out = args.out or f"runs/bench-{args.mode}"
    {"quality": quality, "sweep": sweep}[args.mode](args)


if __name__ == "__main__":
    main()
