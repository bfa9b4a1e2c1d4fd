"""Per-step training figures, by name, and their running sums per phase.

Every micro-batch gives a loss, its cross-entropy part, the sampled cost and the cost factor
of the loss (both zero in a run without a cost term). Under DistributedDataParallel the four
are averaged over the processes in one small all-reduce that also carries a "not finite"
flag, so that a NaN on one process stops every process at the same step instead of leaving
the others waiting in backward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fbnas.runs.dist import DistInfo, all_reduce_sum


@dataclass(frozen=True)
class StepFigures:
    """One micro-batch's figures (or their mean over several)."""

    loss: float
    ce: float
    cost: float = 0.0
    factor: float = 0.0

    @classmethod
    def of(cls, loss: torch.Tensor, ce: torch.Tensor, cost: torch.Tensor | None,
           factor: torch.Tensor | None) -> StepFigures:
        """The figures of what ``forward_loss`` returned (per-image tensors are averaged)."""
        return cls(float(loss.detach()), float(ce.detach().mean()),
                   float(cost.detach().mean()) if cost is not None else 0.0,
                   float(factor.detach().mean()) if factor is not None else 0.0)

    def values(self) -> list[float]:
        return [self.loss, self.ce, self.cost, self.factor]

    def finite(self) -> bool:
        return all(math.isfinite(v) for v in self.values())


def across_ranks(step: StepFigures, info: DistInfo, device: torch.device) -> StepFigures | None:
    """``step`` averaged over the processes, or None if any process's figures are not finite."""
    if not info.enabled:
        return step if step.finite() else None
    bad = not step.finite()
    total = all_reduce_sum([0.0 if bad else v for v in step.values()] + [float(bad)], info,
                           device)
    if total[4]:
        return None
    return StepFigures(*(v / info.world_size for v in total[:4]))


@dataclass
class PhaseStats:
    """Sums of one phase's step figures over an epoch so far."""

    loss: float = 0.0
    ce: float = 0.0
    cost: float = 0.0
    factor: float = 0.0
    items: int = 0

    def add(self, step: StepFigures) -> None:
        self.loss += step.loss
        self.ce += step.ce
        self.cost += step.cost
        self.factor += step.factor
        self.items += 1

    def mean(self) -> StepFigures:
        n = self.items
        return StepFigures(self.loss / n, self.ce / n, self.cost / n, self.factor / n)
