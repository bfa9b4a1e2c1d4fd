"""Per-step training figures, by name, and their running sums per phase.

Every micro-batch gives its loss and the figures its kind of run names (the trainer's
``figures``: the cross-entropy for every run, and whatever a subclass adds), each reduced to
one number. Under DistributedDataParallel they are averaged over the processes in one small
all-reduce that also carries a "not finite" flag, so that a NaN on one process stops every
process at the same step instead of leaving the others waiting in backward. A phase's sums
are saved in a mid-epoch checkpoint as ``{"loss": .., NAME: .., "items": n}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fbnas.runs.dist import DistInfo, all_reduce_sum

#: one micro-batch's figures (or their mean over several): "loss" first, then the named ones
StepFigures = dict[str, float]


def step_figures(loss: torch.Tensor, figures: dict[str, torch.Tensor]) -> StepFigures:
    """The figures of what ``forward_loss`` returned (per-image tensors are averaged)."""
    return {"loss": float(loss.detach()),
            **{name: float(value.detach().mean()) for name, value in figures.items()}}


def finite(step: StepFigures) -> bool:
    return all(math.isfinite(v) for v in step.values())


def across_ranks(step: StepFigures, info: DistInfo, device: torch.device) -> StepFigures | None:
    """``step`` averaged over the processes, or None if any process's figures are not finite.

    Every process runs the same trainer, so each step's figures have the same names in the
    same order on every process."""
    if not info.enabled:
        return step if finite(step) else None
    bad = not finite(step)
    total = all_reduce_sum([0.0 if bad else v for v in step.values()] + [float(bad)], info,
                           device)
    if total[-1]:
        return None
    return {name: v / info.world_size for name, v in zip(step, total[:-1])}


@dataclass
class PhaseStats:
    """Sums of one phase's step figures over an epoch so far."""

    sums: dict[str, float] = field(default_factory=dict)
    items: int = 0

    @classmethod
    def of(cls, names: tuple[str, ...]) -> PhaseStats:
        """No steps yet: the loss and each figure of ``names`` at zero."""
        return cls({name: 0.0 for name in ("loss", *names)})

    def add(self, step: StepFigures) -> None:
        for name, value in step.items():
            self.sums[name] += value
        self.items += 1

    def mean(self) -> StepFigures:
        return {name: total / self.items for name, total in self.sums.items()}

    def to_dict(self) -> dict:
        """The sums as a checkpoint keeps them."""
        return {**self.sums, "items": self.items}

    @classmethod
    def from_dict(cls, saved: dict, names: tuple[str, ...]) -> PhaseStats:
        """The sums a checkpoint kept, of the loss and the figures ``names``; raises KeyError,
        TypeError or ValueError where they are missing or not numbers."""
        items = saved["items"]
        if isinstance(items, bool) or not isinstance(items, int):
            raise TypeError("items")
        return cls({name: float(saved[name]) for name in ("loss", *names)}, items)
