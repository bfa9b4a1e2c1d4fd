"""The most probable architecture within a latency budget, found exactly.

``--hard`` takes every layer's most probable candidate, whatever the network then costs. A
search with a budget (``loss.form: target``) only pushes the *expected* latency under it, so
its argmax can still be slower than the budget, and a deployment budget is a hard limit on
one network. :func:`ops_under_budget` answers that question directly: among all
architectures whose predicted latency (``LUT.predict``: the table's calibration applied to
the stem + head + chosen ops) is at most the budget, the one with the largest probability
under softmax(theta).

Layers are independent under softmax(theta), so the probability of a network is a product
over layers and its table latency a sum: a multiple-choice knapsack. :func:`best_path`
solves it without rounding latencies to a grid, which would admit networks a little over the
budget or miss the best one just under it. It is a dynamic program over layers that keeps,
after each layer, the Pareto frontier of partial networks: (latency so far, log-probability
so far) pairs that no other pair beats in both. Why that is exact:

- latency and log-probability both add up layer by layer, and floating-point addition is
  monotone (``x <= y`` implies ``x + z <= y + z`` after rounding), so if partial network Q
  is no slower and no less probable than P, every completion of P is matched or beaten by
  the same completion of Q: P can be dropped without losing an optimum, including exact
  ties (where the one kept has the same latency and probability);
- a partial network whose latency plus the cheapest completion of the remaining layers
  exceeds the limit has no feasible completion;
- a partial network whose log-probability plus an upper bound on what the remaining layers
  can add within the remaining latency is below a known feasible network's can never be
  the answer. The bound is the linear-programming relaxation of the remaining layers (per
  layer the upper concave hull of its (latency, log-probability) points, the hull segments
  of all remaining layers taken by falling slope), which is at least the log-probability of
  every completion that fits. The known network comes from the Lagrangian relaxation (per
  layer the maximiser of ``logp - lam * latency`` at the smallest ``lam`` that fits),
  improved one layer at a time, then from a first pass of this program with a narrow
  frontier; it only decides how much is dropped, never what the answer is.

The last two drop partial networks only with a relative slack of 1e-9 in their favour, so
rounding in the bounds (summed in another order than the networks) never drops one that
could win, and the final comparison with the limit is exact. By induction over layers, a
prefix of an optimal network (or of one tied with it in both latency and probability)
always survives: the kept pair that dominates it is itself the prefix of such a network,
and no bound drops a prefix of a network at least as good as the known one. The best
surviving network that fits is therefore the answer.

The frontier is normally small (tens to a few thousand pairs on fbnet_cifar, a few
milliseconds). It grows large only when nearly every network's log-probability is the same
linear function of its latency (theta proportional to the table's latencies, to within a
fraction of a percent, across all layers): the problem then is subset-sum, where no pair
dominates another and no bound separates them. The frontier is therefore capped at
``MAX_STATES`` pairs a layer, kept by best bound (a few hundred milliseconds); should the cap
ever bind, the result still fits the budget but is not proven the most probable, and
:class:`Solution` says so with a proven bound on how far from the optimum it can be (``gap``,
in log-probability, from the relaxation above), which :func:`ops_under_budget` reports in a
warning.

Ties between networks are broken by the higher log-probability, then the lower latency,
then deterministically by candidate order. Candidates of probability 0 (log-probability
``-inf``) stay usable: they are chosen only when nothing of positive probability fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fbnas.arch.ops import parse_op
from fbnas.errors import FbnasError, Warn, warn_stderr

#: most partial networks kept after a layer; more only for (near-)linear theta, see above
MAX_STATES = 20_000
#: relative slack in favour of keeping a partial network when pruning by a bound
_SLACK = 1e-9
#: the frontier of the first, approximate pass that only looks for a good known network
_PROBE = 256


@dataclass
class Solution:
    """What :func:`solve` found."""

    #: per layer the chosen candidate's index; None when even the cheapest network is over
    path: list[int] | None
    #: its summed cost and log-probability (sequential float sums, layer by layer)
    cost: float
    logp: float
    #: False only if the frontier cap bound, in which case ``gap`` bounds the loss
    exact: bool
    #: proven bound on (best log-probability within the limit) - logp; 0.0 when exact
    gap: float
    #: the largest frontier kept after any layer
    states: int


def _check(costs: list[list[float]], logp: list[list[float]], limit: float):
    if len(costs) != len(logp):
        raise ValueError(f"costs has {len(costs)} layers, logp {len(logp)}")
    C, L = [], []
    for k, (c, p) in enumerate(zip(costs, logp)):
        c, p = np.asarray(c, dtype=float), np.asarray(p, dtype=float)
        if c.ndim != 1 or c.size == 0 or c.shape != p.shape:
            raise ValueError(f"layer {k}: costs and logp must be equally long, non-empty lists")
        if not np.isfinite(c).all():
            raise ValueError(f"layer {k}: costs must be finite")
        if np.isnan(p).any() or (p == math.inf).any():
            raise ValueError(f"layer {k}: logp must be finite or -inf")
        C.append(c)
        L.append(p)
    if math.isnan(limit):
        raise ValueError("limit must be a number")
    return C, L


def _sums(C: list[np.ndarray], L: list[np.ndarray], path) -> tuple[float, float]:
    """(cost, logp) of ``path``, summed in layer order as the dynamic program sums them."""
    cost, lp = 0.0, 0.0
    for c, p, j in zip(C, L, path):
        cost += float(c[j])
        lp += float(p[j])
    return cost, lp


def _cheapest(C: list[np.ndarray], L: list[np.ndarray]) -> list[int]:
    """Per layer the cheapest candidate, the more probable one on ties."""
    return [int(np.lexsort((-p, c))[0]) for c, p in zip(C, L)]


def _relaxed(Cp: np.ndarray, Lp: np.ndarray, lam: float) -> list[int]:
    """Per layer the maximiser of logp - lam * cost (padded arrays, layers x candidates)."""
    return np.argmax(Lp - lam * Cp, axis=1).tolist()


def _hull(c: np.ndarray, p: np.ndarray) -> tuple[float, float, list, list] | None:
    """One layer's upper concave hull of its (cost, logp) points of positive probability:
    (cost, logp) of its first point and the cost and logp steps of its segments, steepest
    first; None if every candidate has probability 0."""
    finite = np.isfinite(p)
    if not finite.any():
        return None
    c, p = c[finite], p[finite]
    order = np.lexsort((-p, c))
    c, p = c[order], p[order]
    keep = np.ones(c.size, dtype=bool)
    keep[1:] = p[1:] > np.maximum.accumulate(p)[:-1]
    c, p = c[keep], p[keep]  # costs and logp both strictly rising
    hull = [0]
    for i in range(1, c.size):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (p[b] - p[a]) * (c[i] - c[b]) > (p[i] - p[b]) * (c[b] - c[a]):
                break
            hull.pop()
        hull.append(i)
    return (float(c[0]), float(p[0]), [float(c[b] - c[a]) for a, b in zip(hull, hull[1:])],
            [float(p[b] - p[a]) for a, b in zip(hull, hull[1:])])


class _Suffix:
    """The most a run of layers can add to the log-probability within a latency ``room``, as
    a concave piecewise-linear function of the room (-inf where no completion of positive
    probability fits).

    It is the linear-programming relaxation of the knapsack (per layer the upper concave
    hull of its (cost, logp) points; the hull segments of all layers taken by falling
    slope, the last one in part), which equals the tightest Lagrangian bound, the minimum
    over ``lam >= 0`` of ``sum_layers max_j (logp_j - lam * cost_j) + lam * room``.
    """

    def __init__(self, hulls: list):
        self.empty = any(h is None for h in hulls)
        if self.empty:
            return
        dc = np.array([x for h in hulls for x in h[2]], dtype=float)
        dl = np.array([x for h in hulls for x in h[3]], dtype=float)
        order = np.argsort(-(dl / dc), kind="stable") if dc.size else np.zeros(0, dtype=int)
        self.x = sum(h[0] for h in hulls) + np.concatenate([[0.0], np.cumsum(dc[order])])
        self.y = sum(h[1] for h in hulls) + np.concatenate([[0.0], np.cumsum(dl[order])])

    def __call__(self, room: np.ndarray) -> np.ndarray:
        if self.empty:
            return np.full(room.shape, -math.inf)
        out = np.interp(room, self.x, self.y)
        out[room < self.x[0]] = -math.inf
        return out


def _improve(C: list[np.ndarray], L: list[np.ndarray], limit: float, best: tuple) -> tuple:
    """A feasible network made better one layer at a time while that helps (a heuristic:
    it only raises the known network that the bounds must beat)."""
    n, width = len(C), max(c.size for c in C)
    valid = np.zeros((n, width), dtype=bool)
    Cp, Lp = np.zeros((n, width)), np.full((n, width), -1e300)
    for k, (c, p) in enumerate(zip(C, L)):
        valid[k, :c.size] = True
        Cp[k, :c.size] = c
        Lp[k, :p.size] = np.where(np.isfinite(p), p, -1e300)
    rows = np.arange(n)
    logp, neg_cost, path = best
    for _ in range(10 * n * width):
        cur = np.asarray(path)
        c_now, l_now = Cp[rows, cur].sum(), Lp[rows, cur].sum()
        new_c = c_now - Cp[rows, cur][:, None] + Cp
        new_l = l_now - Lp[rows, cur][:, None] + Lp
        ok = valid & (new_c <= limit) & ((new_l > l_now) | ((new_l == l_now) & (new_c < c_now)))
        if not ok.any():
            break
        k, j = np.unravel_index(np.argmax(np.where(ok, new_l, -math.inf)), ok.shape)
        moved = list(path)
        moved[k] = int(j)
        mc, ml = _sums(C, L, moved)
        if not (mc <= limit and (ml, -mc) > (logp, neg_cost)):
            break
        logp, neg_cost, path = ml, -mc, moved
    return logp, neg_cost, path


def solve(costs: list[list[float]], logp: list[list[float]], limit: float,
          max_states: int = MAX_STATES) -> Solution:
    """One candidate per layer maximising the summed ``logp`` with summed ``costs`` <= ``limit``.

    See the module docstring for the method and why it is exact.
    """
    C, L = _check(costs, logp, limit)
    n = len(C)
    if n == 0:
        ok = 0.0 <= limit
        return Solution([] if ok else None, 0.0, 0.0, True, 0.0, 1)
    cheap = _cheapest(C, L)
    cheap_cost, cheap_logp = _sums(C, L, cheap)
    if not cheap_cost <= limit:
        return Solution(None, cheap_cost, cheap_logp, True, 0.0, 0)

    width = max(c.size for c in C)
    Cp = np.zeros((n, width))
    Lp = np.full((n, width), -math.inf)
    for k, (c, p) in enumerate(zip(C, L)):
        Cp[k, :c.size], Lp[k, :p.size] = c, p
    # bounds need a finite limit; no network costs more than the sum of the dearest candidates
    dearest = float(sum(float(c.max()) for c in C))
    bound_limit = min(limit, dearest + _SLACK * (1.0 + abs(dearest)))
    cost_slack = _SLACK * (1.0 + sum(float(np.abs(c).max()) for c in C) + abs(bound_limit))

    # a known feasible network (the incumbent), for the bounds to beat
    best = (cheap_logp, -cheap_cost, cheap)
    top = _relaxed(Cp, Lp, 0.0)
    top_cost, top_logp = _sums(C, L, top)
    if top_cost <= limit:
        best = max(best, (top_logp, -top_cost, top), key=lambda t: t[:2])
    else:
        lo, hi = 0.0, 1.0
        for _ in range(400):  # the smallest lam whose relaxed network fits
            path = _relaxed(Cp, Lp, hi)
            pc, pl = _sums(C, L, path)
            if pc <= limit:
                best = max(best, (pl, -pc, path), key=lambda t: t[:2])
                break
            lo, hi = hi, 2.0 * hi
        else:
            hi = lo = 0.0  # only networks holding a probability-0 candidate fit
        for _ in range(60 if hi > 0 else 0):
            mid = 0.5 * (lo + hi)
            path = _relaxed(Cp, Lp, mid)
            pc, pl = _sums(C, L, path)
            if pc <= limit:
                hi = mid
                best = max(best, (pl, -pc, path), key=lambda t: t[:2])
            else:
                lo = mid
    best = _improve(C, L, limit, best)
    hulls = [_hull(c, p) for c, p in zip(C, L)]
    bounds = [_Suffix(hulls[k:]) for k in range(n + 1)]
    finite_lp = sum(float(np.abs(p[np.isfinite(p)]).max(initial=0.0)) for p in L)
    lp_slack = _SLACK * (1.0 + finite_lp)
    rest_min = np.zeros(n + 1)
    for k in range(n - 1, -1, -1):
        rest_min[k] = rest_min[k + 1] + float(C[k].min())

    def run(best: tuple, cap: int) -> tuple[tuple, bool, int]:
        """The frontier program from incumbent ``best``, keeping at most ``cap`` pairs a layer:
        (the best network found or ``best``, whether no cap bound, the largest frontier)."""
        exact = True
        cost, lp = np.zeros(1), np.zeros(1)
        parents, choices = [], []
        states = 1
        for k in range(n):
            m = C[k].size
            nc = (cost[:, None] + C[k][None, :]).ravel()
            nl = (lp[:, None] + L[k][None, :]).ravel()
            idx = np.arange(nc.size)
            ok = nc + rest_min[k + 1] <= limit + cost_slack
            idx, nc, nl = idx[ok], nc[ok], nl[ok]
            order = np.lexsort((-nl, nc))  # cheapest first, the more probable first on ties
            idx, nc, nl = idx[order], nc[order], nl[order]
            keep = np.ones(nc.size, dtype=bool)
            keep[1:] = nl[1:] > np.maximum.accumulate(nl)[:-1]  # beats every cheaper pair
            idx, nc, nl = idx[keep], nc[keep], nl[keep]
            ub = nl + bounds[k + 1](bound_limit - nc + cost_slack)
            if math.isfinite(best[0]):
                keep = ub >= best[0] - lp_slack
                idx, nc, nl, ub = idx[keep], nc[keep], nl[keep], ub[keep]
            if nc.size > cap:
                exact = False
                kept = np.sort(np.argsort(-ub, kind="stable")[:cap])
                idx, nc, nl = idx[kept], nc[kept], nl[kept]
            if nc.size == 0:  # only once a cap dropped every prefix of the incumbent
                return best, exact, states
            parents.append(idx // m)
            choices.append(idx % m)
            cost, lp = nc, nl
            states = max(states, nc.size)
        fits = np.flatnonzero(cost <= limit)
        if fits.size:
            i = int(fits[-1])  # along the frontier logp rises with cost
            path = []
            for k in range(n - 1, -1, -1):
                path.append(int(choices[k][i]))
                i = int(parents[k][i])
            path.reverse()
            fc, fl = _sums(C, L, path)
            if exact or (fl, -fc) > best[:2]:
                best = (fl, -fc, path)
        return best, exact, states

    # a narrow first pass finds a network close to the best, whose log-probability then
    # lets the bounds drop most of the exact pass's partial networks
    if max_states > _PROBE:
        best, _, _ = run(best, _PROBE)
    best, exact, states = run(best, max_states)
    gap = 0.0
    if not exact:
        top_bound = float(bounds[0](np.array([bound_limit + cost_slack]))[0])
        gap = max(0.0, top_bound - best[0]) if math.isfinite(top_bound) else math.inf
    return Solution(list(best[2]), -best[1], best[0], exact, gap, states)


def best_path(costs: list[list[float]], logp: list[list[float]], limit: float) -> list[int] | None:
    """Per layer the index of one candidate, maximising the summed ``logp`` subject to the
    summed ``costs`` being at most ``limit``; None if even the cheapest path exceeds it.

    Exact for any float costs (see the module docstring). Ties go to the higher
    log-probability, then the lower cost, then deterministically by candidate order.
    ``logp`` may hold -inf (probability 0): such candidates are used only if nothing else
    fits. Sums are taken layer by layer in order, so a path's cost is compared with
    ``limit`` exactly as ``sum`` over its costs would be.
    """
    return solve(costs, logp, limit).path


def raw_limit(lut, budget_us: float) -> float:
    """The largest raw table sum (stem + head + ops) whose prediction is at most ``budget_us``.

    ``LUT.predict`` is ``a * sum + b`` with a calibration (``a > 0``), else the sum itself;
    both are monotone in the sum, also after rounding, so "prediction <= budget" is exactly
    "sum <= this limit". The limit starts at (budget - b) / a and is moved by single floats
    until it is the last sum that fits.
    """
    cal = lut.calibration
    if cal is None:
        return float(budget_us)
    a, b = cal
    if not (math.isfinite(a) and a > 0):
        where = f"lookup table {lut.path}" if lut.path else "the lookup table"
        raise FbnasError(f"{where} has calibration a = {a!r}; a latency budget needs a > 0 "
                         "(re-run fbnas calibrate --force)")

    def fits(x: float) -> bool:
        return a * x + b <= budget_us

    t = (budget_us - b) / a
    for _ in range(10_000):
        if fits(t):
            break
        t = math.nextafter(t, -math.inf)
    for _ in range(10_000):
        up = math.nextafter(t, math.inf)
        if not fits(up):
            break
        t = up
    return t


def _layer_costs(lut, space) -> list[list[float]]:
    """Per layer of ``space`` the table cost of each candidate, in the space's order."""
    return [[lut.cost(row["candidates"][op]) for op in layer.candidates]
            for layer, row in zip(space.layers, lut.data["layers"])]


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -math.inf


def _ms(us: float) -> str:
    """A budget in ms, rounded up to the microsecond, that a network costing ``us`` fits."""
    text = f"{math.ceil(us) / 1000:.3f}"
    while float(text) * 1000.0 < us:
        text = f"{float(text) + 0.001:.3f}"
    return text


def ops_under_budget(lut, space, probs, budget_us: float, warn: Warn = warn_stderr) -> list[str]:
    """The most probable architecture under ``probs`` (per layer, softmax(theta) in the space's
    candidate order) whose ``lut.predict`` is at most ``budget_us``, as op names.

    Raises FbnasError when even the fastest architecture of the space is predicted above the
    budget, naming that minimum. ``budget_us`` is a checked budget's ``Budget.us``
    (fbnas.config.Budget).
    """
    costs = _layer_costs(lut, space)
    if costs:
        # fold the stem and head into the first layer: the sums then run in raw_sum's order,
        # float for float, so comparing them with raw_limit is comparing the predictions
        fixed = lut.fixed_cost()
        costs[0] = [fixed + c for c in costs[0]]
    logp = [[_log(float(x)) for x in p] for p in probs]
    limit = raw_limit(lut, budget_us)
    for _ in range(8):
        sol = solve(costs, logp, limit)
        if sol.path is None:
            fastest = [layer.candidates[j] for layer, j in
                       zip(space.layers, _cheapest([np.asarray(c) for c in costs],
                                                   [np.asarray(p) for p in logp]))]
            low = lut.predict(fastest)
            how = "calibrated prediction" if lut.calibration else "table sum"
            raise FbnasError(f"a budget of {budget_us / 1000:g} ms is below the fastest "
                             f"architecture of space {space.name}, {low / 1000:.4f} ms ({how}); "
                             f"ask for at least {_ms(low)} ms")
        ops = [layer.candidates[j] for layer, j in zip(space.layers, sol.path)]
        if lut.predict(ops) <= budget_us:
            break
        limit = math.nextafter(limit, -math.inf)  # never needed while the sums agree
    else:
        raise FbnasError(f"found no architecture predicted within {budget_us / 1000:g} ms")
    if not sol.exact:
        warn(f"the latency budget problem has too many near-tied partial architectures "
             f"(over {MAX_STATES}) to prove the best one; the sampled one is within a factor "
             f"{math.exp(min(sol.gap, 700.0)):.6g} of the most probable architecture's "
             "probability")
    return ops


#: cells of the latency grid :func:`ops_in_window` solves on
WINDOW_CELLS = 20_000


def ops_in_window(lut, space, probs, budget_us: float, floor: float,
                  warn: Warn = warn_stderr) -> list[str]:
    """The most probable architecture whose ``lut.predict`` spends between ``floor`` times the
    budget and the budget; where no architecture of the space reaches the floor, the most
    probable one within the budget (:func:`ops_under_budget`).

    Why a floor: the most accurate network within a budget nearly always spends most of it
    (on NAS-Bench-Macro the best network under each of four budgets spends 91 to 99%), but
    while theta is undecided the most probable network within the budget can be a near-tie of
    cheap candidates far under it (the demo once ended 18% under). A floor turns the budget
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
    costs = _layer_costs(lut, space)
    fixed = lut.fixed_cost()
    high = raw_limit(lut, budget_us) - fixed
    a, b = lut.calibration or (1.0, 0.0)
    low = (floor * budget_us - b) / a - fixed
    cell = high / WINDOW_CELLS
    margin = 0.5 * len(costs) * cell
    lo_cell, hi_cell = math.ceil((low + margin) / cell), math.floor((high - margin) / cell)
    if lo_cell > hi_cell:
        return plain
    best = np.full(hi_cell + 1, -np.inf)
    best[0] = 0.0
    choice = []
    for c, p in zip(costs, probs):
        w = [int(round(x / cell)) for x in c]
        # probability 0 as a large finite penalty: such candidates stay usable when nothing
        # else reaches the window (as ops_under_budget allows), while -inf marks unreachable
        lp = [math.log(float(x)) if x > 0 else -1e9 for x in p]
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


#: top_in_window's grid keeps this many times the networks asked for, so that the list is
#: still full after equivalent networks are dropped
POOL = 4
#: the most memory top_in_window's grid may take; more is refused before it starts
WINDOW_MEMORY = 3 * 2**30


def window_list_bytes(space, k: int) -> int:
    """About the peak memory of :func:`top_in_window` listing ``k`` networks of ``space``:
    per latency cell and kept partial network, a float, its sort index and a temporary for
    each candidate of a layer, the kept scores, and a 4-byte back-pointer per layer. Measured
    (the process's peak less its size before): 2.6 GiB for 256 networks of nasbench_macro
    (2.4 estimated), 1.0 GiB for 32 of fbnet_cifar (0.8 estimated)."""
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
    the slowest network, which pushes every layer toward its slowest candidate."""
    if k > 1:
        check_window_list(space, k, knob)
    costs = lut.layer_costs()
    uniform = [np.full(len(c), 1.0 / len(c)) for c in costs]
    ops_under_budget(lut, space, uniform, budget_us, warn)  # raises below the minimum
    names = lut.layer_candidates()
    slowest = lut.predict([n[int(np.argmax(c))] for n, c in zip(names, costs)])
    if budget_us > slowest:
        warn(f"the budget {_ms(budget_us)} ms is above the slowest network of {space.name} "
             f"({_ms(slowest)} ms predicted): every layer is pushed toward its slowest "
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
    costs = _layer_costs(lut, space)
    fixed = lut.fixed_cost()
    high = raw_limit(lut, budget_us) - fixed
    a, b = lut.calibration or (1.0, 0.0)
    cell = high / WINDOW_CELLS
    margin = 0.5 * len(costs) * cell
    hi_cell = math.floor((high - margin) / cell)
    lo_cell = max(0, math.ceil(((floor * budget_us - b) / a - fixed + margin) / cell))
    if floor <= 0 or lo_cell > hi_cell or lut.predict(first) < floor * budget_us:
        lo_cell = 0  # nothing reaches the floor: as ops_in_window, the whole budget
    n = hi_cell + 1
    best = np.full((n, pool), -np.inf)
    best[0, 0] = 0.0
    steps = []
    for c, p in zip(costs, probs):
        w = [int(round(x / cell)) for x in c]
        lp = [math.log(float(x)) if x > 0 else -1e9 for x in p]
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
    accuracy). Without this key the one-shot check's 8 networks held such pairs in 9 of 12
    NAS-Bench-Macro searches, and compared fewer networks than it was asked to.
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
