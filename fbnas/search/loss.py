"""The latency-aware search losses, as pure functions of cross-entropy and cost.

Both losses train theta only. The weights minimise the cross-entropy alone: a cost factor
that multiplied their loss would multiply their effective learning rate with it, so a knob
meant to move the accuracy/latency trade-off (beta, a budget) would also change how fast,
or whether, the weights train (a tight budget made them diverge).

paper:  L = CE * alpha * (log LAT)^beta      (Wu et al. 2019; LAT in microseconds)
        beta is the exponent of the logarithm. log LAT must be positive, which it is for any
        network slower than 1 us; a cost at or below 1 would make the power NaN or flip the
        sign of the loss, so it is refused instead. theta's optimizer (Adam) ignores the scale
        of its gradient, so alpha changes nothing that matters; beta moves the trade-off, but
        no value of it names a latency.
target: L = CE + weight * |LAT / T - 1|      (T = the latency budget; TuNAS, Bender et al. 2020)
        the penalty grows on both sides of the budget, so the search spends it instead of
        merely staying under it: below T, latency is pushed up as hard as it is pushed down
        above T, and at T the two pushes cancel on average, leaving the accuracy signal to
        decide where the latency goes. ``weight`` is the cross-entropy (in nats) the search
        would give up to halve a 100% overshoot.
        With ``multiplier`` set (``loss.target_penalty: multiplier``) the penalty is
        lam * (LAT / T - 1) instead, a Lagrangian term: lam is not a fixed weight but follows
        the budget's error, raised after every theta step while the network theta returns is
        over the budget and lowered while it is under (:func:`multiplier_step`, dual ascent
        on LAT = T). The absolute value pushes by the full weight one way or the other at
        every step, while near the budget its sign flips; lam instead settles at the push that
        balances the cross-entropy's pull toward dearer candidates, so what the cross-entropy
        prefers at equal latency is not drowned by a push much larger than it.
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
            "network costs more than 1 (latency in microseconds, MACs or parameter counts)")
    factor = alpha * torch.log(cost).pow(beta)
    return ce * factor, factor


def target_loss(ce: torch.Tensor, cost_us: torch.Tensor, target_us: float,
                weight: float = 1.0, multiplier: float | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (loss, penalty): weight * |cost / target - 1|, or with ``multiplier``
    multiplier * (cost / target - 1). ``target_us`` is a checked budget's ``Budget.us``
    (fbnas.config.Budget)."""
    error = cost_us / target_us - 1.0
    penalty = weight * error.abs() if multiplier is None else multiplier * error
    return ce + penalty, penalty


def multiplier_step(multiplier: float, cost_us: float, target_us: float, lr: float) -> float:
    """The Lagrange multiplier after one step of dual ascent: up while ``cost_us`` (the
    network the search returns) is over the target, down while it is under."""
    return multiplier + lr * (cost_us / target_us - 1.0)
