"""Where a retrain step's time goes: each part of a network timed alone, and batch norm with
ReLU eager against ``torch.compile``.

Each part (stem, every block, head) runs forward and backward on the input the parts before
it produce (a fixed random batch), in the memory format and precision of a bench_speed path
(default ``channels_last-bf16products-kept``; ``channels_last-kept`` is the fp32 default),
freed memory kept, medians of --repeats calls after two warm-up calls. The sum is close to
a whole step less the optimizer. Then batch norm in training mode plus ReLU, forward and
backward on one wide tensor (--bn-relu CHANNELS SIDE, batch 64), eager against compiled, in
NCHW and channels_last: the passes a fused kernel would save.

    python bench/bench_blocks.py --threads 1
    python bench/bench_blocks.py --threads 1 --networks found-1.8ms --path channels_last-kept
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from fbnas.arch import pointwise
from fbnas.latency.timing import set_threads
from fbnas.machine import cpu_model, keep_freed_memory

sys.path.insert(0, str(Path(__file__).parent))
from bench_depthwise import median_ms  # noqa: E402
from bench_speed import Step, networks  # noqa: E402


def warm_ms(fn, repeats: int) -> float:
    """:func:`median_ms` after two warm-up calls (the first ones allocate and pick kernels)."""
    fn()
    fn()
    return median_ms(fn, repeats)


def part_times(step: Step, ops: list[str] | None, repeats: int) -> list[tuple[str, tuple, float]]:
    """(name, input shape, ms forward and backward) of each part of ``step``'s network."""
    net = step.net
    names = [f"{i}:{op}" for i, op in enumerate(ops)] if ops else [
        str(i) for i in range(len(net.blocks))]
    parts = [("stem", net.stem), *zip(names, net.blocks), ("head", net.head)]
    inputs, x = [], step.x
    with torch.no_grad():
        for _, module in parts:
            inputs.append(x)
            x = module(x)
    out = []
    for (name, module), x in zip(parts, inputs):
        x = x.clone().requires_grad_(name != "stem")

        def run():
            with pointwise.bf16_products(step.bf16_products):
                y = module(x)
            (F.cross_entropy(y, step.y) if name == "head" else y.sum()).backward()

        out.append((name, tuple(x.shape), warm_ms(run, repeats)))
    return out


def bn_relu_times(channels: int, side: int, repeats: int) -> dict[str, float]:
    """ms of batch norm (training) + ReLU forward and backward, eager and compiled; every
    eager figure first, so that compiling leaves the heap as it finds it for them."""
    bn = torch.nn.BatchNorm2d(channels)

    def f(x):
        return F.relu(bn(x))

    cases = []
    for tag, fmt in (("nchw", torch.contiguous_format), ("channels_last", torch.channels_last)):
        x = torch.randn(64, channels, side, side).contiguous(memory_format=fmt).requires_grad_()
        cases.append((tag, x, torch.randn_like(x)))
    out = {}
    for kind, fn in (("eager", f), ("compiled", torch.compile(f, dynamic=False))):
        for tag, x, grad in cases:
            out[f"{tag} {kind}"] = warm_ms(lambda: torch.autograd.grad(fn(x), x, grad), repeats)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--networks", nargs="+", default=["found-1.8ms-2026-11-25"])
    ap.add_argument("--path", default="channels_last-bf16products-kept")
    ap.add_argument("--budget-rows", default="bench/results/budget.jsonl")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--bn-relu", nargs=2, type=int, default=[72, 32],
                    metavar=("CHANNELS", "SIDE"))
    args = ap.parse_args()
    set_threads(args.threads)
    keep_freed_memory()
    print(f"{cpu_model()}, {args.threads} thread(s), path {args.path}")
    for name, (defn, batch, ops) in networks(args).items():
        rows = part_times(Step(defn, batch, args.path), ops, args.repeats)
        print(f"\n{name}, batch {batch}: forward and backward of each part alone")
        for part, shape, ms in rows:
            print(f"{part:<16}{str(shape):<22}{ms:>8.1f} ms")
        print(f"{'sum':<38}{sum(ms for *_, ms in rows):>8.1f} ms")
    channels, side = args.bn_relu
    print(f"\nbatch norm + ReLU, forward and backward, 64 x {channels} x {side} x {side}")
    for what, ms in bn_relu_times(channels, side, args.repeats).items():
        print(f"{what:<24}{ms:>8.1f} ms")


if __name__ == "__main__":
    main()
