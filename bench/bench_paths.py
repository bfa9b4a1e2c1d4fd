"""Does weight sharing train? Supernet weight steps on the CIFAR-10 subset, printed per window.

Trains only the weights (theta fixed) of the fbnet_cifar supernet with SGD (momentum 0.9,
weight decay 1e-4), one Gumbel path per batch, and prints the mean training CE, batch
accuracy and the last gradient norm every --every steps. Options reproduce the measurements
behind the supernet's defaults (docs/search.md, Supernet):

    python bench/bench_paths.py --plain --restrict k3_e3          # one fixed path: learns
    python bench/bench_paths.py --plain --restrict k3_e3,k5_e3    # two switching ops: do not
    python bench/bench_paths.py --lr 0.05 --pin 1,5,9,13,17,21    # zero-init, pinned transitions
    python bench/bench_paths.py --lr 0.02 --warm 30 --no-soft-transitions   # free transitions
    python bench/bench_paths.py --lr 0.02 --warm 30               # the defaults, all 9 ops
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from fbnas.arch.space import load_space
from fbnas.data.batches import BatchLoader
from fbnas.data.memory import load_dataset
from fbnas.data.splits import make_splits
from fbnas.latency.lut import load_lut
from fbnas.search.supernet import Supernet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="fbnet_cifar")
    ap.add_argument("--lut", default="lookup_tables/fbnet_cifar_ort.json")
    ap.add_argument("--data-dir", default="../shared/data/cifar10-subset")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--warm", type=int, default=0, help="linear LR warm-up steps")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plain", action="store_true",
                    help="the paper's supernet: no zero-init residuals, no soft transitions")
    ap.add_argument("--no-soft-transitions", action="store_true")
    ap.add_argument("--restrict", default="", help="comma-separated ops every layer may draw")
    ap.add_argument("--pin", default="", help="comma-separated layers pinned to k3_e3")
    ap.add_argument("--shared", action="store_true", help="search.shared_weights: true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    space = load_space(args.space)
    net = Supernet(space, load_lut(args.lut, space), impl="fast",
                   zero_init_residual=not args.plain,
                   soft_transitions=not (args.plain or args.no_soft_transitions),
                   shared_weights=args.shared)
    keep = set(args.restrict.split(",")) if args.restrict else None
    pinned = {int(v) for v in args.pin.split(",") if v}
    with torch.no_grad():  # theta is never trained here: -100 masks a candidate out
        for i, layer in enumerate(net.layers):
            for j, op in enumerate(layer.candidates):
                if (keep and op not in keep) or (i in pinned and op != "k3_e3"):
                    layer.theta[j] = -100.0
    data = load_dataset(args.data_dir)
    split = make_splits(data.train_images.shape[0], 0)["weights"]
    loader = BatchLoader(data.train_images, data.train_labels, split, 64, train=True, seed=0,
                         drop_last=True, mean=data.mean, std=data.std)
    opt = torch.optim.SGD(net.weight_parameters(), lr=args.lr, momentum=0.9,
                          weight_decay=1e-4)
    ces, accs, step, epoch, t0 = [], [], 0, 0, time.monotonic()
    while step < args.steps:
        loader.set_epoch(epoch)
        epoch += 1
        for x, y in loader:
            logits, _ = net(x, tau=5.0, mode="hard")
            ce = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            ce.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(net.weight_parameters(), float("inf")))
            for group in opt.param_groups:
                group["lr"] = args.lr * min(1.0, (step + 1) / args.warm) if args.warm else args.lr
            opt.step()
            step += 1
            ces.append(float(ce.detach()))
            accs.append(float((logits.argmax(1) == y).float().mean()))
            if step % args.every == 0:
                n = args.every
                print(f"step {step} ce {sum(ces[-n:]) / n:.3f} acc {100 * sum(accs[-n:]) / n:.1f}% "
                      f"grad norm {norm:.1f} {time.monotonic() - t0:.0f}s", flush=True)
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
