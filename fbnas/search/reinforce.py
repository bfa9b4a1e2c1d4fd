"""A theta step that runs sampled paths only: REINFORCE with a moving-average baseline.

The relaxed theta step (``search.theta_estimator: relaxed``) differentiates the loss through
the candidates' mixing weights, so it runs every candidate of every layer forwards and
backwards: the cost of a soft step. TuNAS (Bender et al., CVPR 2020) moves theta with the
score-function estimator instead: draw whole networks from softmax(theta), run each one
forwards without gradients, and raise the log-probability of the networks whose reward beat
a running baseline. A step then costs ``search.theta_paths`` forward passes of one network
each, so several times as many theta steps fit in the same time, and the reward is the
sampled network's own loss, transitions included, the quantity the search is meant to rank.

The reward is minus the search loss of the sampled network (fbnas/search/loss.py): its
cross-entropy plus the budget's penalty on its latency, or the paper's CE * alpha *
(log LAT)^beta. The baseline is an exponential moving average of the rewards (momentum
``search.reinforce_momentum``); it is part of the checkpoint, so a resume continues exactly.

A moving average compares each network with earlier steps' networks on other batches, so
the advantage carries how hard this batch happens to be, which on a 64-image batch can
outweigh the difference between two networks. With ``search.theta_paths`` of at least 2 on
the same batch, ``search.reinforce_baseline: leave_one_out`` compares each network with the
mean of the others instead (Kool et al., 2019): the batch's difficulty cancels, and with two
paths the step is a pairwise comparison, the better network's log-probability raised by
exactly what the worse one's is lowered.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sample_paths(theta: list[torch.Tensor], n: int) -> torch.Tensor:
    """``n`` networks drawn from softmax(theta), layer by layer: shape (n, layers)."""
    return torch.stack([torch.multinomial(F.softmax(t.detach(), dim=-1), n, replacement=True)
                        for t in theta], dim=1)


def log_probability(theta: list[torch.Tensor], paths: torch.Tensor) -> torch.Tensor:
    """log p(path) under softmax(theta) for each row of ``paths``, differentiable in theta."""
    return sum(F.log_softmax(t, dim=-1)[paths[:, i]] for i, t in enumerate(theta))


def surrogate(logp: torch.Tensor, reward: torch.Tensor,
              baseline: float | torch.Tensor) -> torch.Tensor:
    """The loss whose gradient is the REINFORCE estimate: -(reward - baseline) * grad log p,
    averaged over the sampled paths (``baseline``: one number, or one per path)."""
    return -((reward.detach() - baseline) * logp).mean()


def leave_one_out(reward: torch.Tensor) -> torch.Tensor:
    """Each path's baseline: the mean reward of the other paths of the same step."""
    reward = reward.detach()
    n = reward.numel()
    if n < 2:
        raise ValueError("a leave-one-out baseline needs at least 2 paths")
    return (reward.sum() - reward) / (n - 1)


def next_baseline(baseline: float | None, reward: torch.Tensor, momentum: float) -> float:
    """The moving average after this step's rewards (their mean starts it)."""
    mean = float(reward.detach().mean())
    return mean if baseline is None else momentum * baseline + (1.0 - momentum) * mean
