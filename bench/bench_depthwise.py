"""The weight gradient of a depthwise conv: oneDNN's backward against
:func:`fbnas.arch.depthwise.depthwise_weight_grad` (a forward conv), at batch 64 in
channels_last, for the shapes of the bundled spaces' small maps and a few larger ones.

Prints, per shape, the forward, the two weight gradients (medians of --repeats calls) and
whether fbnas routes that shape (:func:`fbnas.arch.depthwise.forward_form_pays`: a kernel
wider than the input, or 5x5 and larger at stride 1). The routed rows should show the
forward conv ahead; the others should not favour it.

    python bench/bench_depthwise.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from fbnas.arch.depthwise import depthwise_weight_grad, forward_form_pays
from fbnas.machine import keep_freed_memory

# (channels, input side, kernel, stride)
SHAPES = [(1104, 4, 5, 1), (552, 4, 5, 1), (184, 4, 5, 1), (1536, 4, 5, 1), (1104, 2, 3, 1),
          (1104, 4, 3, 1), (672, 7, 5, 1), (672, 8, 5, 1), (768, 8, 5, 1), (384, 16, 5, 1),
          (192, 16, 5, 1), (144, 32, 5, 1), (768, 8, 5, 2), (384, 16, 5, 2), (192, 32, 5, 2),
          (144, 32, 5, 2), (384, 8, 3, 1), (72, 32, 3, 1), (96, 32, 3, 2)]


def small_input_only(kernel, stride, height: int, width: int) -> bool:
    """``depthwise.forward_form_pays`` as it was before 2026-11-29: only where the kernel is
    wider or taller than the input."""
    return height < kernel[0] or width < kernel[1]


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    print(f"batch {args.batch}, {args.threads} thread(s), torch {torch.__version__}")
    print(f"{'channels, side, kernel, stride':<32}{'forward':>9}{'oneDNN':>9}{'as fwd':>9}"
          f"{'ratio':>8}  routed")
    for c, side, k, s in SHAPES:
        cl = torch.channels_last
        x = torch.randn(args.batch, c, side, side).contiguous(memory_format=cl)
        w = torch.randn(c, 1, k, k).contiguous(memory_format=cl)
        pad = k // 2
        g = torch.randn_like(F.conv2d(x, w, None, s, pad, 1, c))
        fwd = median_ms(lambda: F.conv2d(x, w, None, s, pad, 1, c), args.repeats)
        onednn = median_ms(lambda: torch.ops.aten.convolution_backward(
            g, x, w, None, [s, s], [pad, pad], [1, 1], False, [0, 0], c,
            [False, True, False]), args.repeats)
        ours = median_ms(lambda: depthwise_weight_grad(x, g, (k, k), (s, s), (pad, pad)),
                         args.repeats)
        print(f"{f'{c}, {side}x{side}, {k}x{k}, {s}':<32}{fwd:>9.1f}{onednn:>9.1f}{ours:>9.1f}"
              f"{onednn / ours:>7.1f}x  "
              f"{'yes' if forward_form_pays((k, k), (s, s), side, side) else 'no'}")


if __name__ == "__main__":
    main()
