"""Theta moved by the latency term alone: a prior over the networks that fit a budget.

A search's theta learns from two signals, the cross-entropy of the sampled networks and the
cost term of the search loss. With the cross-entropy held constant only the cost term is
left, and theta then learns, from the table alone, which networks spend the budget: every
layer drifts toward the candidates that let the others fill it, and the sampled networks'
latency settles on the budget. Two uses:

- the cost-only control of the benches (``bench/bench_budget.py``, ``bench/bench_macro.py``):
  the same theta steps as a search took, without its accuracy signal, so that comparing the
  two isolates what training the supernet added;
- ``fbnas pick`` (fbnas/search/pick.py): the prior of a decision made without training, by
  a training-free score over the prior's most probable networks of the budget's window.

Nothing here trains a weight: with the cross-entropy constant a theta step's gradient comes
from the cost alone, so the supernet is built for its costs and its candidate weighting and
never run on an image.
"""

from __future__ import annotations

import numpy as np

from fbnas.config import Budget, Config


def latency_prior(cfg: Config, space, lut, theta_steps: int) -> list[np.ndarray]:
    """softmax(theta) of each layer after ``theta_steps`` theta steps of ``cfg``'s search with
    the cross-entropy held constant: the same supernet costs, candidate weighting (the theta
    steps' mode and temperature schedule), loss form and budget multiplier, Adam and its
    decay, spread evenly over the search's theta epochs."""
    import torch

    from fbnas.search.run import (build_supernet, next_multiplier, penalised_cost, search_loss,
                                  temperature, theta_step_mode, uses_multiplier)

    torch.manual_seed(cfg.run.seed)
    net = build_supernet(cfg, space, lut)
    ot = cfg.optim.theta
    opt = torch.optim.Adam(net.theta_parameters(), lr=ot.lr, betas=(ot.beta1, ot.beta2),
                           weight_decay=ot.weight_decay, decoupled_weight_decay=True)
    epochs = range(cfg.warmup_epochs, cfg.search.epochs)
    steps_an_epoch = theta_steps // max(1, len(epochs))
    one, mode, multiplier = torch.tensor(1.0), theta_step_mode(cfg), 0.0
    budget = Budget.of(cfg)
    for epoch in epochs:
        tau = temperature(cfg, epoch)
        for _ in range(steps_an_epoch):
            # the cost part of Supernet.forward, on weights drawn as a theta step draws them
            cost = net.weighted_cost([layer.weights(mode, tau, None)[0] for layer in net.layers])
            loss, _ = search_loss(cfg, budget, one, penalised_cost(cfg, net, cost), multiplier)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if uses_multiplier(cfg):
                multiplier = next_multiplier(cfg, budget, net, multiplier)
    return [p.double().numpy() for p in net.probabilities()]


def search_theta_steps(cfg: Config, weight_images: int, theta_images: int) -> int:
    """The theta steps a one-process search of ``cfg`` takes on splits of ``weight_images``
    and ``theta_images`` images (as :meth:`fbnas.search.run.Search.plan` runs them): a
    prior given as many steps as the search would take is the bench's cost-only control."""
    s, batch = cfg.search, cfg.data.batch_size
    theta_epochs = range(cfg.warmup_epochs, s.epochs)
    if s.alternation == "epoch":
        return (theta_images // batch) * len(theta_epochs)
    weight_steps = (weight_images // batch) // s.accumulate  # each of accumulate micro-batches
    last = s.epochs - 1
    return sum(weight_steps * (s.final_theta_steps if s.final_theta_steps and e == last
                               else s.theta_steps) for e in theta_epochs)
