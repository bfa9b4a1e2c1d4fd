"""Search quality: is the found architecture better than random ones of the same latency?

quality: search once, take the argmax architecture, draw random architectures of the same
space whose predicted latency is within +-TOL of it, retrain all of them with the same
budget and seeds (the found one with every --seeds value, each random one with the first),
and print predicted latency, params and test top-1 with the found one's rank.

sweep: search once per value of the trade-off knob (loss.beta, or loss.target_ms with
loss.form=target), retrain each found architecture, and print latency and accuracy per value.

    python bench/bench_search.py quality --out runs/bench-quality
    python bench/bench_search.py sweep --knob beta --values 0.3 0.6 1.2 --out runs/bench-sweep

Both read the search settings from --config (default configs/demo.yaml) and print what they
measured; nothing is cached between runs (--out is replaced).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import time
from pathlib import Path

from fbnas.checkpoint import load_checkpoint, load_search_checkpoint
from fbnas.config import load_config
from fbnas.lut import load_lut
from fbnas.retrain import run_retrain
from fbnas.sampling import hard_ops
from fbnas.search import run_search


def log_to(path: Path):
    def echo(msg: str) -> None:
        with open(path, "a") as f:
            f.write(msg + "\n")
    return echo


def search(args, out: Path, sets: list[str]) -> tuple[list[str], dict]:
    epochs = [f"search.epochs={args.search_epochs}"] if args.search_epochs else []
    cfg = load_config(args.config, [*epochs, f"run.threads={args.threads}", "run.progress=false",
                                    *args.set, *sets])
    run_search(cfg, out, force=True, echo=log_to(out.parent / f"{out.name}.log"))
    return reused_search(args, out)


def reused_search(args, out: Path) -> tuple[list[str], dict]:
    """The argmax architecture and the history of the finished search in ``out``."""
    ck = load_search_checkpoint(out)
    raw = load_checkpoint(out)
    hist = raw["history"]
    return hard_ops(ck.space, ck.probs), {
        "val_top1": [round(r.get("val_top1", float("nan")), 2) for r in hist],
        "minutes": sum(r["seconds"] for r in hist) / 60, "space": ck.space,
        "lut": raw["config"]["lut"]}


def random_matching(lut, ops_like: float, n: int, tol: float, seed: int,
                    tries: int = 200_000) -> list[list[str]]:
    """``n`` distinct random architectures with predicted latency within ``tol`` of
    ``ops_like``. Each draw picks a skip share uniformly, then each layer is skip with that
    probability and otherwise a uniformly drawn non-skip candidate, so that skip-heavy and
    full networks alike can match."""
    rng = random.Random(seed)
    cands = lut.layer_candidates()
    found: dict[tuple, None] = {}
    for _ in range(tries):
        q = rng.random()
        ops = tuple("skip" if "skip" in c and rng.random() < q
                    else rng.choice([o for o in c if o != "skip"] or c) for c in cands)
        if abs(lut.predict(list(ops)) / ops_like - 1) <= tol:
            found[ops] = None
            if len(found) == n:
                break
    return [list(o) for o in found]


def retrain(args, space, ops: list[str], name: str, seed: int, out: Path) -> dict:
    arch_file = out / "arch" / f"{name}.json"
    arch_file.parent.mkdir(parents=True, exist_ok=True)
    defn = space.definition(ops, name)
    arch_file.write_text(json.dumps(defn))  # a bare model definition is an architecture file
    cfg = load_config(args.config, [f"retrain.arch={arch_file}", f"retrain.name={name}",
                                    f"retrain.epochs={args.retrain_epochs}",
                                    f"run.seed={seed}", f"run.threads={args.threads}",
                                    "run.progress=false", *args.set])
    run_dir = out / "retrain" / f"{name}_seed{seed}"
    result = run_retrain(cfg, run_dir, force=True, echo=log_to(out / "retrain.log"))
    return {"top1": result["test"]["top1"]}


def params_of(space, ops: list[str]) -> int:
    from fbnas.model import Network

    net = Network(space.definition(ops, "x"))
    return sum(p.numel() for p in net.parameters())


def fmt_ops(ops: list[str]) -> str:
    return " ".join(ops)


def quality(args) -> None:
    out = Path(args.out)
    if args.reuse_search and (out / "search" / "checkpoints" / "last.pt").is_file():
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
    accs = [retrain(args, info["space"], ops, "found", s, out)["top1"] for s in seeds]
    rows.append(("found", ops, accs))
    for i, r in enumerate(randoms):
        rows.append((f"random{i}", r, [retrain(args, info["space"], r, f"random{i}", seeds[0],
                                               out)["top1"]]))
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
    ap.add_argument("--config", default="configs/demo.yaml")
    ap.add_argument("--out", default=None)
    ap.add_argument("--search-epochs", type=int, default=None, help="default: the config's")
    ap.add_argument("--retrain-epochs", type=int, default=8)
    ap.add_argument("--randoms", type=int, default=6)
    ap.add_argument("--tol", type=float, default=0.10)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--seed", type=int, default=0, help="seed of the random architectures")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--knob", choices=["beta", "target_ms"], default="beta")
    ap.add_argument("--values", type=float, nargs="+", default=[0.3, 0.6, 1.2])
    ap.add_argument("--set", action="append", default=[], help="extra config key=value")
    ap.add_argument("--reuse-search", action="store_true",
                    help="quality: take the architecture of the finished search in OUT/search")
    args = ap.parse_args()
    args.out = args.out or f"runs/bench-{args.mode}"
    (quality if args.mode == "quality" else sweep)(args)


if __name__ == "__main__":
    main()
