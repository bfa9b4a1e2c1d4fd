"""The latency-aware search losses, as pure functions of cross-entropy and cost.

paper:  L = CE * alpha * (log LAT)^beta      (Wu et al. 2019; LAT in microseconds)
        beta is the exponent of the logarithm. log LAT must be positive, which it is for any
        network slower than 1 us; a cost at or below 1 would make the power NaN or flip the
        sign of the loss, so it is refused instead.
        alpha multiplies the whole loss: theta's optimizer (Adam) ignores the scale of its
        gradient, so alpha only rescales the weights' gradients (their effective learning
        rate) and does not trade accuracy for latency. beta does: the latency share of the
        gradient grows with beta.
target: L = CE * max(1, LAT / T)^gamma       (T = target latency)
        no penalty while the expected latency is within budget; above it the loss grows as
        the gamma-th power of the overshoot ratio (a MnasNet-style soft constraint written as
        a penalty to minimise; gamma = loss.target_exponent, default 2).
"""

from __future__ import annotations

import torch

from fbnas.errors import FbnasError


def paper_loss(ce: torch.Tensor, cost: torch.Tensor, alpha: float = 0.2,
               beta: float = 0.6) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (loss, cost factor alpha * log(cost)^beta)."""
    if not bool(torch.all(cost > 1.0)):
        raise FbnasError(
            f"the expected cost is {float(cost.min()):.4g}, so log(cost) is not positive and "
            "CE * alpha * log(cost)^beta is undefined; costs must be in units where every "
            "network costs more than 1 (latency in microseconds, FLOPs or parameter counts)")
    factor = alpha * torch.log(cost).pow(beta)
    return ce * factor, factor


def target_loss(ce: torch.Tensor, cost_us: torch.Tensor, target_us: float,
                exponent: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (loss, penalty factor max(1, cost / target)^exponent)."""
    if target_us <= 0:
        raise FbnasError("the target latency must be positive")
    factor = torch.clamp(cost_us / target_us, min=1.0).pow(exponent)
    return ce * factor, factor
