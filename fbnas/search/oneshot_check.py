"""The one-shot check's choice: which of theta's most probable networks a search keeps.

After the last epoch of a search under a budget, the ``search.rerank`` most probable networks
within the budget's window are scored one-shot (val top-1 on the supernet's weights, BN
re-estimated for each; :meth:`fbnas.search.run.Search.rerank`). This module decides among
them, by ``search.rerank_by``:

- ``top1``: the best one-shot top-1, ties to the more probable.
- ``top1_and_macs``: the best sum of two ranks among the checked networks, the one-shot
  top-1's and the multiply-adds' (the table's ``macs``); ties to the better top-1, then to
  the more probable.

Why MACs: a supernet trained for minutes on a few thousand images ranks networks by how
fast they learn, not by how well they end. On NAS-Bench-Macro the one-shot top-1 of a
5-epoch search ranked 50 random networks with Kendall tau 0.37 to 0.59 against their true
accuracy, and their MACs alone with 0.60; the networks a search checks all fit the same
latency window, so more MACs there means capacity that full training turns into accuracy.
Ranks, not raw values, so neither figure's scale outweighs the other, and a network with
both a poor one-shot score and many MACs cannot win on MACs alone.
"""

from __future__ import annotations

#: the values of ``search.rerank_by``
RULES = ("top1", "top1_and_macs")


def choose(top1: list[float], macs: list[float], rule: str) -> int:
    """The index of the network the check keeps among networks listed most probable first,
    with their one-shot val top-1 and their MACs."""
    if rule not in RULES:
        raise ValueError(f"unknown one-shot check rule {rule!r}")
    n = range(len(top1))
    if rule == "top1":
        return max(n, key=lambda i: (top1[i], -i))
    from scipy.stats import rankdata  # ties share the mean of their places; here, not at import

    r_top1, r_macs = rankdata(top1), rankdata(macs)
    return max(n, key=lambda i: (r_top1[i] + r_macs[i], top1[i], -i))
