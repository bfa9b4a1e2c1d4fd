"""What a NASWOT score costs: today's scoring against the way it ran before, per network.

A search's check by NASWOT (``search.rerank_by: naswot...`` with ``search.rerank: 256``)
and ``fbnas pick`` score hundreds of networks, each built from one seed and run once on 64
images (fbnas/search/naswot.py). For --networks random networks of --space, interleaved
network by network:

  before  NCHW, each ReLU's codes compared with zero, converted, summed and multiplied
          (four passes over the codes, and a copy where the output is not contiguous)
  now     ``score_architectures`` as it runs: channels_last, the codes the sign of the
          output, the units fired read off the diagonal of C C^T

and the build of each network alone, so that the forward's share shows. Prints the median
seconds per network of each and the largest difference between the two scores (the formats
round BN apart, which may tip a unit at zero).

    python bench/bench_naswot.py --space nasbench_macro --threads 2
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
from torch import nn

from fbnas.arch.model import Network
from fbnas.arch.space import load_space
from fbnas.latency.timing import set_threads
from fbnas.machine import cpu_model
from fbnas.machine import keep_freed_memory
from fbnas.search.naswot import IMAGES, score_architectures


def naswot_before(net: nn.Module, images: torch.Tensor) -> float:
    """The score as it was computed before (NCHW, a network left in training mode)."""
    n = images.shape[0]
    agree = torch.zeros(n, n, dtype=torch.float64)

    def record(_module, _inputs, out):
        c = (out.detach().flatten(1) > 0).to(torch.float32)
        fired = c.sum(dim=1)
        agree.add_((c.shape[1] - (fired[:, None] + fired[None, :] - 2.0 * (c @ c.t())))
                   .double())

    hooks = [m.register_forward_hook(record) for m in net.modules()
             if isinstance(m, (nn.ReLU, nn.ReLU6))]
    net.train()
    with torch.no_grad():
        net(images)
    for h in hooks:
        h.remove()
    return float(torch.linalg.slogdet(agree)[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--space", default="nasbench_macro")
    ap.add_argument("--networks", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    set_threads(args.threads)
    keep_freed_memory()  # as a search keeps it
    space = load_space(args.space)
    rng = random.Random(args.seed)
    archs = [[rng.choice(layer.candidates) for layer in space.layers]
             for _ in range(args.networks)]
    images = torch.randn(IMAGES, 3, space.resolution, space.resolution,
                         generator=torch.Generator().manual_seed(args.seed))
    score_architectures(space, archs[:1], images)  # warm-up
    times: dict[str, list[float]] = {"build": [], "before": [], "now": []}
    worst = 0.0
    for i, ops in enumerate(archs):
        t0 = time.perf_counter()
        torch.manual_seed(0)
        net = Network(space.definition(ops))
        times["build"].append(time.perf_counter() - t0)
        # alternate the order, so that drift of the machine's speed hits both alike
        order = ("before", "now") if i % 2 == 0 else ("now", "before")
        got = {}
        for way in order:
            t0 = time.perf_counter()
            if way == "before":
                torch.manual_seed(0)
                got[way] = naswot_before(Network(space.definition(ops)), images)
            else:
                got[way] = score_architectures(space, [ops], images)[0]
            times[way].append(time.perf_counter() - t0)
        worst = max(worst, abs(got["now"] - got["before"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.space}: {args.networks} random networks, {IMAGES} images, "
          f"{args.threads} thread(s), {cpu_model()}")
    print(f"seconds per network: before {med['before']:.3f}, now {med['now']:.3f} "
          f"({med['before'] / med['now']:.2f}x), of which building it {med['build']:.3f}")
    print(f"largest score difference {worst:.2e} (scores about "
          f"{abs(got['now']):.0f})")


if __name__ == "__main__":
    main()
