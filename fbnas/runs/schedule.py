"""The weights' learning-rate schedule: linear warm-up, then a cosine down to a floor.

It is a multiplier of the configured learning rate per optimizer step (what
``torch.optim.lr_scheduler.LambdaLR`` takes), so a resumed run that changes the learning
rate keeps its place in the schedule.
"""

from __future__ import annotations

import math
from typing import Callable


def cosine_factor(steps_per_epoch: int, epochs: int, warmup_epochs: float, floor: float
                  ) -> Callable[[int], float]:
    """LR multiplier per optimizer step: linear warm-up, then cosine down to ``floor``."""
    total = steps_per_epoch * epochs
    warm = int(round(warmup_epochs * steps_per_epoch))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        progress = min(1.0, (step - warm) / max(1, total - warm))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
