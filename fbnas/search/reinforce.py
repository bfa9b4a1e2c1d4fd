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


def surrogate(logp: torch.Tensor, reward: torch.Tensor, baseline: float) -> torch.Tensor:
    """The loss whose gradient is the REINFORCE estimate: -(reward - baseline) * grad log p,
    averaged over the sampled paths."""
    return -((reward.detach() - baseline) * logp).mean()


def next_baseline(baseline: float | None, reward: torch.Tensor, momentum: float) -> float:
    """The moving average after this step's rewards (their mean starts it)."""
    mean = float(reward.detach().mean())
    return mean if baseline is None else momentum * baseline + (1.0 - momentum) * mean
