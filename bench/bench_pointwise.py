"""Where a training step's 1x1 convs and head pooling go: oneDNN's conv against matrix products.

For every distinct ungrouped 1x1 stride-1 conv of a network (input channels, output channels,
map size, and how many layers share them), the forward and backward of one layer at the
network's batch, channels_last, as a oneDNN conv, as fbnas/arch/pointwise.py's matrix
products, and as its bf16 products (``run.precision: bf16_products``; casts included); then
the head's global pooling and ReLU, forward and backward, pooled by ``AdaptiveAvgPool2d``
(its gradient NCHW) and by the sum and division ``Head`` trains with.
Medians of interleaved rounds, ms, summed by map size. Whether the products are used (maps of
at most ``pointwise.MAX_PIXELS`` pixels; every map for bf16) is printed beside each shape. The
bf16 column is left out where the CPU has no native bf16 units (it would time emulation).

    python bench/bench_pointwise.py --threads 1
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fbnas.arch import pointwise
from fbnas.arch.model import Network
from fbnas.arch.space import load_space
from fbnas.machine import keep_freed_memory, native_bf16
from fbnas.latency.timing import set_threads

sys.path.insert(0, str(Path(__file__).parent))
from bench_speed import FOUND_18  # noqa: E402


def pointwise_shapes(net: Network, batch: int) -> collections.Counter:
    """(c_in, c_out, height, width) -> layers, of the network's plain 1x1 stride-1 convs."""
    shapes: collections.Counter = collections.Counter()

    def note(module, inputs, out):
        x = inputs[0]
        shapes[(x.shape[1], module.out_channels, x.shape[2], x.shape[3])] += 1

    for m in net.modules():
        if isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1) and m.groups == 1 \
                and m.stride == (1, 1):
            m.register_forward_hook(note)
    with torch.no_grad():
        net(torch.randn(net.input_shape(batch)))
    return shapes


def median_ms(fns: dict, rounds: int, per_round: int = 3) -> dict[str, float]:
    """Median ms per call of each function, timed in interleaved rounds after a warm-up."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(per_round):
                fn()
            times[k].append((time.perf_counter() - t0) / per_round * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    set_threads(args.threads)
    keep_freed_memory()
    net = Network(load_space("fbnet_cifar").definition(FOUND_18, name="found-1.8ms"))
    cl = torch.channels_last
    print(f"1x1 convs of the 1.8 ms fbnet_cifar network, batch {args.batch}, "
          f"{args.threads} thread(s), forward + backward of one layer times the layers, ms")
    kinds = ["conv", "products"] + (["bf16"] if native_bf16() else [])
    print(f"{'c_in -> c_out':>14} {'map':>6} {'layers':>6} "
          + " ".join(f"{k:>9}" for k in kinds) + "  ratios to conv  used")
    sums: dict = collections.defaultdict(float)
    for (ci, co, h, w), n in sorted(pointwise_shapes(net, args.batch).items(),
                                    key=lambda kv: (-kv[0][2], kv[0][:2])):
        x = torch.randn(args.batch, ci, h, w).contiguous(memory_format=cl).requires_grad_()
        wt = torch.randn(co, ci, 1, 1, requires_grad=True)
        g = torch.randn(args.batch, co, h, w).contiguous(memory_format=cl)
        fns = {"conv": lambda: F.conv2d(x, wt).backward(g),
               "products": lambda: pointwise._Products.apply(x, wt.flatten(1), None).backward(g),
               "bf16": lambda: pointwise._Bf16Products.apply(x, wt.flatten(1),
                                                             None).backward(g)}
        ms = median_ms({k: fns[k] for k in kinds}, args.rounds)
        for k in kinds:
            sums[h * w, k] += ms[k] * n
        used = "yes" if h * w <= pointwise.MAX_PIXELS else "no"
        if "bf16" in kinds:
            used += f", bf16 {'yes' if h * w <= pointwise.BF16_MAX_PIXELS else 'no'}"
        print(f"{ci:>6} -> {co:<5} {h:>3}x{w:<2} {n:>6} "
              + " ".join(f"{ms[k] * n:>9.2f}" for k in kinds) + "  "
              + " ".join(f"{ms['conv'] / ms[k]:.2f}x" for k in kinds[1:]) + f"  {used}")
    for px in sorted({k[0] for k in sums}):
        print(f"maps of {px:>4} pixels: "
              + ", ".join(f"{k} {sums[px, k]:.1f} ms" for k in kinds))

    head = net.head.conv[0].out_channels
    side = 4
    y = torch.randn(args.batch, head, side, side).contiguous(memory_format=cl).requires_grad_()

    def pooled(pool):
        def run():
            pool(torch.relu(y)).sum().backward()
            y.grad = None
        return run

    ms = median_ms({"AdaptiveAvgPool2d": pooled(lambda t: F.adaptive_avg_pool2d(t, 1)),
                    "sum and division": pooled(lambda t: t.sum((2, 3)).div(side * side))},
                   args.rounds)
    print(f"\nhead pooling and ReLU, {head} channels of {side}x{side}, forward + backward, ms: "
          + ", ".join(f"{k} {v:.2f}" for k, v in ms.items()))


if __name__ == "__main__":
    main()
