"""Throughput of the training input pipeline: load time and BatchLoader images/s (train mode).

Example:
    python -m bench.bench_data --data-dir ../shared/data/cifar10-subset
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fbnas.runs.data import BatchLoader, load_dataset, make_splits


def main() -> None:
    """Time dataset loading once and a few training epochs of the weight split."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder holding cifar-10-batches-py/")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=5, help="timed epochs (after one warm-up)")
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
