"""The one-shot check: which networks a search compares after its last epoch, and which one
it keeps.

After the last epoch of a search under a budget, the ``search.rerank`` most probable networks
within the budget's window are compared (:meth:`fbnas.search.run.Search.rerank`); this module
lists them (:func:`checked_networks`) and decides among them by ``search.rerank_by``, whose
rules are defined once in :data:`fbnas.check_rules.RERANK_RULES` (each rule's figures, the
first breaking ties; docs/config.md lists them):

- a single figure: the best value, ties to the more probable network;
- several figures: the best sum of their ranks among the checked networks, ties to the
  better first figure, then to the more probable (ranks, not raw values, so neither
  figure's scale outweighs the other);
- a weighted rule (``naswot_and_theta``): the best weighted sum of the figures' z-scores.
  With a long list theta is then a prior over the window rather than a shortlist: NASWOT
  reaches networks theta ranked low, and the prior keeps it off networks it over-rates;
- a shortlisted rule: its first rule's best few scored one-shot, then
  (``naswot_and_theta_then_top1``) the best sum of that rule's rank and the one-shot
  top-1's, so that the trained weights break near-ties without a noisy one-shot score
  overruling a clear lead; or (``naswot_and_theta_then_one_shot``, also weighted) the best
  weighted sum of the one-shot top-1's, NASWOT's and theta's z-scores within the shortlist:
  within a budget's window, one-shot and NASWOT ranked the truth alike, and their sum
  better than either, so among the shortlist the trained weights count as much as NASWOT;
- a deepest rule (``naswot_and_theta_deepest``, ``..._deepest_then_one_shot``): as the
  shortlisted rule, but only the shortlist's networks with the fewest ``skip`` layers
  compete. Neither the one-shot top-1 (a shallow path trains fastest) nor NASWOT tells a
  budget's near-best networks with two skip layers from the worse ones with four, and on
  NAS-Bench-Macro depth is what separates them. The ``early_deepest`` rule counts depth only
  where a layer's input is larger than the network's final resolution: a ``skip`` among the
  last, smallest layers costs least, and the wider budgets' best networks have two there.

The figures: ``top1``, the one-shot val top-1 on the supernet's weights (BN re-estimated for
each network; a pass over the held-out split a network); ``macs``, the table's multiply-adds;
``naswot``, the training-free score of a freshly initialised copy (fbnas/search/naswot.py;
one batch's forward pass a network, so a check by it may list hundreds); ``theta``, the
network's log-probability under softmax(theta); ``depth``, its layers that are not ``skip``;
``early_depth``, those of them whose input is larger than the final resolution.

Why MACs and NASWOT beside or instead of the one-shot top-1: a supernet trained for minutes
ranks networks by how fast they learn, not by how well they end. The networks a search
checks all fit the same latency window, so more MACs there means capacity that full training
turns into accuracy; NASWOT has no short-training bias and no noise from a small val split.
Theta still chooses which networks are checked, so the search decides the list and the score
only orders it. How each rule ranked NAS-Bench-Macro's networks: docs/results.md.
"""

from __future__ import annotations

import numpy as np

from fbnas.check_rules import DEEPEST_RULES as DEEPEST
from fbnas.check_rules import RERANK_RULES as RULES
from fbnas.check_rules import SHORTLISTED_RULES as SHORTLISTED
from fbnas.check_rules import WEIGHTED_RULES as WEIGHTED


def needs(rule: str, figure: str) -> bool:
    """Whether rule ``rule`` looks at ``figure`` ("top1", "macs", "naswot" or "theta")."""
    return figure in RULES[rule]


def depths(networks: list[list[str]], layers=None) -> list[int]:
    """Each network's number of layers that are not ``skip`` (the "depth" figure); with
    ``layers`` (indices), among those layers only."""
    return [sum(op != "skip" for i, op in enumerate(ops) if layers is None or i in layers)
            for ops in networks]


def early_layers(space) -> set[int]:
    """The indices of the layers whose input is larger than the network's final resolution
    (the last layer's output): the layers the "early_depth" figure counts."""
    final = space.layers[-1].out_hw
    return {layer.index for layer in space.layers if (layer.h, layer.w) != final}


def depth_figures(space, networks: list[list[str]]) -> dict[str, list[int]]:
    """The "depth" and "early_depth" figures of ``networks`` of ``space``, as a DEEPEST
    rule's check takes them."""
    return {"depth": depths(networks), "early_depth": depths(networks, early_layers(space))}


def depth_first(depth: list[int], score) -> list[float]:
    """One number per network that orders as a DEEPEST rule decides: by ``depth`` first,
    then by ``score``. Why one number: the benches rank a rule's order with Kendall tau,
    which takes a single value per network; the step between depths is wider than the
    whole spread of the scores, so a score never overturns a depth."""
    score = [float(x) for x in score]
    step = 2 * max((abs(x) for x in score), default=0.0) + 1
    return [step * d + x for d, x in zip(depth, score)]


def log_probabilities(space, probs, networks: list[list[str]]) -> list[float]:
    """Each network's log-probability under the per-layer probabilities ``probs`` (the
    "theta" figure of a rule)."""
    out = []
    for ops in networks:
        p = [float(probs[i][layer.candidates.index(op)]) for i, (layer, op)
             in enumerate(zip(space.layers, ops))]
        out.append(float(np.sum(np.log(np.maximum(p, 1e-300)))))
    return out


def z_scores(values) -> np.ndarray:
    """Standard scores (0 everywhere where all values are equal)."""
    v = np.asarray(values, dtype=float)
    sd = v.std()
    return np.zeros_like(v) if sd == 0 else (v - v.mean()) / sd


def weighted_score(rule: str, figures: dict) -> np.ndarray:
    """A WEIGHTED rule's score of each network: the weighted sum of its figures' z-scores
    (the benches score recorded checks with it too)."""
    return sum(w * z_scores(figures[f]) for f, w in WEIGHTED[rule].items())


def shortlist(rule: str, n: int, **figures: list[float]) -> list[int]:
    """The indices of the networks ``rule`` scores one-shot among ``n`` checked: every one,
    or for a SHORTLISTED rule the best few by its first rule (best first; ties to the better
    first figure, then to the more probable), from the figures that rule uses (others,
    such as a not yet scored ``top1``, are ignored)."""
    if rule not in SHORTLISTED:
        return list(range(n))
    first, size = SHORTLISTED[rule]
    score, lead = weighted_score(first, figures), figures[RULES[first][0]]
    return sorted(range(len(score)), key=lambda i: (-score[i], -lead[i], i))[:size]


def choose(rule: str, *, filter_depth: bool = True, **figures: list[float]) -> int:
    """The index of the network the check keeps among networks listed most probable first,
    given the figures ``rule`` uses (each a list, one value a network; larger is better; for
    a SHORTLISTED rule, ``top1`` is needed only at the shortlist's indices). With
    ``filter_depth`` false a DEEPEST rule decides as if every network of its shortlist
    competed: what its depth filter changed (:func:`depth_filter_moved`)."""
    if rule not in RULES:
        raise ValueError(f"unknown one-shot check rule {rule!r}")
    if rule in SHORTLISTED:
        keep = shortlist(rule, len(figures[RULES[rule][0]]), **figures)
        score = weighted_score(SHORTLISTED[rule][0], figures)[keep]
        if rule in WEIGHTED:
            # the weighted z-scores within the shortlist; ties to the better first score
            mine = weighted_score(rule, {f: [figures[f][i] for i in keep] for f in WEIGHTED[rule]})
        elif "top1" in RULES[rule]:
            # the sum of two ranks among the shortlist: the first rule's score and the
            # one-shot top-1; ties to the better first score, then to the more probable
            from scipy.stats import rankdata

            mine = rankdata(score) + rankdata([figures["top1"][i] for i in keep])
        else:  # the shortlist's own order
            mine = score
        among = range(len(keep))
        if rule in DEEPEST and filter_depth:  # the z-scores stay those of the whole shortlist
            depth = figures[DEEPEST[rule]]
            most = max(depth[i] for i in keep)
            among = [j for j in among if depth[keep[j]] == most]
        return keep[max(among, key=lambda j: (mine[j], score[j], -keep[j]))]
    used = [figures[f] for f in RULES[rule]]
    n = range(len(used[0]))
    if rule in WEIGHTED:
        score = weighted_score(rule, figures)
        return max(n, key=lambda i: (score[i], used[0][i], -i))
    if len(used) == 1:
        return max(n, key=lambda i: (used[0][i], -i))
    from scipy.stats import rankdata  # ties share the mean of their places; here, not at import

    ranks = sum(rankdata(v) for v in used)
    return max(n, key=lambda i: (ranks[i], used[0][i], -i))


def depth_filter_moved(rule: str, **figures: list[float]) -> bool | None:
    """Whether a DEEPEST rule's filter (the fewest ``skip`` layers) changed its decision
    among the figures recorded by a check; None for other rules. Why: the filter was chosen
    on NAS-Bench-Macro, so on another space a user asks first whether it acted at all."""
    if rule not in DEEPEST:
        return None
    return choose(rule, **figures) != choose(rule, filter_depth=False, **figures)


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
    (the best networks under the bench's budgets have it, and searches that put ``k3_e3``
    there lost the most). One network per (layer, candidate), each the best theta allows
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
