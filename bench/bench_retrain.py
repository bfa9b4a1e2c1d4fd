"""Retrain defaults: how far does a fixed network get on the data in N epochs?

Builds one architecture of a space with the same op in every searchable layer (default
k3_e3 in fbnet_cifar: no skip, about 1.5 M parameters), retrains it with `fbnas retrain`'s
defaults for --epochs epochs and prints val top-1 per epoch and the test top-1 at the end.

    python bench/bench_retrain.py --epochs 10 --out runs/bench-retrain
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from fbnas.arch.space import load_space
from fbnas.config import load_config
from fbnas.runs.retrain import run_retrain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/demo.yaml", help="data and run settings")
    ap.add_argument("--space", default="fbnet_cifar")
    ap.add_argument("--op", default="k3_e3", help="the op of every searchable layer")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench-retrain")
    ap.add_argument("--set", action="append", default=[], help="extra config key=value")
    args = ap.parse_args()

    space = load_space(args.space)
    ops = [args.op if args.op in layer.candidates else layer.candidates[0]
           for layer in space.layers]
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    name = f"all_{args.op}"
    arch = out / f"{name}.json"
    arch.write_text(json.dumps(space.definition(ops, name)))
    cfg = load_config(args.config, [f"space={args.space}", f"retrain.arch={arch}",
                                    f"retrain.name={name}", f"retrain.epochs={args.epochs}",
                                    f"run.seed={args.seed}", f"run.threads={args.threads}",
                                    "run.progress=false", *args.set])
    t0 = time.monotonic()
    result = run_retrain(cfg, out / "run", force=True, echo=print)
    print(f"{name}: {args.epochs} epochs in {(time.monotonic() - t0) / 60:.1f} min, "
          f"test top-1 {result['test']['top1']:.2f}%")


if __name__ == "__main__":
    main()
