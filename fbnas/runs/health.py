"""Warnings for the ways a training run goes wrong, read from the epoch history.

Each check looks at the records the trainer already keeps (one dict per epoch) and returns
a one-line warning naming the likely cause and what to change, or None. They only warn: a
run that looks stuck early can still recover, and the user decides whether to stop it.
"""

from __future__ import annotations

import math


def chance_ce(classes: int) -> float:
    """Cross-entropy of a uniform guess: what a network that learned nothing scores."""
    return math.log(classes)


def check_not_learning(history: list[dict], classes: int, patience: int = 2,
                       margin: float = 0.05, top1_margin: float = 5.0) -> str | None:
    """The weights' training CE has stayed at ln(classes) (from ``margin`` below to 50% above)
    for the last ``patience`` epochs, and the val top-1 of those of them that were scored
    stayed within ``top1_margin`` points of a guess's: the network predicts no better than
    chance. Where a val split exists but none of them was scored (``val_skipped``, a
    search's ``evaluate_every``) it says nothing yet: a CE near ln(classes) alone cannot
    tell a stuck run from a slow start (the NAS-Bench-Macro search's first epochs sit there
    while their val top-1 climbs). Without a val split the CE alone decides.
    A training CE at chance with a val top-1 well above it is a first epoch recovering from a
    spike, not a run that does not learn (the demo's first epochs do this). Far higher CE is
    a blow-up, which :func:`check_blow_up` reports."""
    recent = history[-patience:]
    ces = [r.get("weights_ce") for r in recent]
    if len(recent) < patience or any(v is None for v in ces):
        return None
    floor = chance_ce(classes)
    guess = 100.0 / classes
    scored = [r["val_top1"] for r in recent if "val_top1" in r]
    if any(v > guess + top1_margin for v in scored):
        return None
    if not scored and any(r.get("val_skipped") for r in recent):
        return None
    if all(floor - margin < v <= 1.5 * floor for v in ces):
        return (f"the supernet's training CE has stayed at chance level (ln {classes} = "
                f"{floor:.2f}) for {patience} epochs: it is not learning. Likely causes: a "
                "learning rate too high for weight sharing (try --set optim.weights.lr=0.05), "
                "too few weights-only epochs (search.warmup_epochs), or too little data")
    return None


def check_blow_up(record: dict, classes: int, factor: float = 2.0) -> str | None:
    """The epoch's mean training CE is far above chance: the weights are diverging."""
    ce = record.get("weights_ce")
    if ce is None or ce <= factor * chance_ce(classes):
        return None
    return (f"the supernet's training CE ({ce:.2f}) is more than {factor:g}x chance level "
            f"({chance_ce(classes):.2f}): the weights are diverging. Lower "
            "optim.weights.lr or add optim.weights.warmup_epochs")


def epoch_warnings(history: list[dict], classes: int) -> list[str]:
    """Every warning about the weights' training that applies after the latest epoch of
    ``history`` (a search adds its own, fbnas.search.health)."""
    if not history:
        return []
    found = [check_blow_up(history[-1], classes), check_not_learning(history, classes)]
    return [w for w in found if w]
