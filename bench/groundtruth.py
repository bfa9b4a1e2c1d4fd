"""NAS-Bench-Macro as the judge of a search: a network's true accuracy, looked up.

NAS-Bench-Macro (Su et al., CVPR 2021) trained each of the 3^8 networks of the bundled space
``nasbench_macro`` three times on the full CIFAR-10. Retraining a found network on a small
machine ranks it with an error larger than most gaps between the networks a search finds;
the benchmark answers in milliseconds, with a small seed spread. So a search on that space
is scored here by lookup: the found network's true accuracy, its percentile among every
network that fits the same budget (under the same table), and its gap to the best of them
(the oracle).

The file is a JSON object keyed by 8 digits, layer 1 first: 0 ``skip``, 1 ``k3_e3``,
2 ``k5_e6``. It is read where it lies and never copied.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fbnas.errors import FbnasError, brief
from fbnas.io import parse_json

#: the candidate each digit of a key stands for (the space's candidate order)
DIGITS = ("skip", "k3_e3", "k5_e6")
LAYERS = 8
#: the networks that "fill the budget": predicted latency within this share of it
NEAR_BUDGET = 0.9


def key_of(ops: list[str]) -> str:
    """The benchmark key of an architecture: ``["k3_e3", "skip", ...]`` -> ``"10..."``."""
    try:
        return "".join(str(DIGITS.index(op)) for op in ops)
    except ValueError:
        bad = next(op for op in ops if op not in DIGITS)
        raise FbnasError(f"op {brief(bad)} is not a NAS-Bench-Macro candidate (the space has "
                         f"{', '.join(DIGITS)})") from None


def depth_figures_of(keys: list[str]) -> dict[str, list[int]]:
    """The "depth" and "early_depth" figures of the networks ``keys`` of the bundled space
    ``nasbench_macro`` (its layers 7 and 8 run at the final resolution), as a check has
    them (fbnas.search.oneshot_check.depth_figures)."""
    from fbnas.search.oneshot_check import depth_figures

    return depth_figures(_macro_space(), [ops_of(k) for k in keys])


@functools.cache
def _macro_space():
    from fbnas.arch.space import load_space

    return load_space("nasbench_macro")


def ops_of(key: str) -> list[str]:
    """The architecture of a benchmark key: ``"10..."`` -> ``["k3_e3", "skip", ...]``."""
    if not (isinstance(key, str) and key and set(key) <= set("012")):
        raise FbnasError(f"NAS-Bench-Macro key {brief(key)} must be digits 0, 1 and 2")
    return [DIGITS[int(c)] for c in key]


@dataclass
class Truth:
    """The benchmark's mean test accuracy (%) of each key."""

    accuracy: dict[str, float]
    path: str = ""

    def __getitem__(self, key: str) -> float:
        if key not in self.accuracy:
            raise FbnasError(f"NAS-Bench-Macro has no network {brief(key)}")
        return self.accuracy[key]


def load_truth(path: str | Path, layers: int = LAYERS) -> Truth:
    """Read the benchmark file; refuse one that is not a complete NAS-Bench-Macro file."""
    path = Path(path)
    if path.is_dir():
        path = path / "nas-bench-macro_cifar10.json"
    if not path.is_file():
        raise FbnasError(f"NAS-Bench-Macro file {path} does not exist; pass the folder that "
                         "holds nas-bench-macro_cifar10.json")
    try:
        raw = parse_json(path.read_text(), f"NAS-Bench-Macro file {path}")
        acc = {k: float(v["mean_acc"]) for k, v in raw.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise FbnasError(f"{path} is not a NAS-Bench-Macro file ({e}); pass the benchmark's "
                         "nas-bench-macro_cifar10.json") from None
    want = 3 ** layers
    if len(acc) != want or any(len(k) != layers for k in acc):
        raise FbnasError(f"{path} holds {len(acc)} networks, not the {want} of a {layers}-layer "
                         "NAS-Bench-Macro space")
    return Truth(acc, str(path))


def all_keys(layers: int = LAYERS) -> list[str]:
    return ["".join(p) for p in itertools.product("012", repeat=layers)]


@dataclass
class Verdict:
    """How a network ranks among all networks within a budget, by true accuracy."""

    key: str
    accuracy: float
    percentile: float  # share of the networks within the budget it beats or ties, in %
    oracle: str
    oracle_accuracy: float
    within: int  # networks within the budget
    near_mean: float  # mean true accuracy of those spending NEAR_BUDGET..1 of it

    @property
    def gap(self) -> float:
        return self.oracle_accuracy - self.accuracy


def judge(truth: Truth, latency: dict[str, float], budget: float, key: str) -> Verdict:
    """Score network ``key`` against every network whose ``latency`` is within ``budget``.

    ``latency`` maps keys to predicted latency (any unit, the budget's). The percentile
    counts the networks within the budget whose accuracy is at most the network's own.
    """
    inside = [k for k, v in latency.items() if v <= budget]
    if not inside:
        raise FbnasError(f"no network is within the budget {budget:g}")
    accs = np.array([truth[k] for k in inside])
    mine = truth[key]
    best = inside[int(np.argmax(accs))]
    near = [truth[k] for k in inside if latency[k] >= NEAR_BUDGET * budget]
    return Verdict(key, mine, 100.0 * float(np.mean(accs <= mine)), best, truth[best],
                   len(inside), float(np.mean(near)) if near else math.nan)


def latency_quantile(latency: dict[str, float], q: float) -> float:
    """The ``q`` quantile (0..1) of the space's predicted latencies: a budget at it."""
    return float(np.quantile(np.fromiter(latency.values(), float), q))


def pareto_front(truth: Truth, latency: dict[str, float]) -> list[str]:
    """Keys no other network beats in both latency and accuracy, fastest first."""
    front, best = [], -math.inf
    for k in sorted(latency, key=lambda k: (latency[k], -truth[k])):
        if truth[k] > best:
            front.append(k)
            best = truth[k]
    return front
