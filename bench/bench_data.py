"""Throughput and memory of the training input pipeline.

Two modes:

``cifar`` (default): CIFAR-10 load time and in-memory BatchLoader images/s (train mode).

``stream``: image folders streamed by worker processes, at 224 px (``--size``):

1. writes ImageNet-like folders (JPEG, 500x375 or ``--jpeg W H``, 10 classes, upscaled from
   the CIFAR-10 subset with noise) of ``--images`` training images each under ``--work``, once;
2. StreamLoader train-mode throughput with 0, 1 and 2 workers (batch ``--batch``): seconds
   per batch, images/s, and the peak resident memory of the process and its workers;
3. one hard-mode step (forward, loss, backward, SGD) of the fast supernet at the same
   batch and size, for the ``tiny`` space at 224 px and for ``fbnet_imagenet100``, so the
   data's seconds per batch can be set against the step's (1 thread each);
4. peak resident memory of a hard-mode ``fbnas train`` of the tiny space at 224 px on each
   folder size, for each ``--loaders`` (``data.loader`` stream, memory, or auto, the
   default choice; 2 workers), as separate processes: the trainer's peak and its largest
   worker's, and how each grows from the smallest folder to the largest. Rows are appended
   to ``--results`` (bench/results/data.jsonl) with the CPU and date.
   Each run trains on at least ``--min-images`` images (default 8,000: 8 epochs of a
   1,000-image folder, 1 of larger ones). Why: a hard-mode step's memory depends on the path
   it samples, and a run's peak is its costliest step; an epoch of 1,000 images is 12
   weight steps, which seldom sample the costliest path, so at 1 epoch the small folder's
   peak was lower by about 110 MB for a reason that is not the data's (it reached the large
   folders' peak by 3 epochs). The same steps at every size leave the data as the only
   difference.
   Evaluation batches are the training batch's size: with the default 256, a folder whose
   held-out part is smaller than 256 images evaluates in smaller batches, and the peak
   would grow with the folder up to that size for a reason that is not the data's.

``--parts`` picks steps 2, 3 and 4 (throughput, step, memory); the folders are always made.

``report``: measures nothing; prints the memory rows of --results as a table, with the growth
of each loader's peaks from its smallest folder to its largest.

Examples:
    python bench/bench_data.py --data-dir ../shared/data/cifar10-subset
    python bench/bench_data.py --mode stream --data-dir ../shared/data/cifar10-subset \\
        --work /tmp/fbnas_stream --images 1000 8000
    python bench/bench_data.py --mode stream --data-dir ../shared/data/cifar10-subset \
        --parts memory --loaders stream auto --jpeg 64 48 --images 1000 8000 64000
    python bench/bench_data.py --mode report
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from fbnas.data.batches import BatchLoader
from fbnas.data.cifar import load_cifar10
from fbnas.data.memory import load_dataset
from fbnas.data.splits import make_splits

TINY_224 = """name: tiny224
description: The tiny space at 224 px (bench_data.py).
input: {channels: 3, resolution: 224}
stem: {channels: 8, kernel: 3, stride: 2}
stages:
  - {channels: 8, blocks: 1, stride: 1}
  - {channels: 16, blocks: 2, stride: 2}
  - {channels: 24, blocks: 1, stride: 2}
candidates: [k3_e1, k3_e1_g2, k3_e3, k5_e1, skip]
head: {channels: 64, classes: 10}
"""


def cifar_mode(args) -> None:
    """Time dataset loading once and a few training epochs of the weight split."""
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    ds = load_dataset(args.data_dir)
    load_s = time.perf_counter() - t0
    splits = make_splits(len(ds.train_labels), seed=0)
    loader = BatchLoader(ds.train_images, ds.train_labels, splits["weights"], args.batch,
                         train=True, seed=0, drop_last=True, mean=ds.mean, std=ds.std)
    rates = []
    for epoch in range(args.epochs + 1):
        loader.set_epoch(epoch)
        t0 = time.perf_counter()
        n = sum(len(y) for _, y in loader)
        if epoch:  # the first epoch warms caches and allocator
            rates.append(n / (time.perf_counter() - t0))
    print(f"loaded {len(ds.train_labels)} train + {len(ds.test_labels)} test images "
          f"in {load_s:.3f} s")
    print(f"BatchLoader train, batch {args.batch}, {args.threads} thread(s), "
          f"{n} images/epoch: median {statistics.median(rates):,.0f} images/s "
          f"(min {min(rates):,.0f}, max {max(rates):,.0f}; {args.epochs} epochs)")


# ----------------------------------------------------------------------------- stream mode

def make_folder(root: Path, source, n: int, side: tuple[int, int] = (500, 375)) -> Path:
    """``n`` training and n // 10 test JPEGs of ``side`` (width, height) in 10 class
    folders, once."""
    from PIL import Image

    done = root / ".complete"
    if done.exists():
        return root
    rng = np.random.default_rng(0)
    for split, count in (("train", n), ("test", max(10, n // 10))):
        for k in range(count):
            i = k % len(source.train_labels)
            c = int(source.train_labels[i])
            folder = root / split / source.classes[c]
            folder.mkdir(parents=True, exist_ok=True)
            small = Image.fromarray(source.train_images[i].permute(1, 2, 0).numpy())
            big = np.asarray(small.resize(side, Image.Resampling.BILINEAR), np.int16)
            big = np.clip(big + rng.integers(-12, 13, big.shape), 0, 255).astype(np.uint8)
            Image.fromarray(big).save(folder / f"{k:06d}.jpg", quality=90)
    done.write_text("")
    return root


class TreeMemory:
    """Peak resident memory (MB) of a process, of its largest child (a worker) and of it plus
    its children, sampled from /proc every 50 ms in a thread (the children's pages shared
    with the parent after fork are counted twice in the sum, so the sum is an upper bound)."""

    def __init__(self, pid: int):
        self.pid, self.main, self.worker, self.tree = pid, 0.0, 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _rss(pid: int) -> float:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def _children(self) -> list[int]:
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == self.pid:
                            out.append(int(d))
                except (OSError, ValueError, IndexError):
                    continue
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            main = self._rss(self.pid)
            kids = [self._rss(c) for c in self._children()]
            self.main = max(self.main, main)
            self.worker = max([self.worker, *kids])
            self.tree = max(self.tree, main + sum(kids))
            self._stop.wait(0.05)


def loader_speed(folder: Path, size: int, batch: int, workers: int, batches: int) -> dict:
    from fbnas.data.folders import scan_folder
    from fbnas.data.stream import StreamLoader

    index = scan_folder(folder)
    n = len(index.train)
    ld = StreamLoader(index.train.files, index.train.labels, torch.arange(n), batch,
                      train=True, seed=0, drop_last=True, mean=(0.45,) * 3, std=(0.25,) * 3,
                      size=size, workers=workers)
    ld.set_epoch(0)
    with TreeMemory(os.getpid()) as mem:
        it = iter(ld)
        next(it)  # workers start and fill their queues: not counted
        t0 = time.perf_counter()
        got = 0
        for _ in range(min(batches, len(ld) - 1)):
            got += len(next(it)[1])
        dt = time.perf_counter() - t0
        del it
    return {"s_per_batch": dt * batch / got, "images_per_s": got / dt, "peak_main_mb": mem.main,
            "peak_tree_mb": mem.tree}


def step_time(space_file: str, batch: int, size: int, steps: int) -> float:
    """Median seconds of one hard-mode step of the fast supernet (1 thread)."""
    from bench_supernet import build, make_step

    from fbnas.arch.space import load_space
    from fbnas.latency.lut import LUT, profile_space

    space = load_space(space_file)
    # a rough eager table: a step's speed does not depend on the latencies
    lut = LUT(profile_space(space, rounds=2, extra_rounds=0, block_time=0.001, runtime="eager"))
    step = make_step(build(space, lut, "hard-fast"), "hard-fast", batch, size)
    step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def train_memory(folder: Path, space: Path, lut: Path, loader: str, out: Path, batch: int,
                 epochs: int = 1) -> dict:
    """Peak memory and wall time of an ``epochs``-epoch hard-mode search in a fresh
    process."""
    cmd = [sys.executable, "-m", "fbnas.cli", "train", "--space", str(space), "--lut", str(lut),
           "--data-dir", str(folder), "--out", str(out), "--force", "--epochs", str(epochs),
           "--mode", "hard", "--threads", "1", "--set", "data.kind=folder",
           "--set", f"data.loader={loader}", "--set", "data.workers=2",
           "--set", "search.warmup_epochs=0", "--set", "run.progress=false",
           "--set", f"data.batch_size={batch}", "--set", f"data.eval_batch_size={batch}"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with TreeMemory(proc.pid) as mem:
        log, _ = proc.communicate()
    if proc.returncode:
        sys.exit(f"fbnas train failed:\n{log}")
    return {"peak_main_mb": mem.main, "peak_worker_mb": mem.worker, "peak_tree_mb": mem.tree,
            "seconds": time.perf_counter() - t0,
            "data_line": next((ln for ln in log.splitlines() if "data: " in ln), "")}


def stream_mode(args) -> None:
    torch.set_num_threads(1)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    source = load_cifar10(args.data_dir)
    w, h = args.jpeg
    tag = "" if (w, h) == (500, 375) else f"_{w}x{h}"  # the first folders' names stay
    folders = {n: make_folder(work / f"folder{n}{tag}", source, n, (w, h)) for n in args.images}
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; folders "
          + ", ".join(f"{n} images" for n in folders) + f" of {w}x{h} JPEG under {work}")
    big = folders[max(folders)]
    if "throughput" in args.parts:
        throughput(args, big)
    if "step" in args.parts:
        step_times(args, work)
    if "memory" in args.parts:
        memory(args, work, folders)
    print(f"load average at end {os.getloadavg()[0]:.2f}")


def throughput(args, big: Path) -> None:
    from fbnas.data.folders import scan_folder

    t0 = time.perf_counter()
    index = scan_folder(big)
    files = len(index.train) + len(index.test)
    scan_s = time.perf_counter() - t0
    print(f"scan of {big} (every file's header checked): {files} files in {scan_s:.2f} s, "
          f"{1e6 * scan_s / files:.0f} us per file")
    print(f"\nstreaming throughput at {args.size} px, batch {args.batch}, train mode "
          f"(RandomResizedCrop + flip), {args.batches} batches after the first:")
    print(f"{'workers':>8}{'s/batch':>10}{'images/s':>10}{'peak MB (process)':>19}"
          f"{'(+ workers)':>13}")
    speeds = {}
    for w in args.workers:
        r = speeds[w] = loader_speed(big, args.size, args.batch, w, args.batches)
        print(f"{w:>8}{r['s_per_batch']:>10.3f}{r['images_per_s']:>10.0f}"
              f"{r['peak_main_mb']:>19.0f}{r['peak_tree_mb']:>13.0f}")
    args.speeds = speeds


def step_times(args, work: Path) -> None:
    space = work / "tiny224.yaml"
    space.write_text(TINY_224)
    speeds = getattr(args, "speeds", None)
    print(f"\nhard-mode step of the fast supernet, batch {args.batch}, 1 thread:")
    times = {}
    for name in (str(space), "fbnet_imagenet100"):
        times[name] = step_time(name, args.batch, args.size, args.steps)
        label = "tiny at 224" if name == str(space) else name
        print(f"  {label:<20}{times[name]:8.3f} s/batch")
    for name, s in times.items() if speeds else ():
        w = max(speeds)
        label = "tiny at 224" if name == str(space) else name
        data_s = speeds[w]["s_per_batch"]
        print(f"  data with {w} workers {data_s:.3f} s/batch against the {label} step "
              f"{s:.3f} s/batch: {'the step' if s > data_s else 'the data'} is the bottleneck")


def memory(args, work: Path, folders: dict) -> None:
    from fbnas.io import write_json
    from fbnas.latency.lut import profile_space
    from fbnas.machine import cpu_identity, cpu_model

    space = work / "tiny224.yaml"
    space.write_text(TINY_224)
    lut = work / "tiny224_lut.json"
    if not lut.exists():
        from fbnas.arch.space import load_space

        write_json(lut, profile_space(load_space(str(space)), rounds=2, extra_rounds=0,
                                      block_time=0.001, runtime="eager"))
    print(f"hard-mode search of tiny at 224 px on at least {args.min_images:,} images "
          "(fbnas train, 1 thread), peak memory:")
    rows = []
    for loader in args.loaders:
        for n, folder in folders.items():
            epochs = -(-args.min_images // n)
            r = train_memory(folder, space, lut, loader, work / f"run_{loader}_{n}", args.batch,
                             epochs)
            row = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_model(), "cpu_id": cpu_identity(),
                   "torch": torch.__version__, "what": "train memory", "loader": loader,
                   "images": n, "epochs": epochs, "jpeg": list(args.jpeg), "size": args.size,
                   "batch": args.batch, "peak_main_mb": round(r["peak_main_mb"]),
                   "peak_worker_mb": round(r["peak_worker_mb"]),
                   "seconds": round(r["seconds"]), "data_line": r["data_line"]}
            rows.append(row)
            with open(args.results, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"  {loader} {n} images, {epochs} epoch(s): trainer {row['peak_main_mb']} MB, "
                  f"largest worker {row['peak_worker_mb']} MB, {row['seconds']} s", flush=True)
    print()
    print(memory_table(rows))


def memory_table(rows: list[dict]) -> str:
    """Markdown: each loader's peaks by folder size, and their growth from the smallest
    folder to the largest (the slope the streaming loader must keep near zero)."""
    out = ["| data.loader | images | epochs | trainer peak MB | largest worker peak MB | "
           "seconds |", "|---|---:|---:|---:|---:|---:|"]
    growth = []
    for loader in dict.fromkeys(r["loader"] for r in rows):
        mine = sorted((r for r in rows if r["loader"] == loader), key=lambda r: r["images"])
        for r in mine:
            out.append(f"| {loader} | {r['images']:,} | {r.get('epochs', 1)} | "
                       f"{r['peak_main_mb']:,} | "
                       f"{r['peak_worker_mb']:,} | {r['seconds']:,} |")
        lo, hi = mine[0], mine[-1]
        if hi["images"] > lo["images"]:
            growth.append(f"{loader}: from {lo['images']:,} to {hi['images']:,} images the "
                          f"trainer's peak grows by {hi['peak_main_mb'] - lo['peak_main_mb']:+,} "
                          f"MB, the largest worker's by "
                          f"{hi['peak_worker_mb'] - lo['peak_worker_mb']:+,} MB")
    return "\n".join(out + [""] + growth)


def report(args) -> None:
    """Print the newest date's memory rows of --results (one CPU) as a table."""
    try:
        rows = [json.loads(ln) for ln in Path(args.results).read_text().splitlines() if ln]
    except OSError as e:
        raise SystemExit(f"report: cannot read {args.results}: {e.strerror}")
    rows = [r for r in rows if r.get("what") == "train memory"]
    if not rows:
        raise SystemExit(f"report: no memory rows in {args.results}; run --parts memory first")
    date = args.date or max(r["date"] for r in rows)
    rows = [r for r in rows if r["date"] == date]
    if not rows:
        raise SystemExit(f"report: no memory rows of {date} in {args.results}")
    newest = {}
    for r in rows:  # a repeated (loader, images) keeps its newest row
        newest[r["loader"], r["images"]] = r
    rows = list(newest.values())
    first = rows[0]
    print(f"measured {date} on {first['cpu']}, tiny at {first['size']} px, batch "
          f"{first['batch']}, JPEGs of {first['jpeg'][0]}x{first['jpeg'][1]}\n")
    print(memory_table(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["cifar", "stream", "report"], default="cifar")
    ap.add_argument("--data-dir", help="folder holding cifar-10-batches-py/")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="cifar mode's torch threads")
    ap.add_argument("--epochs", type=int, default=5, help="cifar: timed epochs after a warm-up")
    ap.add_argument("--work", type=Path, default=Path("/tmp/fbnas_stream"),
                    help="stream: folder for the generated images and runs")
    ap.add_argument("--images", type=int, nargs="+", default=[1000, 8000],
                    help="stream: training images of each generated folder")
    ap.add_argument("--jpeg", type=int, nargs=2, default=[500, 375], metavar=("W", "H"),
                    help="stream: width and height of the generated JPEGs (small ones are "
                         "upscaled by the loader, and are quicker to make and decode)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--batches", type=int, default=10, help="stream: timed batches")
    ap.add_argument("--steps", type=int, default=3, help="stream: timed supernet steps")
    ap.add_argument("--parts", nargs="+", default=["throughput", "step", "memory"],
                    choices=["throughput", "step", "memory"], help="stream: what to measure")
    ap.add_argument("--loaders", nargs="+", default=["stream", "memory"],
                    choices=["stream", "memory", "auto"], help="stream: the searches' data.loader")
    ap.add_argument("--min-images", type=int, default=8000,
                    help="stream memory: images each search trains on at least (whole epochs)")
    ap.add_argument("--results", default="bench/results/data.jsonl",
                    help="memory rows are appended here; report reads them")
    ap.add_argument("--date", help="report: the rows of this date (default: the newest)")
    args = ap.parse_args()
    if args.mode == "report":
        report(args)
        return
    if not args.data_dir:
        ap.error("--data-dir is required for the cifar and stream modes")
    (stream_mode if args.mode == "stream" else cifar_mode)(args)


if __name__ == "__main__":
    main()
