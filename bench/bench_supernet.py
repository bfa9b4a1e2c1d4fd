"""Speed of one supernet training step: the per-candidate loop against the fast supernet.

Times a full step (forward, paper loss, backward, SGD step) on one fixed random batch for
each variant, all in one process and interleaved round by round (alternating the order) so
that load from other processes hits every variant alike; reports medians after warm-up,
images/s and the ratios. Variants:

  loop       search.supernet: loop, soft mode, default (NCHW) memory format: the reference
  fast       search.supernet: fast, soft mode
  loop-cl    the loop converted to channels_last: how much of the gain is the memory format
  hard       the loop in hard mode (one sampled op per layer)
  hard-fast  the fast supernet in hard mode (it runs the loop in channels_last)
  hard-tp2   hard-fast with search.transition_paths 2: two drawn candidates mixed in each
             transition layer instead of all
  hard-one   hard-fast with search.soft_transitions false: one candidate everywhere, the
             floor a hard step could reach
  hard-onednn  hard-fast with every depthwise conv's weight gradient left to oneDNN, as
             before fbnas/arch/depthwise.py (slow where the kernel is wider than the input)
  hard-small  hard-fast with the forward-form depthwise weight gradient only where the kernel
             is wider than the input, as before 2026-11-29 (5x5 at stride 1 on larger maps
             kept oneDNN's)
  hard-sliced  hard-fast with strided 1x1 inputs sliced, as before 2026-11-28: slicing's
             NCHW gradient made the layer input's gradient NCHW (mixed-format ops after it)
  hard-conv  hard-fast with every 1x1 conv a oneDNN conv, as before fbnas/arch/pointwise.py
             (which trains those on maps of 8x8 and less as matrix products)
  hard-shared  hard-fast with shared weights (search.shared_weights: configs/macro.yaml's)
  hard-shared-plain  hard-shared with the shared-weight blocks' convs unrouted, as before
             2026-12-03 (oneDNN's depthwise weight gradients and 1x1 convs everywhere there)

Hard steps draw their paths from a generator seeded by the step's number, so the k-th step
of every hard variant trains the same path. The process keeps freed memory in its heap, as
runs do (``run.keep_freed_memory``).

Peak memory is the peak resident set size of a fresh child process that builds the supernet
and runs two steps of one variant at 1 thread (VmHWM from /proc/self/status on Linux; else
ru_maxrss, which after fork + exec may also count the parent's pages). It includes the
interpreter, torch and the supernet's weights (the ``baseline`` row: a child that only
builds it), so compare differences.

Example:
    python -m bench.bench_supernet --threads 1 2 --steps 3
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from fbnas.arch import depthwise, folded_bn, pointwise
from fbnas.arch.depthwise import RoutedDepthwiseConv
from fbnas.arch.space import load_space
from fbnas.latency.lut import LUT, load_lut, profile_space
from fbnas.machine import keep_freed_memory
from fbnas.search import fused
from fbnas.search.entangled import EntangledBlock
from fbnas.search.loss import paper_loss
from fbnas.search.supernet import Supernet

from bench.bench_depthwise import small_input_only

VARIANTS = ("loop", "fast", "loop-cl", "hard", "hard-fast", "hard-tp2", "hard-one",
            "hard-onednn", "hard-small", "hard-sliced", "hard-conv", "hard-shared",
            "hard-shared-plain")
LABELS = {"loop": "soft, loop (NCHW)", "fast": "soft, fast", "loop-cl": "soft, loop (CL)",
          "hard": "hard, loop (NCHW)", "hard-fast": "hard, fast",
          "hard-tp2": "hard, 2 at transitions", "hard-one": "hard, 1 at transitions",
          "hard-onednn": "hard, oneDNN dw grads", "hard-small": "hard, fwd-form dw if small",
          "hard-sliced": "hard, sliced inputs",
          "hard-conv": "hard, 1x1 as convs", "hard-shared": "hard, shared weights",
          "hard-shared-plain": "hard, shared, unrouted"}
# the Supernet arguments of each variant (loop-cl is converted after building)
OPTIONS = {"loop": {"impl": "loop"}, "fast": {"impl": "fast"}, "loop-cl": {"impl": "loop"},
           "hard": {"impl": "loop"}, "hard-fast": {"impl": "fast"},
           "hard-tp2": {"impl": "fast", "transition_paths": 2},
           "hard-one": {"impl": "fast", "soft_transitions": False},
           "hard-onednn": {"impl": "fast"}, "hard-small": {"impl": "fast"},
           "hard-sliced": {"impl": "fast"}, "hard-conv": {"impl": "fast"},
           "hard-shared": {"impl": "fast", "shared_weights": True},
           "hard-shared-plain": {"impl": "fast", "shared_weights": True}}


def build(space, lut: LUT, variant: str) -> Supernet:
    """A supernet with seed-0 weights for ``variant``."""
    torch.manual_seed(0)
    net = Supernet(space, lut, "latency", **OPTIONS[variant])
    if variant == "loop-cl":
        net = net.to(memory_format=torch.channels_last)
    if variant == "hard-onednn":
        for m in net.modules():
            if type(m) is RoutedDepthwiseConv:
                m.__class__ = nn.Conv2d
    if variant == "hard-shared-plain":
        for m in net.modules():
            if isinstance(m, EntangledBlock):
                m.routed = False
    return net


def make_step(net: Supernet, variant: str, batch: int, resolution: int):
    """A closure running one training step of ``net`` on a fixed random batch."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, resolution, resolution, generator=g)
    if variant == "loop-cl":
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, net.head.fc.out_features, (batch,), generator=g)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    mode = "hard" if variant.startswith("hard") else "soft"
    net.train()
    numbers = itertools.count()
    taken = sliced if variant == "hard-sliced" else folded_bn.pointwise_input
    max_pixels = 0 if variant == "hard-conv" else pointwise.MAX_PIXELS
    pays = small_input_only if variant == "hard-small" else depthwise.forward_form_pays

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(next(numbers))  # the same path at the same step of each variant
        kept, kept_pixels = folded_bn.pointwise_input, pointwise.MAX_PIXELS
        kept_pays = depthwise.forward_form_pays
        folded_bn.pointwise_input = fused.pointwise_input = taken
        pointwise.MAX_PIXELS, depthwise.forward_form_pays = max_pixels, pays
        try:
            logits, cost = net(x, tau=5.0, mode=mode)
            loss, _ = paper_loss(F.cross_entropy(logits, y), cost)
            loss.backward()
        finally:
            folded_bn.pointwise_input = fused.pointwise_input = kept
            pointwise.MAX_PIXELS, depthwise.forward_form_pays = kept_pixels, kept_pays
        opt.step()

    return step


def sliced(x: torch.Tensor, stride: tuple[int, int]) -> torch.Tensor:
    """Strided 1x1 inputs as ``folded_bn.pointwise_input`` took them before its gradient kept
    the input's memory format."""
    return x if tuple(stride) == (1, 1) else x[:, :, ::stride[0], ::stride[1]]


def quick_lut(space_name: str, path: str | None) -> LUT:
    """The given table, or a rough one profiled in a few seconds (step speed ignores it)."""
    space = load_space(space_name)
    if path:
        return load_lut(path, space)
    return LUT(profile_space(space, rounds=2, extra_rounds=2, block_time=0.001))


def time_steps(steps: dict, rounds: int, warmup: int) -> dict[str, list[float]]:
    """Interleaved timings: each round runs every variant once, in alternating order."""
    names = list(steps)
    times = {n: [] for n in names}
    for r in range(warmup + rounds):
        order = names if r % 2 == 0 else names[::-1]
        for n in order:
            t0 = time.perf_counter()
            steps[n]()
            dt = time.perf_counter() - t0
            if r >= warmup:
                times[n].append(dt)
    return times


def peak_rss_mb(args, variant: str) -> float:
    """Peak RSS (MB) of a child process that runs ``variant`` (or only builds, ``baseline``)."""
    cmd = [sys.executable, "-m", "bench.bench_supernet", "--space", args.space,
           "--batch", str(args.batch), "--threads", "1", "--memory-of", variant]
    if args.lut:
        cmd += ["--lut", args.lut]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def memory_child(args) -> None:
    """Child mode: build, run warm-up + one step of the variant, print peak RSS in MB."""
    torch.set_num_threads(1)
    lut = quick_lut(args.space, args.lut)
    space = load_space(args.space)
    variant = args.memory_of
    net = build(space, lut, "loop" if variant == "baseline" else variant)
    if variant != "baseline":
        step = make_step(net, variant, args.batch, space.resolution)
        step()
        step()
    print(peak_rss_self_mb())


def peak_rss_self_mb() -> float:
    """Peak resident set size of this process in MB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    """Time loop vs fast (and hard) steps at each thread count and print a table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="fbnet_cifar")
    ap.add_argument("--lut", help="lookup table of the space (default: profile a rough one)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=3, help="timed steps per variant")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory children")
    ap.add_argument("--memory-of", choices=VARIANTS + ("baseline",), help=argparse.SUPPRESS)
    args = ap.parse_args()
    keep_freed_memory()
    if args.memory_of:
        memory_child(args)
        return

    space = load_space(args.space)
    lut = quick_lut(args.space, args.lut)
    load_start = os.getloadavg()
    print(f"space {args.space}, batch {args.batch}, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, load average at start {load_start[0]:.2f} "
          f"{load_start[1]:.2f} {load_start[2]:.2f}")
    variants = [v for v in VARIANTS if v in args.variants]
    for threads in args.threads:
        torch.set_num_threads(threads)
        steps = {v: make_step(build(space, lut, v), v, args.batch, space.resolution)
                 for v in variants}
        times = time_steps(steps, args.steps, args.warmup)
        med = {v: statistics.median(t) for v, t in times.items()}
        load = os.getloadavg()[0]
        print(f"\n{threads} thread(s), {args.steps} timed steps each after {args.warmup} "
              f"warm-up round(s), 1-min load average now {load:.2f}")
        print(f"{'variant':<22}{'median s/step':>14}{'min':>8}{'max':>8}{'images/s':>10}")
        for v in variants:
            t = times[v]
            print(f"{LABELS[v]:<22}{med[v]:>14.3f}{min(t):>8.3f}{max(t):>8.3f}"
                  f"{args.batch / med[v]:>10.1f}")
        for a, b, what in (("loop", "fast", "speed-up of fast over loop"),
                           ("loop", "loop-cl", "speed-up of channels_last alone"),
                           ("loop", "hard", "soft/hard step time (loop)"),
                           ("fast", "hard-fast", "soft/hard step time (fast)"),
                           ("hard-fast", "hard-tp2", "speed-up of 2 paths at transitions"),
                           ("hard-fast", "hard-one", "speed-up of 1 path at transitions"),
                           ("hard-onednn", "hard-fast", "speed-up of the small-input depthwise "
                            "weight gradients"),
                           ("hard-sliced", "hard-fast", "speed-up of format-keeping strided "
                            "inputs"),
                           ("hard-conv", "hard-fast", "speed-up of 1x1 convs as matrix products"),
                           ("hard-shared-plain", "hard-shared",
                            "speed-up of routing the shared-weight blocks' convs")):
            if a in med and b in med:
                print(f"{what}: {med[a] / med[b]:.2f}x")
    if not args.no_memory:
        print("\npeak RSS of a child process running 2 steps at 1 thread (MB):")
        for v in ["baseline"] + variants:
            print(f"  {LABELS.get(v, v):<22}{peak_rss_mb(args, v):>9.0f}")
    end = os.getloadavg()
    print(f"\nload average at end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")


if __name__ == "__main__":
    main()
