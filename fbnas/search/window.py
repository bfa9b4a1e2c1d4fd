"""The networks that spend a latency budget: the most probable one, or a list of the most
probable ones, whose predicted latency lies in a window below the budget.

:mod:`fbnas.search.budget` answers "the most probable network within the budget" exactly.
The most accurate network nearly always spends most of the budget, though, and an undecided
theta can make the most probable one a near-tie of cheap candidates far under it, so the
search samples from a window, ``loss.target_floor`` times the budget to the budget
(:func:`ops_in_window`), and its one-shot check compares theta's most probable networks there
(:func:`top_in_window`), counting networks that build the same thing once
(:func:`same_network`). A lower bound breaks the exact program's pruning, so these solve on a
grid of latency cells instead and keep only networks that truly fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fbnas.arch.ops import parse_op
from fbnas.errors import FbnasError, Warn, warn_stderr
from fbnas.search.budget import layer_costs, ms_that_fits, ops_under_budget, raw_limit

#: cells of the latency grid :func:`ops_in_window` solves on
WINDOW_CELLS = 20_000


def ops_in_window(lut, space, probs, budget_us: float, floor: float,
                  warn: Warn = warn_stderr) -> list[str]:
    """The most probable architecture whose ``lut.predict`` spends between ``floor`` times the
    budget and the budget; where no architecture of the space reaches the floor, the most
    probable one within the budget (:func:`ops_under_budget`).

    Why a floor: the most accurate network within a budget nearly always spends most of it
    (as on NAS-Bench-Macro, docs/results.md), but while theta is undecided the most probable
    network within the budget can be a near-tie of cheap candidates far under it. A floor
    turns the budget
    into a window and the question into "the most probable network that spends it".

    A lower bound breaks the Pareto pruning :func:`solve` relies on (a slower partial network
    may be the only one that can still reach the floor), so this is a dynamic program over a
    grid of ``WINDOW_CELLS`` latency cells instead: each candidate's table cost is rounded to
    a whole number of cells, and the window is narrowed by the largest total rounding error
    (half a cell a layer) at both ends, so the network returned is inside the true window.
    It can miss a more probable network that lies within that margin of either edge (at most
    a fraction of a microsecond a layer on the shipped tables).
    """
    plain = ops_under_budget(lut, space, probs, budget_us, warn)
    if floor <= 0 or lut.predict(plain) >= floor * budget_us:
        return plain
    layers, lo_cell, hi_cell = _grid(lut, space, probs, budget_us, floor)
    if lo_cell > hi_cell:
        return plain
    best = np.full(hi_cell + 1, -np.inf)
    best[0] = 0.0
    choice = []
    for w, lp in layers:
        options = np.full((len(w), hi_cell + 1), -np.inf)
        for i, (wi, li) in enumerate(zip(w, lp)):
            if wi <= hi_cell:
                options[i, wi:] = best[:hi_cell + 1 - wi] + li
        pick = options.argmax(axis=0)  # the first candidate on ties: deterministic
        choice.append((pick, w))
        best = options[pick, np.arange(hi_cell + 1)]
    window = best[lo_cell:]
    if not np.isfinite(window).any():
        return plain  # no network of the space reaches the floor within the budget
    at = lo_cell + int(window.argmax())
    path = []
    for pick, w in reversed(choice):
        i = int(pick[at])
        path.append(i)
        at -= w[i]
    ops = [layer.candidates[i] for layer, i in zip(space.layers, reversed(path))]
    # the margin makes this hold; should rounding ever defeat it, the plain rule still fits
    return ops if floor * budget_us <= lut.predict(ops) <= budget_us else plain


def _grid(lut, space, probs, budget_us: float, floor: float) -> tuple[list, int, int]:
    """The window's grid: per layer each candidate's table cost in whole cells and its
    log-probability, and the first and last cell of the window (first > last: it holds
    none), each edge pulled in by the largest total rounding error, half a cell a layer."""
    costs = layer_costs(lut, space)
    fixed = lut.fixed_cost()
    high = raw_limit(lut, budget_us) - fixed
    a, b = lut.calibration or (1.0, 0.0)
    cell = high / WINDOW_CELLS
    margin = 0.5 * len(costs) * cell
    lo_cell = math.ceil(((floor * budget_us - b) / a - fixed + margin) / cell)
    hi_cell = math.floor((high - margin) / cell)
    # probability 0 as a large finite penalty: such candidates stay usable when nothing else
    # reaches the window (as ops_under_budget allows), while -inf marks unreachable cells
    layers = [([int(round(x / cell)) for x in c], [math.log(float(x)) if x > 0 else -1e9
                                                    for x in p])
              for c, p in zip(costs, probs)]
    return layers, lo_cell, hi_cell


#: top_in_window's grid keeps this many times the networks asked for, so that the list is
#: still full after equivalent networks are dropped
POOL = 4
#: the most memory top_in_window's grid may take; more is refused before it starts
WINDOW_MEMORY = 3 * 2**30


def window_list_bytes(space, k: int) -> int:
    """About the peak memory of :func:`top_in_window` listing ``k`` networks of ``space``:
    per latency cell and kept partial network, a float, its sort index and a temporary for
    each candidate of a layer, the kept scores, and a 4-byte back-pointer per layer; a little
    under the process's real peak."""
    cands = max(len(layer.candidates) for layer in space.layers)
    return WINDOW_CELLS * k * POOL * (24 * cands + 24 + 4 * len(space.layers))


def check_window_list(space, k: int, knob: str = "search.rerank") -> None:
    """Refuse, in one line naming the largest that fits, a list of ``k`` networks of ``space``
    whose window search would take more than ``WINDOW_MEMORY``; ``knob`` is how the user
    set ``k``."""
    need = window_list_bytes(space, k)
    if need > WINDOW_MEMORY:
        fits = max(1, k * WINDOW_MEMORY // need)
        raise FbnasError(f"{knob} {k}: listing that many networks of {space.name} "
                         f"takes about {need / 2**30:.1f} GiB of memory; use {knob} "
                         f"{fits} or fewer")


def check_budget(lut, space, budget_us: float, k: int, warn: Warn = warn_stderr,
                 knob: str = "search.rerank") -> None:
    """Refuse, before any training or scoring, a budget no network of ``space`` meets and a
    check list of ``k`` networks (set by ``knob``) too long to find; warn of a budget above
    the slowest network, which pushes every layer toward its slowest candidate. The budget is
    checked before the list: a user fixes the budget first, and the list's memory then."""
    costs = lut.layer_costs()
    uniform = [np.full(len(c), 1.0 / len(c)) for c in costs]
    ops_under_budget(lut, space, uniform, budget_us, warn)  # raises below the minimum
    if k > 1:
        check_window_list(space, k, knob)
    names = lut.layer_candidates()
    slowest = lut.predict([n[int(np.argmax(c))] for n, c in zip(names, costs)])
    if budget_us > slowest:
        warn(f"the budget {ms_that_fits(budget_us)} ms is above the slowest network of {space.name} "
             f"({ms_that_fits(slowest)} ms predicted): every layer is pushed toward its slowest "
             "candidate")


def top_in_window(lut, space, probs, budget_us: float, floor: float, k: int,
                  warn: Warn = warn_stderr) -> list[list[str]]:
    """Up to ``k`` architectures, most probable first, whose predicted latency lies between
    ``floor`` times the budget and the budget (the whole budget where none reaches the floor
    or ``floor`` is 0); the first is always :func:`ops_in_window`'s answer, and no two are the
    same network (:func:`same_network`): the most probable of equivalent ones stands for them.

    The same grid program as :func:`ops_in_window`, keeping the ``POOL * k`` best partial
    networks of every latency cell instead of one: these are the candidates a search's
    one-shot check (``search.rerank``) compares.
    """
    first = ops_in_window(lut, space, probs, budget_us, floor, warn)
    if k <= 1:
        return [first]
    check_window_list(space, k)
    pool = k * POOL  # room for the equivalent networks dropped below
    layers, lo_cell, hi_cell = _grid(lut, space, probs, budget_us, floor)
    lo_cell = max(0, lo_cell)
    if floor <= 0 or lo_cell > hi_cell or lut.predict(first) < floor * budget_us:
        lo_cell = 0  # nothing reaches the floor: as ops_in_window, the whole budget
    n = hi_cell + 1
    best = np.full((n, pool), -np.inf)
    best[0, 0] = 0.0
    steps = []
    for w, lp in layers:
        options = np.full((n, len(w), pool), -np.inf)
        for i, (wi, li) in enumerate(zip(w, lp)):
            if wi < n:
                options[wi:, i, :] = best[:n - wi] + li
        flat = options.reshape(n, -1)
        order = np.argsort(-flat, axis=1, kind="stable")[:, :pool]
        best = np.take_along_axis(flat, order, axis=1)
        steps.append((order.astype(np.int32), w))  # half the memory of the sort's int64
    window = best[lo_cell:]
    ranked = np.argsort(-window, axis=None, kind="stable")[:pool]
    found, seen = [first], {same_network(space, first)}
    for flat_at in ranked:
        at, rank = divmod(int(flat_at), pool)
        at += lo_cell
        if not np.isfinite(best[at, rank]):
            break
        path = []
        for order, w in reversed(steps):
            i, rank = divmod(int(order[at, rank]), pool)
            path.append(i)
            at -= w[i]
        ops = [layer.candidates[i] for layer, i in zip(space.layers, reversed(path))]
        key = same_network(space, ops)
        if key not in seen and lut.predict(ops) <= budget_us:
            found.append(ops)
            seen.add(key)
    return found[:k]


def same_network(space, ops: Sequence[str]) -> tuple:
    """A key two architectures share exactly when they build the same network.

    A ``skip`` off a transition layer (``Layer.transition``) is the identity, and a run of
    such layers keeps one shape throughout, so within a run only the order of the other ops
    matters: ``k3_e3 skip`` and ``skip k3_e3`` there are one network, with the
    same weights to train and the same latency (NAS-Bench-Macro lists them with one
    accuracy). Without this key the one-shot check's list often held such pairs, and
    compared fewer networks than it was asked to.
    """
    key: list = []
    run: list[str] = []
    for layer, op in zip(space.layers, ops):
        if not layer.transition:
            run.append(op)
            continue
        key += _run_key(run)
        key.append(op)
        run = []
    return tuple(key + _run_key(run))


def _run_key(run: list[str]) -> list:
    return [("run", tuple(o for o in run if not parse_op(o).is_skip), len(run))] if run else []
