"""The CUDA paths, checked on a machine with a GPU (the test suite runs on CPUs only).

Each check prints one line (ok or FAILED, seconds, what it saw); the figures are appended as
one JSON line to --results with torch's version and the GPU's name:

  device    ``fbnas train --device cuda`` on the tiny space: the run says it trained on
            cuda:0, and ``fbnas sample --hard`` reads its checkpoint.
  budget    searches under a latency budget, with relaxed and with REINFORCE theta steps,
            to the last epoch's one-shot check, and ``fbnas sample --hard`` of each.
  retrain   ``fbnas retrain --device cuda`` of that architecture, 1 epoch, to a test top-1.
  resume    a search stopped by Ctrl-C mid-epoch and resumed ends with the same theta and
            weights as one run straight through. The Gumbel noise is drawn on the GPU, so
            this needs the GPU's generator in the checkpoint. Two straight runs are compared
            too: where they differ already (CUDA kernels that add in varying order), the
            check asks only that the resumed run differs no more; with
            ``torch.use_deterministic_algorithms`` (--deterministic, a second pass) it asks
            for equality.
  nproc     ``--nproc N`` with one process more than there are GPUs stops with the one-line
            error that names --nproc and --device cpu (each process needs a GPU of its own:
            NCCL cannot place two on one). With two GPUs or more, ``--nproc 2`` also runs
            DistributedDataParallel over NCCL to the end.

    python bench/bench_cuda.py --data-dir ../shared/data/cifar10-subset
    python bench/bench_cuda.py --device cpu     # the same checks on the CPU (no nproc check)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--set", "data.limit=600", "--set", "data.batch_size=32", "--set", "run.progress=false"]


def fbnas(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run([sys.executable, "-m", "fbnas", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)


def said(p: subprocess.CompletedProcess) -> str:
    """The last line the command printed (its error, where it failed)."""
    lines = (p.stderr.strip() or p.stdout.strip()).splitlines()
    return lines[-1][:200] if lines else f"exit {p.returncode}, no output"


def tiny_config(args, *extra: str):
    """The tiny space on a small cut of the data, on --device, as the in-process checks run
    it (SMALL is the same cut for the command-line ones)."""
    from fbnas.config import load_config

    return load_config("tiny", [f"data.dir={args.data_dir}", "data.limit=600",
                                "data.batch_size=32", "run.progress=false",
                                f"run.device={args.device}", *extra])


def check_device(args, out: Path) -> tuple[bool, str]:
    p = fbnas(["train", "--config", "tiny", "--data-dir", args.data_dir, "--out", str(out / "device"),
               "--device", args.device, "--force", *SMALL])
    if p.returncode:
        return False, said(p)
    log = (out / "device" / "train.log").read_text()
    where = f"on {args.device}" if args.device == "cpu" else "on cuda:0"
    if where not in log:
        return False, f"train.log does not say '{where}'"
    s = fbnas(["sample", str(out / "device"), "--hard", "--force"])
    epochs = [json.loads(line)["seconds"] for line in (out / "device/metrics.jsonl").open()]
    return s.returncode == 0, (said(s) if s.returncode else
                               f"trained {where}; epochs {', '.join(f'{e:.1f}' for e in epochs)} s")


def check_budget(args, out: Path) -> tuple[bool, str]:
    """Searches under a latency budget (the tiny space's median network's latency), with
    relaxed and with REINFORCE theta steps, to the last epoch's one-shot check, then
    ``fbnas sample --hard`` of each."""
    import random
    import statistics

    from fbnas.arch.space import load_space
    from fbnas.config import load_config
    from fbnas.latency.lut import load_lut
    from fbnas.search.run import run_search

    base = load_config("tiny", [])
    lut = load_lut(REPO / base.lut, load_space(base.space))
    rng = random.Random(0)
    target = round(statistics.median(
        lut.predict([rng.choice(c) for c in lut.layer_candidates()]) for _ in range(200)) / 1000, 3)
    seen = []
    for name, extra in (("relaxed", []), ("reinforce", [
            "search.theta_estimator=reinforce", "search.alternation=step",
            "search.rerank_by=top1_and_macs"])):
        cfg = tiny_config(args, "search.epochs=2", "search.warmup_epochs=0", "loss.form=target",
                          f"loss.target_ms={target}", *extra)
        result = run_search(cfg, out / f"budget-{name}", force=True, echo=lambda m: None)
        s = fbnas(["sample", str(out / f"budget-{name}"), "--hard", "--force"])
        if s.returncode:
            return False, f"{name}: {said(s)}"
        seen.append(f"{name} found {result['found_cost'] / 1000:.3f} ms")
    return True, f"budget {target:g} ms: " + ", ".join(seen)


def check_retrain(args, out: Path) -> tuple[bool, str]:
    arch = out / "device" / "arch.json"
    if not arch.is_file():
        return False, "no architecture (the device check failed)"
    p = fbnas(["retrain", str(arch), "--data-dir", args.data_dir, "--out", str(out / "retrain"),
               "--epochs", "1", "--device", args.device, "--force", *SMALL])
    return p.returncode == 0, said(p) if p.returncode else p.stdout.strip().splitlines()[-1]


def search_once(cfg, out: Path, stop_at: int | None = None) -> dict:
    """A search of ``cfg`` in ``out``; with ``stop_at`` a Ctrl-C as the ``stop_at``-th batch
    is counted, then a resume to the end. Returns the last checkpoint."""
    import fbnas.runs.trainer as trainer_mod
    from fbnas.runs.checkpoint import load_checkpoint
    from fbnas.search.run import run_search

    real = trainer_mod.Progress
    if stop_at is not None:
        class Interrupting(real):
            def update(self, k=1):
                super().update(k)
                if self.done == stop_at:
                    signal.raise_signal(signal.SIGINT)
        trainer_mod.Progress = Interrupting
    try:
        first = run_search(cfg, out, force=True, echo=lambda m: None)
    finally:
        trainer_mod.Progress = real
    if stop_at is not None:
        if not first["stopped"]:
            raise RuntimeError("the Ctrl-C did not stop the run")
        run_search(cfg, out, resume=True, echo=lambda m: None)
    return load_checkpoint(out / "checkpoints" / "last.pt")


def largest_difference(a: dict, b: dict) -> float:
    pairs = list(zip(a["theta"], b["theta"])) + [(a["model"][k], b["model"][k]) for k in a["model"]]
    return max(float((x.double() - y.double()).abs().max()) if x.numel() else 0.0
               for x, y in pairs)


def check_resume(args, out: Path) -> tuple[bool, str]:
    cfg = tiny_config(args, "search.epochs=1", "search.warmup_epochs=0")
    a = search_once(cfg, out / "straight-a")
    b = search_once(cfg, out / "straight-b")
    split = search_once(cfg, out / "split", stop_at=args.stop_at)
    noise, resumed = largest_difference(a, b), largest_difference(a, split)
    seen = f"straight runs differ by {noise:.3g}, the resumed one by {resumed:.3g}"
    return (resumed == 0.0 if noise == 0.0 else resumed <= 10 * noise), seen



def check_deterministic(args, out: Path) -> tuple[bool, str]:
    """check_resume under torch.use_deterministic_algorithms, which stays on afterwards."""
    torch.use_deterministic_algorithms(True)
    return check_resume(args, out / "deterministic")

def check_nproc(args, out: Path) -> tuple[bool, str]:
    have = torch.cuda.device_count()
    base = ["train", "--config", "tiny", "--data-dir", args.data_dir, "--device", "cuda",
            "--epochs", "1", "--force", *SMALL]
    p = fbnas([*base, "--out", str(out / "nproc-over"), "--nproc", str(have + 1)], timeout=300)
    wanted = f"use --nproc {have} or --device cpu"
    ok = p.returncode != 0 and wanted in p.stderr and "Traceback" not in p.stderr
    seen = f"--nproc {have + 1}: exit {p.returncode}, '{said(p)}'"
    if have >= 2:
        q = fbnas([*base, "--out", str(out / "nproc-2"), "--nproc", "2"], timeout=600)
        ok = ok and q.returncode == 0
        seen += f"; --nproc 2 (NCCL): exit {q.returncode}, '{said(q)}'"
    return ok, seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default="../shared/data/cifar10-subset")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--out", default="runs/bench-cuda", help="scratch run directories")
    ap.add_argument("--stop-at", type=int, default=7, help="resume: Ctrl-C at this batch")
    ap.add_argument("--deterministic", action="store_true",
                    help="also run the resume check under torch.use_deterministic_algorithms")
    ap.add_argument("--results", default="bench/results/cuda.jsonl")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here; run with --device cpu, or on a machine with a GPU")
    args.data_dir = str(Path(args.data_dir).resolve())
    if args.deterministic:  # cuBLAS reads it when CUDA starts
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    checks = [("device", check_device), ("budget", check_budget), ("retrain", check_retrain),
              ("resume", check_resume)]
    if args.device == "cuda":
        checks.append(("nproc", check_nproc))
    if args.deterministic:  # last: it stays on for the rest of the process
        checks.append(("resume, deterministic algorithms", check_deterministic))
    rows = []
    for name, check in checks:
        start = time.monotonic()
        try:
            ok, seen = check(args, out)
        except Exception as e:  # one failing check must not hide the others' results
            ok, seen = False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
        rows.append({"check": name, "ok": ok, "seconds": round(time.monotonic() - start, 1),
                     "seen": seen})
        print(f"{name:10s} {'ok' if ok else 'FAILED':6s} {rows[-1]['seconds']:6.1f} s  {seen}",
              flush=True)
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else None
    row = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "torch": torch.__version__,
           "device": args.device, "gpu": gpu, "gpus": torch.cuda.device_count(), "checks": rows}
    with open(args.results, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(f"{sum(r['ok'] for r in rows)} of {len(rows)} checks passed; torch {torch.__version__}"
          + (f", {gpu}" if gpu else ""))
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
