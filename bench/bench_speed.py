"""Training speed against the runtime's floor: a retrain step per path, and a theta step.

Retrain steps (forward, label-smoothed CE, backward, gradient clip, SGD with momentum) of two
networks, each path in a process of its own (so that each has its own allocator settings),
timed interleaved round by round in alternating order so that load from other processes hits
every path alike; medians after a warm-up:

  found-1.8ms  a 1.8 ms network found on fbnet_cifar (FOUND_18 below), 32 px, batch 64
  found-1.8ms-2026-11-25
               the 1.8 ms network the speed targets were set on (FOUND_18_1125 below)
  found-Xms    the found network of bench/results/budget.jsonl's last row at X ms
  fbnet_c      FBNet-C (fbnet_imagenet), 224 px, batch 16

Each retrain row records the found network's ops, so that rows of two networks are told
apart.

Paths, named by their parts: the memory format (``nchw``, the default one: how retrains ran
before ``retrain.memory_format``; ``channels_last``, today's), then ``folded`` (expansion BNs
folded into their 1x1 convs where :func:`fbnas.arch.folded_bn.fold_pays` says:
``retrain.fold_bn: true``), ``bf16`` (``run.precision: bf16``, autocast) and ``bf16products``
(``run.precision: bf16_products``: 1x1 convs as bfloat16 products), both only where the CPU
has native bfloat16, or with --bf16, and ``kept`` (freed memory kept in the heap:
``run.keep_freed_memory``, :func:`fbnas.machine.keep_freed_memory`). ``nchw`` and
``channels_last`` run on glibc's default allocator, as retrains did before
``run.keep_freed_memory``; ``channels_last-kept`` is today's default, ``nchw-kept`` shows what
keeping alone gains, ``channels_last-conv-kept`` is today's default with every 1x1 conv a
oneDNN conv (``conv``: as before :mod:`fbnas.arch.pointwise`, which trains those on small maps
as matrix products), ``channels_last-smalldw-kept`` and ``nchw-smalldw-kept`` take a
depthwise conv's forward-form weight gradient only where the kernel is wider than the input
(``smalldw``: as before 2026-11-29, when 5x5 kernels at stride 1 joined them), and the
options are timed on top of today's default:
``channels_last-folded-kept``, ``nchw-bf16-kept``, ``channels_last-bf16-kept``,
``channels_last-bf16products-kept``, and with
--compile ``compiled-kept`` (channels_last, fp32, torch.compile; its compile time is printed
apart). The floor is the same network's forward time in ONNX Runtime at the same batch and
threads, times 3: a training step's forward, backward and update cost about three forwards.

Theta steps of the fast fbnet_cifar supernet in hard mode, weights frozen as a theta step
freezes them, freed memory kept as a search keeps it: ``relaxed`` (every candidate of every
layer runs, weighted by the straight-through sample: today's default), and ``reinforce``
with 1 and 2 sampled paths (one network each, no gradient through the weights).

Rows are appended to --results (bench/results/speed.jsonl) with the CPU model and threads.
``report`` measures nothing: it prints, from --results, the newest run of each network's
retrain step and of the theta step as markdown tables (--date, --cpu and --network keep one
day's, one CPU model's or one network's runs).

    python bench/bench_speed.py --threads 1
    python bench/bench_speed.py --threads 1 --networks found-1.8ms --compile
    python bench/bench_speed.py report --date 2026-12-04
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from fbnas.arch import depthwise, pointwise
from fbnas.arch.definition import select
from fbnas.arch.depthwise import route_depthwise
from fbnas.arch.model import Network
from fbnas.arch.pointwise import route_small_map_pointwise
from fbnas.arch.space import load_space
from fbnas.latency.lut import load_lut
from fbnas.latency.measure import measure_latency
from fbnas.latency.timing import set_threads
from fbnas.machine import cpu_identity, cpu_model, keep_freed_memory, native_bf16

sys.path.insert(0, str(Path(__file__).parent))
from bench_depthwise import small_input_only  # noqa: E402

PATHS = ("nchw", "nchw-kept", "nchw-smalldw-kept", "channels_last", "channels_last-conv-kept",
         "channels_last-smalldw-kept", "channels_last-kept", "channels_last-folded-kept",
         "nchw-bf16-kept", "channels_last-bf16-kept", "channels_last-bf16products-kept")


#: the 1.8 ms network every row of found-1.8ms since 2026-11-28 times: the found network of
#: budget.jsonl's 2026-11-26 8-epoch search at 1.8 ms, then the file's last row at 1.8 ms.
#: Pinned because that last row moves whenever a new 1.8 ms row is appended.
FOUND_18 = ("k5_e1 k3_e3 k3_e1 k3_e3 k5_e1 k3_e6 k3_e1_g2 k3_e3 k3_e1 k3_e6 k5_e1_g2 k5_e1 "
            "k5_e1 k3_e6 k5_e1_g2 skip k5_e3 k3_e6 k3_e1_g2 skip k3_e1 k3_e3").split()


#: the 1.8 ms network the training-speed targets were set against: budget.jsonl's row of
#: 2026-11-25 at 1.8 ms (more 3x3 expansion-3 blocks than FOUND_18, one k5_e6 on 4x4 maps).
FOUND_18_1125 = ("k3_e3 skip k5_e1 k3_e3 k3_e1 k3_e3 k3_e3 k5_e1 k5_e3 k3_e3 k3_e3 k3_e3 "
                 "k3_e3 k5_e6 k5_e1_g2 k3_e3 k3_e3 k3_e6 k3_e1 k5_e1 k3_e3 skip").split()
PINNED = {"found-1.8ms": FOUND_18, "found-1.8ms-2026-11-25": FOUND_18_1125}


def networks(args) -> dict[str, tuple[dict, int, list | None]]:
    """name -> (model definition, batch, the found network's ops or None) of each network
    --networks names."""
    out = {}
    for name in args.networks:
        if name == "fbnet_c":
            out[name] = (select("fbnet_c")[1], 16, None)
            continue
        if name in PINNED:
            ops = PINNED[name]
            out[name] = (load_space("fbnet_cifar").definition(ops, name=name), 64, ops)
            continue
        target = float(name.removeprefix("found-").removesuffix("ms"))
        rows = [json.loads(line) for line in open(args.budget_rows)]
        rows = [r for r in rows if r["target_ms"] == target]
        if not rows:
            raise SystemExit(f"{args.budget_rows} has no row at {target} ms")
        ops = rows[-1]["found"]["ops"]
        out[name] = (load_space(rows[-1].get("space", "fbnet_cifar")).definition(ops, name=name),
                     64, ops)
    return out


class Step:
    """One path's training step on a fixed random batch, as fbnas.runs.retrain runs it."""

    def __init__(self, defn: dict, batch: int, path: str):
        torch.manual_seed(0)
        self.net = Network(defn)
        self.net.zero_init_residual()
        parts = path.split("-")
        self.cl = parts[0] in ("channels_last", "compiled")
        self.bf16 = "bf16" in parts
        self.bf16_products = "bf16products" in parts
        if self.cl:
            self.net.to(memory_format=torch.channels_last)
        route_depthwise(self.net)  # as fbnas.runs.retrain builds its network
        route_small_map_pointwise(self.net)
        if "conv" in parts:  # every 1x1 conv a oneDNN conv, as before fbnas/arch/pointwise.py
            pointwise.MAX_PIXELS = 0
        if "smalldw" in parts:  # this worker's process alone
            depthwise.forward_form_pays = small_input_only
        if "folded" in parts:
            self.net.fold_batch_norm()
        self.model = torch.compile(self.net) if parts[0] == "compiled" else self.net
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9,
                                   weight_decay=1e-4)
        x = torch.randn(self.net.input_shape(batch))
        self.x = x.contiguous(memory_format=torch.channels_last) if self.cl else x
        self.y = torch.randint(defn["head"]["classes"], (batch,))

    def __call__(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        with (torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16),
              pointwise.bf16_products(self.bf16_products)):
            logits = self.model(self.x)
        F.cross_entropy(logits.float(), self.y, label_smoothing=0.1).backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), 2.0)
        self.opt.step()


class Worker:
    """A path's :class:`Step` in a process of its own, run ``n`` steps at a time on request.

    Why a process each: ``run.keep_freed_memory`` sets the allocator for a whole process, so
    the paths before it and after it cannot share one and both be what they claim."""

    def __init__(self, defn: dict, batch: int, path: str, threads: int):
        ctx = multiprocessing.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(theirs, defn, batch, path, threads),
                                daemon=True)
        self.proc.start()
        theirs.close()  # so that a worker that dies ends recv() with EOFError, not a hang
        self.setup_s = self.conn.recv()  # build (and for "compiled", compile) before timing

    def __call__(self, n: int) -> float:
        self.conn.send(n)
        return self.conn.recv()

    def close(self) -> None:
        self.conn.send(0)
        self.proc.join()


def _serve(conn, defn: dict, batch: int, path: str, threads: int) -> None:
    set_threads(threads)
    if "kept" in path.split("-"):
        keep_freed_memory()
    t0 = time.perf_counter()
    step = Step(defn, batch, path)
    if path.startswith("compiled"):  # the first calls compile forward and backward
        step()
        step()
    conn.send(time.perf_counter() - t0)
    while n := conn.recv():
        conn.send(timed(step, n))


def timed(fn, n: int) -> float:
    """Seconds per call of ``fn`` over ``n`` calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def interleaved(steps: dict, rounds: int, per_round: int, warmup: int) -> dict[str, float]:
    """Median seconds per step of each ``steps[name](n)`` (which runs n steps and returns the
    seconds per step), timed in interleaved, alternating rounds."""
    for fn in steps.values():
        fn(warmup)
    times = {name: [] for name in steps}
    order = list(steps)
    for r in range(rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            times[name].append(steps[name](per_round))
    return {name: statistics.median(v) for name, v in times.items()}


def retrain_rows(args) -> list[dict]:
    rows = []
    for name, (defn, batch, ops) in networks(args).items():
        paths = [p for p in PATHS if native_bf16() or args.bf16
                 or not any(part.startswith("bf16") for part in p.split("-"))]
        paths += ["compiled-kept"] if args.compile else []
        steps = {p: Worker(defn, batch, p, args.threads) for p in paths}
        if args.compile:
            print(f"{name}: torch.compile took {steps['compiled-kept'].setup_s:.0f} s")
        try:
            sec = interleaved(steps, args.rounds, args.steps, warmup=2)
        finally:
            for w in steps.values():
                w.close()
        ort, _ = measure_latency(defn, args.threads, batch, rounds=args.ort_rounds,
                                 runtime="onnxruntime")
        floor = 3 * ort["median"] / 1e6
        base = sec["nchw"]
        print(f"\n{name}, batch {batch}, {args.threads} thread(s): training step")
        print(f"{'path':<34}{'ms/step':>10}{'images/s':>10}{'vs nchw':>9}{'vs floor':>10}")
        for p, s in [*sec.items(), ("ort forward x 3", floor)]:
            print(f"{p:<34}{s * 1e3:>10.1f}{batch / s:>10.1f}{base / s:>8.2f}x{s / floor:>9.2f}x")
            rows.append({"what": "retrain step", "network": name, "batch": batch, "path": p,
                         "ms": round(s * 1e3, 2), "images_per_s": round(batch / s, 1),
                         "vs_nchw": round(base / s, 3), "vs_floor": round(s / floor, 3),
                         **({"ops": " ".join(ops)} if ops else {})})
    return rows


def theta_rows(args) -> list[dict]:
    """Seconds per theta step of the fast supernet in hard mode, weights frozen, in this
    process with its freed memory kept, as a search keeps it (run.keep_freed_memory)."""
    keep_freed_memory()
    from fbnas.search.reinforce import log_probability, sample_paths, surrogate
    from fbnas.search.supernet import Supernet

    space = load_space("fbnet_cifar")
    net = Supernet(space, load_lut(args.lut, space), impl="fast").to(
        memory_format=torch.channels_last)
    for p in net.weight_parameters():
        p.requires_grad_(False)
    x = torch.randn(args.theta_batch, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    y = torch.randint(10, (args.theta_batch,))
    theta = net.theta_parameters()

    def relaxed():
        net.zero_grad(set_to_none=True)
        logits, cost = net(x, tau=5.0, mode="hard", all_candidates=True)
        (F.cross_entropy(logits, y) + cost / 1e6).backward()

    def reinforce(n):
        def step():
            net.zero_grad(set_to_none=True)
            paths = sample_paths(theta, n)
            with torch.no_grad():
                ces = torch.stack([F.cross_entropy(net(x, path=p)[0], y)
                                   for p in paths.tolist()])
            surrogate(log_probability(theta, paths), -ces, ces.mean()).backward()
        return step

    net.train()
    steps = {"relaxed": relaxed, "reinforce-1": reinforce(1), "reinforce-2": reinforce(2)}
    sec = interleaved({name: functools.partial(timed, fn) for name, fn in steps.items()},
                      args.rounds, args.steps, warmup=2)
    print(f"\nfbnet_cifar fast supernet, hard mode, batch {args.theta_batch}: theta step")
    rows = []
    for p, s in sec.items():
        print(f"{p:<20}{s * 1e3:>10.1f} ms {sec['relaxed'] / s:>8.2f}x cheaper")
        rows.append({"what": "theta step", "network": "fbnet_cifar supernet",
                     "batch": args.theta_batch, "path": p, "ms": round(s * 1e3, 2),
                     "vs_relaxed": round(sec["relaxed"] / s, 3)})
    return rows


def measured_runs(rows: list[dict]) -> list[list[dict]]:
    """The rows of --results grouped into runs: consecutive rows of one table (the same day,
    CPU, threads, kind of step and network) were measured together, until a path comes
    again, which starts the next run of the same table."""
    def table(r: dict) -> tuple:
        return (r["date"], r["cpu"], json.dumps(r.get("cpu_id")), r["threads"], r["what"],
                r["network"], r.get("ops"))
    runs: list[list[dict]] = []
    for r in rows:
        if runs and table(runs[-1][0]) == table(r) and all(r["path"] != o["path"]
                                                           for o in runs[-1]):
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


def report(args) -> None:
    """The newest run of each step and network in --results (as kept by --date and --cpu),
    one markdown table each, headed by where and when it was measured."""
    rows = [json.loads(line) for line in Path(args.results).read_text().splitlines()
            if line.strip()]
    rows = [r for r in rows if (args.date is None or r["date"] == args.date)
            and (args.cpu is None or args.cpu.lower() in r["cpu"].lower())
            and (args.network is None or r["network"] == args.network)]
    if not rows:
        raise SystemExit(f"report: no rows in {args.results} for --date {args.date} --cpu "
                         f"{args.cpu} --network {args.network}; leave them out to see every "
                         "run's newest")
    newest = {(run[0]["what"], run[0]["network"]): run for run in measured_runs(rows)}
    for (what, network), run in newest.items():
        r0 = run[0]
        bf16 = "native bfloat16" if r0.get("native_bf16") else "no native bfloat16"
        print(f"\n{network}, {what}, batch {r0['batch']}, {r0['threads']} thread(s); "
              f"{r0['cpu']} ({bf16}), torch {r0.get('torch', 'not recorded')}, {r0['date']}")
        if what == "theta step":
            print("| path | ms per step | cheaper than relaxed |\n|---|---|---|")
            for r in run:
                print(f"| {r['path']} | {r['ms']:.1f} | {r['vs_relaxed']:.2f}x |")
            continue
        print("| path | ms per step | images/s | vs nchw | vs the floor |\n|---|---|---|---|---|")
        for r in run:
            print(f"| {r['path']} | {r['ms']:.1f} | {r['images_per_s']:.1f} | "
                  f"{r['vs_nchw']:.2f}x | {r['vs_floor']:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", nargs="?", choices=["measure", "report"], default="measure",
                    help="measure (the default) or report: print --results' newest runs")
    ap.add_argument("--date", default=None, help="report: only the runs of this day")
    ap.add_argument("--cpu", default=None,
                    help="report: only the runs on a CPU whose model name contains this")
    ap.add_argument("--network", default=None,
                    help="report: only this network's runs (as a table names it)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--networks", nargs="+", default=["found-1.8ms", "fbnet_c"])
    ap.add_argument("--budget-rows", default="bench/results/budget.jsonl")
    ap.add_argument("--lut", default="lookup_tables/fbnet_cifar_ort.json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="steps per path per round")
    ap.add_argument("--ort-rounds", type=int, default=30)
    ap.add_argument("--theta-batch", type=int, default=64)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    ap.add_argument("--bf16", action="store_true",
                    help="time the bf16 paths even where the CPU only emulates bfloat16 (there "
                         "they run several times slower than fp32 and are left out by default)")
    ap.add_argument("--skip-theta", action="store_true")
    ap.add_argument("--results", default="bench/results/speed.jsonl")
    args = ap.parse_args()
    if args.mode == "report":
        report(args)
        return
    set_threads(args.threads)
    if not (native_bf16() or args.bf16):
        print("this CPU has no native bfloat16 (avx512_bf16, amx_bf16): bf16 paths left out "
              "(--bf16 times them anyway)")
    stamp = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "cpu": cpu_model(),
             "cpu_id": cpu_identity(), "native_bf16": native_bf16(), "threads": args.threads,
             "torch": torch.__version__}
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    parts = [retrain_rows] + ([] if args.skip_theta else [theta_rows])
    for part in parts:  # each table's rows as soon as it is measured
        rows = part(args)
        with open(results, "a") as f:
            for row in rows:
                f.write(json.dumps({**stamp, **row}) + "\n")
        print(f"appended {len(rows)} rows to {args.results}")


if __name__ == "__main__":
    main()
