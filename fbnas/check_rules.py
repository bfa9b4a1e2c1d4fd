"""The check's rules: what each ``search.rerank_by`` value ranks the checked networks by.

A rule is added here and nowhere else: its figures (``RERANK_RULES``), whether it scores only
a shortlist one-shot (``SHORTLISTED_RULES``), lets only the shortlist's deepest networks
compete (``DEEPEST_RULES``) or sums weighted z-scores (``WEIGHTED_RULES``).
:mod:`fbnas.search.oneshot_check` applies them, ``fbnas pick`` decides by those that train
nothing, the config accepts their names and its reference (docs/config.md) describes each
with :func:`how`. Pure data and strings, importing nothing: a shared top-level module, so
the config (below the search in the package's order) can name the rules the search applies.
"""

from __future__ import annotations

#: what each figure is (the config reference says it before the table of rules)
FIGURES_DOC = ("`top1` the one-shot val top-1, `macs` the multiply-adds, `naswot` the "
               "training-free score of a fresh copy, `theta` the log-probability under "
               "softmax(theta), `depth` the number of layers that are not `skip`, `early_depth` "
               "those of them whose input is larger than the network's final resolution")

#: every rule: rule -> the figures whose ranks it sums, the first breaking ties (what each
#: figure is: FIGURES_DOC)
RERANK_RULES = {"top1": ("top1",), "top1_and_macs": ("top1", "macs"), "naswot": ("naswot",),
                "naswot_and_top1": ("naswot", "top1"), "naswot_and_theta": ("naswot", "theta"),
                "naswot_and_theta_then_top1": ("naswot", "theta", "top1"),
                "naswot_and_theta_then_one_shot": ("naswot", "theta", "top1"),
                "naswot_and_theta_deepest": ("naswot", "theta", "depth"),
                "naswot_and_theta_deepest_then_one_shot": ("naswot", "theta", "top1", "depth"),
                "naswot_and_theta_early_deepest_then_one_shot": ("naswot", "theta", "top1",
                                                                 "early_depth")}
#: rules that score only a shortlist one-shot: rule -> (the rule that draws the shortlist up
#: from every checked network, how many it keeps)
SHORTLISTED_RULES = {"naswot_and_theta_then_top1": ("naswot_and_theta", 8),
                     "naswot_and_theta_then_one_shot": ("naswot_and_theta", 16),
                     "naswot_and_theta_deepest": ("naswot_and_theta", 16),
                     "naswot_and_theta_deepest_then_one_shot": ("naswot_and_theta", 16),
                     "naswot_and_theta_early_deepest_then_one_shot": ("naswot_and_theta", 16)}
#: shortlisted rules under which only the shortlist's deepest networks (the fewest ``skip``
#: layers) compete: rule -> the figure that counts depth. Why: on NAS-Bench-Macro a budget's
#: best networks have few skip layers (the benchmark's mean top-1 falls from 92.6% with none
#: to 88.9% with four), while both the one-shot top-1 (shallow paths train fastest) and
#: NASWOT kept 4-skip networks over the near-best 2-skip ones of the same shortlist
#: (docs/notebook/macro-one-shot-check.md). "early_depth" leaves the final resolution's
#: layers out: there the best networks of the wider budgets skip (22222200), and counting
#: those skips kept narrow networks with none (docs/notebook/macro-early-depth.md)
DEEPEST_RULES = {"naswot_and_theta_deepest": "depth",
                 "naswot_and_theta_deepest_then_one_shot": "depth",
                 "naswot_and_theta_early_deepest_then_one_shot": "early_depth"}
#: rules that sum weighted z-scores instead of ranks (a shortlisted one's z-scores within its
#: shortlist): rule -> {figure: weight}. Theta's weight is the one that came closest to the
#: best network; one-shot and NASWOT weigh alike as they ranked a budget's window alike, and
#: their sum better than either (docs/results.md, Ranking within a budget's window)
WEIGHTED_RULES = {"naswot_and_theta": {"naswot": 1.0, "theta": 0.25},
                  "naswot_and_theta_then_one_shot": {"top1": 1.0, "naswot": 1.0, "theta": 0.25},
                  "naswot_and_theta_deepest_then_one_shot": {"top1": 1.0, "naswot": 1.0,
                                                             "theta": 0.25},
                  "naswot_and_theta_early_deepest_then_one_shot": {"top1": 1.0, "naswot": 1.0,
                                                                   "theta": 0.25}}
#: where a DEEPEST rule's depth figure counts the skips, as messages say it after "the fewest
#: skip"
DEPTH_WHERE = {"depth": "", "early_depth": " before the final resolution"}
#: how messages name each figure ("best NASWOT and theta of the 64 most probable")
FIGURE_NAMES = {"top1": "one-shot", "macs": "MACs", "naswot": "NASWOT", "theta": "theta",
                "depth": "depth", "early_depth": "depth before the final resolution"}


def rule_label(rule: str) -> str:
    """A rule's figures as messages name them, e.g. "one-shot and MACs", "NASWOT, theta
    and one-shot", or "NASWOT and theta among the fewest skip" for a DEEPEST rule (depth
    filters there, it is not summed)."""
    depth = DEEPEST_RULES.get(rule)
    names = [FIGURE_NAMES[f] for f in RERANK_RULES[rule] if f != depth]
    label = (" and ".join(names) if len(names) < 3
             else f"{', '.join(names[:-1])} and {names[-1]}")
    return label if depth is None else f"{label} among the fewest skip{DEPTH_WHERE[depth]}"


#: the rules that score every checked network one-shot, a pass over the val split each, so a
#: config may check fewer networks with them than with the others
ONE_SHOT_RULES = tuple(rule for rule, figures in RERANK_RULES.items()
                       if "top1" in figures and rule not in SHORTLISTED_RULES)
#: the rules `fbnas pick` may decide by, its default first: those that score no network
#: one-shot, as a pick trains no supernet
PICK_RULES = tuple(sorted((rule for rule, figures in RERANK_RULES.items()
                           if "top1" not in figures),
                          key=lambda rule: rule != "naswot_and_theta"))


def how(rule: str) -> str:
    """How ``rule`` decides, in the config reference's words ("`naswot_and_theta`'s best
    16, of them the deepest (fewest skip), then their weighted z-scores: ...")."""
    figures = RERANK_RULES[rule]
    weights = ", ".join(f"{f} {w:g}" for f, w in WEIGHTED_RULES.get(rule, {}).items())
    if rule in SHORTLISTED_RULES:
        first, size = SHORTLISTED_RULES[rule]
        then = (f"their weighted z-scores: {weights}" if weights
                else "the sum of its rank and top1's" if "top1" in figures
                else f"`{first}`'s order")
        deepest = (f", of them the deepest{DEPTH_WHERE[DEEPEST_RULES[rule]]} (fewest skip)"
                   if rule in DEEPEST_RULES else "")
        return f"`{first}`'s best {size}{deepest}, then {then}"
    if weights:
        return f"sum of weighted z-scores: {weights}"
    return "sum of ranks" if len(figures) > 1 else "the best value"
