"""The one-shot check: which networks a search compares after its last epoch, and which one
it keeps.

After the last epoch of a search under a budget, the ``search.rerank`` most probable networks
within the budget's window are scored one-shot (val top-1 on the supernet's weights, BN
re-estimated for each; :meth:`fbnas.search.run.Search.rerank`). This module decides among
them, by ``search.rerank_by``:

- ``top1``: the best one-shot top-1, ties to the more probable.
- ``top1_and_macs``: the best sum of two ranks among the checked networks, the one-shot
  top-1's and the multiply-adds' (the table's ``macs``); ties to the better top-1, then to
  the more probable.
- ``naswot``: the best training-free score (fbnas/search/naswot.py) of a freshly initialised
  copy of each network, ties to the more probable. It needs no one-shot pass, so the check
  costs a forward pass of one batch per network instead of a pass over the held-out split.
- ``naswot_and_top1``: the best sum of the NASWOT score's rank and the one-shot top-1's;
  ties to the better NASWOT score, then to the more probable. Two signals that fail in
  different places (one untrained, one trained for minutes) might correct each other; on
  NAS-Bench-Macro they did not (docs/results.md), and ``naswot`` alone stays the better rule.
- ``naswot_and_theta``: the best sum of the NASWOT score's z-score and 0.25 times the
  z-score of the network's log-probability under softmax(theta), both over the
  checked networks. With a long list (``search.rerank`` in the hundreds; NASWOT costs one
  batch's forward pass a network) theta becomes a prior over the window instead of a short
  list: NASWOT can reach networks theta ranked 9th to 256th, and the prior keeps it off
  networks it over-rates (alone over a NAS-Bench-Macro window it crowned `22200000`, 89.37%,
  at a budget whose best network scores 91.86%). On that benchmark it found better networks
  than ``naswot`` over theta's 8 in 22 of 38 searches at nine budgets (worse in 9; median gap
  to the best network 0.27 against 0.37), so ``configs/macro.yaml`` checks this way; a
  cost-only theta, which has seen no data, is as good a prior for it or better (the searches
  beat that control in 13 of 38, tied it in 6 and lost to it in 19; docs/results.md).
- ``naswot_and_theta_then_top1``: ``naswot_and_theta``'s 8 best networks scored one-shot, and
  among them the best sum of two ranks, that score's and the one-shot top-1's; ties to the
  better score, then to the more probable. Why: the long check's 8 best hold a network at or
  near the best within the budget (on NAS-Bench-Macro a median 0.00 points from it), and
  there one-shot top-1 ranks the truth better than the check's own score (median Kendall tau
  0.33 against 0.21 over 19 searches); a rank sum lets the trained weights break the
  near-ties without letting a noisy one-shot score overrule a clear lead. It costs 8
  one-shot passes. In a one-off re-decision of those 19 searches it found the better network
  in 5, the same in 13 and a worse one in 1 (docs/results.md); not yet the bundled check.

Why MACs: a supernet trained for minutes on a few thousand images ranks networks by how
fast they learn, not by how well they end. On NAS-Bench-Macro the one-shot top-1 of a
5-epoch search ranked 50 random networks with Kendall tau 0.37 to 0.59 against their true
accuracy, and their MACs alone with 0.60; the networks a search checks all fit the same
latency window, so more MACs there means capacity that full training turns into accuracy.
Ranks, not raw values, so neither figure's scale outweighs the other, and a network with
both a poor one-shot score and many MACs cannot win on MACs alone.

Why NASWOT: it ranked 50 random networks of NAS-Bench-Macro with tau 0.77, and the
networks of each bench budget's window with 0.52 to 0.64 against 0.32 to 0.46 for MACs; it
has no short-training bias and no noise from a 500-image split. Theta still chooses which networks
are checked, so the search decides the list and the score only orders it.
"""

from __future__ import annotations

import numpy as np

from fbnas.config import RERANK_RULES as RULES
from fbnas.config import SHORTLISTED_RULES as SHORTLISTED
from fbnas.config import WEIGHTED_RULES as WEIGHTED

#: how a search's epoch line names each figure ("best NASWOT and one-shot of the 8 ...")
FIGURE_NAMES = {"top1": "one-shot", "macs": "MACs", "naswot": "NASWOT", "theta": "theta"}


def label(rule: str) -> str:
    """The rule's figures as the epoch line names them, e.g. "one-shot and MACs"."""
    return " and ".join(FIGURE_NAMES[f] for f in RULES[rule])


def needs(rule: str, figure: str) -> bool:
    """Whether rule ``rule`` looks at ``figure`` ("top1", "macs", "naswot" or "theta")."""
    return figure in RULES[rule]


def log_probabilities(space, probs, networks: list[list[str]]) -> list[float]:
    """Each network's log-probability under the per-layer probabilities ``probs`` (the
    "theta" figure of a rule)."""
    out = []
    for ops in networks:
        p = [float(probs[i][layer.candidates.index(op)]) for i, (layer, op)
             in enumerate(zip(space.layers, ops))]
        out.append(float(np.sum(np.log(np.maximum(p, 1e-300)))))
    return out


def _z(values) -> np.ndarray:
    """Standard scores (0 everywhere where all values are equal)."""
    v = np.asarray(values, dtype=float)
    sd = v.std()
    return np.zeros_like(v) if sd == 0 else (v - v.mean()) / sd


def _weighted(rule: str, figures: dict) -> np.ndarray:
    """A WEIGHTED rule's score of each network: the weighted sum of its figures' z-scores."""
    return sum(w * _z(figures[f]) for f, w in WEIGHTED[rule].items())


def shortlist(rule: str, n: int, **figures: list[float]) -> list[int]:
    """The indices of the networks ``rule`` scores one-shot among ``n`` checked: every one,
    or for a SHORTLISTED rule the best few by its first rule (best first; ties to the better
    first figure, then to the more probable), from the figures that rule uses (others,
    such as a not yet scored ``top1``, are ignored)."""
    if rule not in SHORTLISTED:
        return list(range(n))
    first, size = SHORTLISTED[rule]
    score, lead = _weighted(first, figures), figures[RULES[first][0]]
    return sorted(range(len(score)), key=lambda i: (-score[i], -lead[i], i))[:size]


def choose(rule: str, **figures: list[float]) -> int:
    """The index of the network the check keeps among networks listed most probable first,
    given the figures ``rule`` uses (each a list, one value a network; larger is better; for
    a SHORTLISTED rule, ``top1`` is needed only at the shortlist's indices)."""
    if rule not in RULES:
        raise ValueError(f"unknown one-shot check rule {rule!r}")
    if rule in SHORTLISTED:
        # the sum of two ranks among the shortlist: the first rule's score and the one-shot
        # top-1; ties to the better first score, then to the more probable
        from scipy.stats import rankdata

        keep = shortlist(rule, len(figures["top1"]), **figures)
        score = _weighted(SHORTLISTED[rule][0], figures)[keep]
        ranks = rankdata(score) + rankdata([figures["top1"][i] for i in keep])
        return keep[max(range(len(keep)), key=lambda j: (ranks[j], score[j], -keep[j]))]
    used = [figures[f] for f in RULES[rule]]
    n = range(len(used[0]))
    if rule in WEIGHTED:
        score = _weighted(rule, figures)
        return max(n, key=lambda i: (score[i], used[0][i], -i))
    if len(used) == 1:
        return max(n, key=lambda i: (used[0][i], -i))
    from scipy.stats import rankdata  # ties share the mean of their places; here, not at import

    ranks = sum(rankdata(v) for v in used)
    return max(n, key=lambda i: (ranks[i], used[0][i], -i))


def checked_networks(lut, space, probs, budget_us: float, floor: float, k: int,
                     alternatives: bool = False) -> list[list[str]]:
    """The networks the check compares, most probable first: theta's ``k`` most probable
    different networks within the budget's window (:func:`~fbnas.search.window.top_in_window`)
    and, with ``alternatives`` (``search.rerank_alternatives``), after them
    :func:`per_layer_alternatives`."""
    from fbnas.search.window import same_network, top_in_window

    listed = top_in_window(lut, space, probs, budget_us, floor, max(k, 1))
    if not alternatives or k <= 1:
        return listed
    seen = {same_network(space, ops) for ops in listed}
    for ops in per_layer_alternatives(lut, space, probs, budget_us, floor):
        key = same_network(space, ops)
        if key not in seen:
            listed.append(ops)
            seen.add(key)
    return listed


def per_layer_alternatives(lut, space, probs, budget_us: float,
                           floor: float) -> list[list[str]]:
    """For each layer and each of its candidates, the most probable network within the
    budget's window that uses that candidate there (where one does), layer by layer.

    Why: theta's most probable networks differ mostly where theta is least sure, so a layer
    it committed early is the same in all of them, and a mistake there cannot be checked.
    On NAS-Bench-Macro that layer was the first: its largest block at 32x32 is the costliest
    place for it, and on young weights the latency term can push theta off it for good
    (every oracle of the bench's four budgets has it, some searches put ``k3_e3`` there and
    lost up to 1.5 points). One network per (layer, candidate), each the best theta allows
    around that one change, puts every such decision before the check once.
    """
    from fbnas.search.window import ops_in_window

    # the window as the check's list has it: where theta's best network cannot reach the
    # floor, the whole budget
    low = floor * budget_us
    if lut.predict(ops_in_window(lut, space, probs, budget_us, floor, warn=_quiet)) < low:
        low = 0.0
    found = []
    for i, layer in enumerate(space.layers):
        for j, op in enumerate(layer.candidates):
            forced = [*probs[:i], np.eye(len(layer.candidates))[j], *probs[i + 1:]]
            ops = ops_in_window(lut, space, forced, budget_us, floor, warn=_quiet)
            if ops[i] == op and low <= lut.predict(ops) <= budget_us:
                found.append(ops)
    return found


def _quiet(_message: str) -> None:
    """Warnings of the window searches above, dropped: the search's own answer reports them."""
