"""Learning-rate schedules: the weights' warm-up and cosine, and theta's last-epoch anneal.

The weights' schedule is a multiplier of the configured learning rate per optimizer step
(what ``torch.optim.lr_scheduler.LambdaLR`` takes), so a resumed run that changes the
learning rate keeps its place in the schedule.

Theta's rate is constant unless ``optim.theta.final_lr`` is set; then it falls along a cosine
over the last epoch only. With a constant rate, near-tied candidates of a layer can swap the
argmax until the last step, so where the search stops decides between them; the anneal lets
theta settle first. The rate is a function of the position in the epoch, which the checkpoint
keeps, so a resumed search takes the same steps.
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
        return cosine_between(1.0, floor, (step - warm) / max(1, total - warm))

    return factor


def cosine_between(start: float, end: float, progress: float) -> float:
    """From ``start`` at ``progress`` 0 to ``end`` at 1 along a half cosine."""
    return end + (start - end) * 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress))))
