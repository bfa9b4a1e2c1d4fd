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
from dataclasses import dataclass

import numpy as np

from fbnas.errors import FbnasError, Warn, brief, warn_stderr

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
    best = _incumbent(C, L, limit, (cheap_logp, -cheap_cost, cheap))
    best = _improve(C, L, limit, best)
    frontier = _Frontier(C, L, limit)
    # a narrow first pass finds a network close to the best, whose log-probability then
    # lets the bounds drop most of the exact pass's partial networks
    if max_states > _PROBE:
        best, _, _ = frontier.run(best, _PROBE)
    best, exact, states = frontier.run(best, max_states)
    gap = 0.0 if exact else frontier.gap(best)
    return Solution(list(best[2]), -best[1], best[0], exact, gap, states)


def _incumbent(C: list[np.ndarray], L: list[np.ndarray], limit: float, best: tuple) -> tuple:
    """A known feasible network (logp, -cost, path) for the frontier's bounds to beat: the
    better of ``best`` and the relaxed (Lagrangian) networks that fit, found by doubling the
    price of latency until one fits and then bisecting it to the smallest price that fits."""
    n, width = len(C), max(c.size for c in C)
    Cp = np.zeros((n, width))
    Lp = np.full((n, width), -math.inf)
    for k, (c, p) in enumerate(zip(C, L)):
        Cp[k, :c.size], Lp[k, :p.size] = c, p
    top = _relaxed(Cp, Lp, 0.0)
    top_cost, top_logp = _sums(C, L, top)
    if top_cost <= limit:
        return max(best, (top_logp, -top_cost, top), key=lambda t: t[:2])
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
    return best


class _Frontier:
    """The exact program over layers: per layer the Pareto frontier of (cost, logp) of the
    partial networks, pruned by what the rest of the layers can still add (``_Suffix``
    bounds) against a known network. Built once, run twice (a narrow pass, then the full
    one), so the bounds and slacks are computed here."""

    def __init__(self, C: list[np.ndarray], L: list[np.ndarray], limit: float):
        self.C, self.L, self.limit, n = C, L, limit, len(C)
        # bounds need a finite limit; no network costs more than the sum of the dearest
        # candidates
        dearest = float(sum(float(c.max()) for c in C))
        self.bound_limit = min(limit, dearest + _SLACK * (1.0 + abs(dearest)))
        self.cost_slack = _SLACK * (1.0 + sum(float(np.abs(c).max()) for c in C)
                                    + abs(self.bound_limit))
        hulls = [_hull(c, p) for c, p in zip(C, L)]
        self.bounds = [_Suffix(hulls[k:]) for k in range(n + 1)]
        finite_lp = sum(float(np.abs(p[np.isfinite(p)]).max(initial=0.0)) for p in L)
        self.lp_slack = _SLACK * (1.0 + finite_lp)
        self.rest_min = np.zeros(n + 1)
        for k in range(n - 1, -1, -1):
            self.rest_min[k] = self.rest_min[k + 1] + float(C[k].min())

    def run(self, best: tuple, cap: int) -> tuple[tuple, bool, int]:
        """The frontier program from incumbent ``best``, keeping at most ``cap`` pairs a layer:
        (the best network found or ``best``, whether no cap bound, the largest frontier)."""
        C, L, limit, n = self.C, self.L, self.limit, len(self.C)
        exact = True
        cost, lp = np.zeros(1), np.zeros(1)
        parents, choices = [], []
        states = 1
        for k in range(n):
            m = C[k].size
            nc = (cost[:, None] + C[k][None, :]).ravel()
            nl = (lp[:, None] + L[k][None, :]).ravel()
            idx = np.arange(nc.size)
            ok = nc + self.rest_min[k + 1] <= limit + self.cost_slack
            idx, nc, nl = idx[ok], nc[ok], nl[ok]
            order = np.lexsort((-nl, nc))  # cheapest first, the more probable first on ties
            idx, nc, nl = idx[order], nc[order], nl[order]
            keep = np.ones(nc.size, dtype=bool)
            keep[1:] = nl[1:] > np.maximum.accumulate(nl)[:-1]  # beats every cheaper pair
            idx, nc, nl = idx[keep], nc[keep], nl[keep]
            ub = nl + self.bounds[k + 1](self.bound_limit - nc + self.cost_slack)
            if math.isfinite(best[0]):
                keep = ub >= best[0] - self.lp_slack
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

    def gap(self, best: tuple) -> float:
        """How much more log-probability than ``best`` the bound still allows, when a capped
        run could not prove ``best`` optimal."""
        top_bound = float(self.bounds[0](np.array([self.bound_limit + self.cost_slack]))[0])
        return max(0.0, top_bound - best[0]) if math.isfinite(top_bound) else math.inf


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
        raise FbnasError(f"{where} has calibration a = {brief(a)}; a latency budget needs a > 0 "
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


def layer_costs(lut, space) -> list[list[float]]:
    """Per layer of ``space`` the table cost of each candidate, in the space's order."""
    return [[lut.cost(row["candidates"][op]) for op in layer.candidates]
            for layer, row in zip(space.layers, lut.data["layers"])]


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -math.inf


def ms_that_fits(us: float) -> str:
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
    costs = layer_costs(lut, space)
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
                             f"ask for at least {ms_that_fits(low)} ms")
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
