"""The seeded split of the training images, and the seeds every data order is drawn from.

A search trains the weights and theta on disjoint parts of the training images and holds a
third part out; the parts depend only on (number of images, seed, fractions), so every
process and every resumed run cuts the same ones. ``mix_seed`` turns (seed, epoch, ...) into
one generator seed: the loaders' shuffle order and augmentation are drawn from it, which is
why a resumed run sees the batches of an uninterrupted one.
"""

from __future__ import annotations

import numpy as np
import torch

from fbnas.errors import FbnasError, UsageError


def make_splits(n: int, seed: int, theta_fraction: float = 0.2,
                val_fraction: float = 0.1) -> dict[str, torch.Tensor]:
    """Split indices 0..n-1 into disjoint, covering "weights", "theta" and "val" parts.

    One seeded permutation of the n training images is cut in order: the first
    ``round(n * val_fraction)`` go to "val" (held out: neither optimizer trains on them), then
    ``round(rest * theta_fraction)`` of the remaining ones go to "theta", and everything else
    to "weights". With the defaults and n = 50,000: 5,000 val, 9,000 theta, 36,000 weights.
    Each part is returned sorted (int64); the same (n, seed, fractions) always give the same
    parts. ``val_fraction=0`` gives an empty "val".
    """
    if not 0.0 < theta_fraction < 1.0:
        raise UsageError(f"theta fraction must be strictly between 0 and 1, not {theta_fraction}")
    if not 0.0 <= val_fraction < 1.0:
        raise UsageError(f"val fraction must be in [0, 1), not {val_fraction}")
    g = torch.Generator().manual_seed(mix_seed(seed, 0x5B1175))
    perm = torch.randperm(n, generator=g)
    n_val = int(round(n * val_fraction))
    n_theta = int(round((n - n_val) * theta_fraction))
    n_weights = n - n_val - n_theta
    if n_weights < 1 or n_theta < 1 or (val_fraction > 0 and n_val < 1):
        raise FbnasError(f"{n} training images are too few to split into weights/theta/val "
                         f"with theta fraction {theta_fraction} and val fraction {val_fraction}")
    parts = {
        "weights": perm[n_val + n_theta:],
        "theta": perm[n_val:n_val + n_theta],
        "val": perm[:n_val],
    }
    return {k: v.sort().values for k, v in parts.items()}


def mix_seed(*parts: int) -> int:
    """One well-mixed 64-bit generator seed from several integers (seed, epoch, stream...)."""
    words = [int(p) & 0xFFFF_FFFF_FFFF_FFFF for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, dtype=np.uint64)[0])
