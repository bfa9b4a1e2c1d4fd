"""Warnings for the ways a differentiable search goes wrong beyond its weights' training.

Like fbnas.runs.health's checks, they read the epoch records the trainer keeps and only warn:
a search that looks stuck early can still recover, and the user decides whether to stop it.
"""

from __future__ import annotations

from fbnas.runs.health import epoch_warnings


def skip_count(ops: list[str]) -> int:
    return sum(op == "skip" for op in ops)


def check_skip_collapse(history: list[dict], share: float = 0.5) -> str | None:
    """The argmax architecture is mostly ``skip`` and was not the epoch before: theta is
    collapsing toward the cheapest op."""
    if not history or "argmax_skips" not in history[-1]:
        return None
    now = history[-1]
    if "budget_ms" in now:  # the user named the latency: skips are what it leaves room for
        return None
    layers = now.get("layers", 0)
    if not layers or now["argmax_skips"] < share * layers:
        return None
    before = history[-2].get("argmax_skips", 0) if len(history) > 1 else 0
    if now["argmax_skips"] <= before:
        return None
    return (f"theta is collapsing toward skip: {now['argmax_skips']} of {layers} layers of "
            "the argmax architecture are skip. The cost term is winning over accuracy; name "
            "the latency you want with --target-ms, or lower loss.beta (loss.alpha does not "
            "change this trade-off)")


def search_warnings(history: list[dict], classes: int) -> list[str]:
    """The training run's warnings, then the search's own."""
    found = epoch_warnings(history, classes)
    collapse = check_skip_collapse(history) if history else None
    return found + [collapse] if collapse else found
