"""What the search benchmarks share: running a search, reading its argmax architecture,
drawing random architectures of a given predicted latency, retraining networks (one at a
time or several in parallel processes), and the command-line options common to
bench_quality.py and bench_budget.py.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from fbnas.config import load_config
from fbnas.runs.checkpoint import LAST, load_checkpoint
from fbnas.search.checkpoint import load_search_checkpoint
from fbnas.runs.retrain import run_retrain
from fbnas.search.run import run_search
from fbnas.search.sampling import hard_ops


def log_to(path: Path):
    def echo(msg: str) -> None:
        with open(path, "a") as f:
            f.write(msg + "\n")
    return echo


def trained_on(cfg) -> str:
    """What a bench's searches and retrains ran on: "cpu", or the GPU's name where
    ``run.device`` let them take it. Rows keep it, so that a report never sets figures
    from different devices side by side unlabelled."""
    import torch

    if cfg.run.device != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "cpu"


def search_config(args, sets: list[str]):
    epochs = [f"search.epochs={args.search_epochs}"] if args.search_epochs else []
    return load_config(args.config, [*epochs, f"run.threads={args.threads}", "run.progress=false",
                                     f"run.seed={args.search_seed}", *args.set, *sets])


def search(args, out: Path, sets: list[str]) -> tuple[list[str], dict]:
    cfg = search_config(args, sets)
    run_search(cfg, out, force=True, echo=log_to(out.parent / f"{out.name}.log"))
    return reused_search(args, out)


def per_epoch(history: list[dict], key: str) -> list[float | None]:
    """``key`` of each epoch record, rounded to 2 decimals; None (JSON null) where an epoch
    has none, as a search's unscored epochs (search.evaluate_every)."""
    return [None if r.get(key) is None else round(r[key], 2) for r in history]


def reused_search(args, out: Path) -> tuple[list[str], dict]:
    """The argmax architecture and the history of the finished search in ``out``."""
    ck = load_search_checkpoint(out)
    raw = load_checkpoint(out)
    hist = raw["history"]
    return hard_ops(ck.space, ck.probs), {
        "val_top1": per_epoch(hist, "val_top1"),
        "minutes": sum(r["seconds"] for r in hist) / 60, "space": ck.space,
        "lut": raw["config"]["lut"]}


def random_matching(lut, ops_like: float, n: int, tol: float, seed: int,
                    tries: int = 200_000) -> list[list[str]]:
    """``n`` distinct random architectures with predicted latency within ``tol`` of
    ``ops_like`` (:func:`random_between`)."""
    return random_between(lut, ops_like * (1 - tol), ops_like * (1 + tol), n, seed, tries)


def random_between(lut, lo_us: float, hi_us: float, n: int, seed: int,
                   tries: int = 200_000) -> list[list[str]]:
    """``n`` distinct random architectures with predicted latency in [``lo_us``,
    ``hi_us``]: within a budget's band, networks that spend it as the found one does. Each
    draw picks a skip share uniformly, then each layer is skip with that probability and
    otherwise a uniformly drawn non-skip candidate, so that skip-heavy and full networks
    alike can match."""
    rng = random.Random(seed)
    cands = lut.layer_candidates()
    found: dict[tuple, None] = {}
    for _ in range(tries if n > 0 else 0):  # --randoms 0: none (not every match)
        q = rng.random()
        ops = tuple("skip" if "skip" in c and rng.random() < q
                    else rng.choice([o for o in c if o != "skip"] or c) for c in cands)
        if lo_us <= lut.predict(list(ops)) <= hi_us:
            found[ops] = None
            if len(found) == n:
                break
    return [list(o) for o in found]


def retrain(args, space, ops: list[str], name: str, seed: int, out: Path) -> dict:
    return retrain_many(args, space, [(ops, name, seed)], out)[0]


def _retrain_one(args, defn: dict, name: str, seed: int, out: Path, threads: int) -> dict:
    arch_file = out / "arch" / f"{name}.json"
    arch_file.parent.mkdir(parents=True, exist_ok=True)
    arch_file.write_text(json.dumps(defn))  # a bare model definition is an architecture file
    # the seed last: --set run.seed=N varies the search, never the retrain seeds
    cfg = load_config(args.config, [f"retrain.arch={arch_file}", f"retrain.name={name}",
                                    f"retrain.epochs={args.retrain_epochs}",
                                    f"run.threads={threads}", "run.progress=false",
                                    *args.set, f"run.seed={seed}"])
    run_dir = out / "retrain" / f"{name}_seed{seed}"
    # --resume: an interrupted row continues its retrains exactly; a finished one is only tested
    resume = args.resume and (run_dir / LAST).is_file()
    result = run_retrain(cfg, run_dir, resume=resume, force=not resume,
                         echo=log_to(out / "retrain.log"))
    return {"top1": result["test"]["top1"]}


def retrain_many(args, space, todo: list[tuple[list[str], str, int]], out: Path) -> list[dict]:
    """Retrain each (ops, name, seed) of ``todo``; with --jobs J > 1, J at a time in spawned
    processes of --threads // J threads each: small networks use a second core better as a
    second process than as a second intra-op thread. Each run is seeded alone, so the
    results do not depend on J."""
    work = [(space.definition(ops, name), name, seed) for ops, name, seed in todo]
    if args.jobs <= 1 or len(work) <= 1:
        return [_retrain_one(args, d, n, s, out, args.threads) for d, n, s in work]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    threads = max(1, args.threads // args.jobs)
    with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
        futs = [pool.submit(_retrain_one, args, d, n, s, out, threads) for d, n, s in work]
        return [f.result() for f in futs]


def params_of(space, ops: list[str]) -> int:
    from fbnas.arch.model import Network

    net = Network(space.definition(ops, "x"))
    return sum(p.numel() for p in net.parameters())


def fmt_ops(ops: list[str]) -> str:
    return " ".join(ops)


def common_options(ap: argparse.ArgumentParser) -> None:
    """The options of every mode of bench_quality.py and bench_budget.py."""
    ap.add_argument("--config", default="configs/demo.yaml")
    ap.add_argument("--out", default=None)
    ap.add_argument("--search-epochs", type=int, default=None, help="default: the config's")
    ap.add_argument("--retrain-epochs", type=int, default=8)
    ap.add_argument("--randoms", type=int, default=6)
    ap.add_argument("--tol", type=float, default=0.10)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--seed", type=int, default=0, help="seed of the random architectures")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1,
                    help="quality/budget: networks retrained at once (each with threads/jobs)")
    ap.add_argument("--search-seed", type=int, default=0, help="run.seed of the search")
    ap.add_argument("--set", action="append", default=[], help="extra config key=value")
    ap.add_argument("--reuse-search", action="store_true",
                    help="quality/budget: take the architecture of the finished search in OUT/search")
    ap.add_argument("--resume", action="store_true",
                    help="quality/budget with --reuse-search, or longer: continue the retrains "
                         "an interrupted run of the same command left in OUT/retrain")


def parse(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments, with --resume refused where it has nothing to continue."""
    args = ap.parse_args()
    if args.resume and not args.reuse_search and args.mode != "longer":
        ap.error("--resume continues an interrupted row: give --reuse-search too")
    return args
