"""The one-shot check's choice: which of theta's most probable networks a search keeps.

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

#: the values of ``search.rerank_by``: the figures whose ranks each rule sums (the first
#: breaks ties)
RULES = {"top1": ("top1",), "top1_and_macs": ("top1", "macs"), "naswot": ("naswot",)}


def needs(rule: str, figure: str) -> bool:
    """Whether rule ``rule`` looks at ``figure`` ("top1", "macs" or "naswot")."""
    return figure in RULES[rule]


def choose(rule: str, **figures: list[float]) -> int:
    """The index of the network the check keeps among networks listed most probable first,
    given the figures ``rule`` uses (each a list, one value a network; larger is better)."""
    if rule not in RULES:
        raise ValueError(f"unknown one-shot check rule {rule!r}")
    used = [figures[f] for f in RULES[rule]]
    n = range(len(used[0]))
    if len(used) == 1:
        return max(n, key=lambda i: (used[0][i], -i))
    from scipy.stats import rankdata  # ties share the mean of their places; here, not at import

    ranks = sum(rankdata(v) for v in used)
    return max(n, key=lambda i: (ranks[i], used[0][i], -i))
