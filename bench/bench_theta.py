"""What moves theta? Its gradient in a trained supernet, split into accuracy and latency parts.

Loads a search checkpoint (a run folder or file), runs --batches theta-split batches through
the supernet as a theta step does (hard mode: every candidate, weighted by the one-hot
sample; soft mode: the Gumbel-softmax mixture), and prints for each layer softmax(theta) and
the mean of -d loss / d theta split into its two parts:

    accuracy part: d loss / d theta with the cost held constant (the cross-entropy's pull)
    latency part:  d loss / d theta with the cross-entropy held constant (the cost's pull)

For the paper's loss CE * f(LAT) these are f(LAT) * d CE and CE * d f(LAT); for a budget,
CE + penalty(LAT), they are d CE and d penalty. The two add up to theta's gradient.

A positive entry pushes that candidate's theta up. Where the accuracy part is far below the
latency part, the layer is chosen by latency alone; the last line compares the two per kind
of layer (transition: stride 2 or a new width; residual: the others).

    python bench/bench_theta.py runs/demo --batches 8
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from fbnas.arch.space import SearchSpace
from fbnas.config import Budget, from_saved
from fbnas.data.batches import BatchLoader
from fbnas.data.memory import load_dataset
from fbnas.data.splits import make_splits
from fbnas.latency.lut import load_lut
from fbnas.runs.checkpoint import load_checkpoint, resolve_checkpoint
from fbnas.search.run import (build_supernet, penalised_cost, search_loss, temperature,
                              theta_step_mode)
from fbnas.latency.recorded import table_copy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="search run folder or checkpoint file")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--data-dir", default=None, help="default: the run's data.dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mode", choices=["run", "hard", "soft", "softmax"], default="run",
                    help="how the theta step mixes candidates; default: the run's theta steps")
    ap.add_argument("--per-sample", choices=["run", "yes", "no"], default="run",
                    help="one Gumbel draw per image (yes) or per batch (no); default: the run's")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    path, run_dir = resolve_checkpoint(args.run)
    ck = load_checkpoint(path, "search")
    cfg = from_saved(ck["config"])
    budget = Budget.of(cfg)
    s = cfg.search
    space = SearchSpace.from_dict(ck["space"])
    table = table_copy(run_dir)
    lut = load_lut(table if table.is_file() else cfg.lut, space)
    net = build_supernet(cfg, space, lut)
    net.load_state_dict(ck["model"])
    net.train()
    for p in net.weight_parameters():
        p.requires_grad_(False)
    data = load_dataset(args.data_dir or cfg.data.dir)
    splits = make_splits(data.train_images.shape[0], cfg.run.seed, cfg.data.theta_fraction,
                         cfg.data.val_fraction)
    loader = BatchLoader(data.train_images, data.train_labels, splits["theta"],
                         cfg.data.batch_size, train=True, seed=cfg.run.seed + 1, drop_last=True,
                         mean=data.mean, std=data.std)
    done = int(ck["epoch"])  # epochs finished; the last one ran at temperature(done - 1)
    tau = temperature(cfg, max(done - 1, 0))
    thetas = net.theta_parameters()
    lam = float(ck.get("multiplier", 0.0))  # the budget multiplier the run ended with
    mode = theta_step_mode(cfg) if args.mode == "run" else args.mode
    per_sample = s.per_sample if args.per_sample == "run" else args.per_sample == "yes"
    acc = [torch.zeros_like(t) for t in thetas]
    lat = [torch.zeros_like(t) for t in thetas]
    acc_sq = [torch.zeros_like(t) for t in thetas]
    n = 0
    for x, y in loader:
        if n == args.batches:
            break
        logits, cost = net(x, tau=tau, mode=mode, all_candidates=mode == "hard",
                           per_sample=per_sample)
        ce = F.cross_entropy(logits, y, reduction="none" if cost.dim() else "mean")
        charged = penalised_cost(cfg, net, cost)

        def loss(ce, cost):
            return search_loss(cfg, budget, ce, cost, lam)[0].mean()

        g_acc = torch.autograd.grad(loss(ce, charged.detach()), thetas, retain_graph=True)
        g_lat = torch.autograd.grad(loss(ce.detach(), charged), thetas)
        for i in range(len(thetas)):
            acc[i] -= g_acc[i]
            lat[i] -= g_lat[i]
            acc_sq[i] += g_acc[i] ** 2
        n += 1
    size = {"transition": ([], [], []), "residual": ([], [], [])}
    print(f"{path}: after epoch {done}, tau {tau:.3f}, {n} batches; entries are "
          "-d loss / d theta x 1e5 (accuracy part / latency part)")
    for i, layer in enumerate(net.layers):
        kind = "transition" if layer.transition else "residual"
        p = torch.softmax(layer.theta.detach(), -1)
        a, b = acc[i] / n, lat[i] / n
        size[kind][0].append(float(a.abs().mean()))
        size[kind][1].append(float(b.abs().mean()))
        # the accuracy part's batch-to-batch noise: |mean| over its standard error
        sd = (acc_sq[i] / n - a ** 2).clamp_min(0).sqrt()
        size[kind][2].append(float((a.abs() / (sd / n ** 0.5).clamp_min(1e-30)).mean()))
        print(f"layer {i:2d} {kind}")
        print("   " + "  ".join(f"{op}: p {float(p[j]):.2f} {1e5 * float(a[j]):+6.1f} / "
                                 f"{1e5 * float(b[j]):+6.1f}"
                                 for j, op in enumerate(layer.candidates)))
    for kind, (a, b, t) in size.items():
        if a:
            print(f"{kind} layers: mean |accuracy part| {1e5 * statistics.mean(a):.2f}, "
                  f"mean |latency part| {1e5 * statistics.mean(b):.2f} (x 1e-5); accuracy "
                  f"part's mean over its standard error {statistics.mean(t):.2f}")


if __name__ == "__main__":
    main()
