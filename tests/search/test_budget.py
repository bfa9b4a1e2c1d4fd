"""The most probable architecture within a latency budget, checked against brute force."""

from __future__ import annotations

import copy
import itertools
import json
import math

import numpy as np
import pytest

from fbnas.arch.space import load_space
from fbnas.errors import FbnasError
from fbnas.io import read_json, write_json
from fbnas.latency.lut import LUT, load_lut
from fbnas.search.checkpoint import load_search_checkpoint
from fbnas.search.budget import best_path, ops_under_budget, raw_limit, solve
from fbnas.search.window import ops_in_window
from tests.conftest import REPO
from tests.arch.test_arch import assert_user_error, cli, make_run, peaked_theta

TINY = REPO / "lookup_tables" / "tiny.json"


@pytest.fixture(scope="module")
def space():
    return load_space("tiny")


def table(calibration: dict | None) -> LUT:
    """The shipped tiny table with ``calibration`` (None: uncalibrated), as this machine's."""
    data = copy.deepcopy(read_json(TINY, "lookup table"))
    data["environment"].pop("cpu", None)  # no "another machine" warning
    data.pop("calibration", None)
    if calibration is not None:
        data["calibration"] = {**calibration, "form": "measured_us = a * table_sum_us + b"}
    return LUT(data)


TABLES = {"raw": None, "shipped": read_json(TINY, "lookup table")["calibration"],
          "steep": {"a": 1.7, "b": -35.25}, "flat": {"a": 0.31, "b": 40.0}}


def thetas(space) -> dict[str, list[np.ndarray]]:
    """Per layer probabilities in the space's candidate order."""
    rng = np.random.default_rng(7)
    sizes = [len(layer.candidates) for layer in space.layers]

    def softmax(v):
        e = np.exp(v - v.max())
        return e / e.sum()

    out = {"uniform": [np.full(k, 1.0 / k) for k in sizes],
           "sharp": [softmax(12.0 * rng.normal(size=k)) for k in sizes],
           "random": [softmax(rng.normal(size=k)) for k in sizes]}
    zero = []
    for p in out["random"]:
        p = p.copy()
        p[rng.random(p.size) < 0.4] = 0.0
        p[0] = 0.0  # and certainly some
        zero.append(p / p.sum() if p.sum() > 0 else np.eye(p.size)[1])
    out["zero"] = zero
    # probability 0 on every layer's cheapest candidate, which the fastest network needs
    lut = table(None)
    cheapest = []
    for layer, p in zip(space.layers, out["random"]):
        row = lut.data["layers"][layer.index]["candidates"]
        c = [lut.cost(row[op]) for op in layer.candidates]
        p = p.copy()
        p[int(np.argmin(c))] = 0.0
        cheapest.append(p / p.sum())
    out["cheapest_zero"] = cheapest
    return out


def logp_of(space, probs, ops) -> float:
    """The log-probability summed layer by layer, as the budget search sums it."""
    total = 0.0
    for layer, p, op in zip(space.layers, probs, ops):
        x = float(p[layer.candidates.index(op)])
        total += math.log(x) if x > 0 else -math.inf
    return total


def every_architecture(space) -> list[list[str]]:
    return [list(ops) for ops in itertools.product(*(l.candidates for l in space.layers))]


def budgets(lut, archs) -> list[float]:
    """Budgets across the range: exactly some networks' latency (boundary ties), one float
    either side of it, and between two networks."""
    lat = sorted(set(lut.predict(ops) for ops in archs))
    picks = [lat[0], lat[1], lat[7], lat[len(lat) // 4], lat[len(lat) // 2],
             lat[3 * len(lat) // 4], lat[-1]]
    out = list(picks)
    out += [math.nextafter(lat[len(lat) // 3], math.inf),
            math.nextafter(lat[2 * len(lat) // 3], -math.inf),
            0.5 * (lat[5] + lat[6]), lat[-1] * 10]
    return out


@pytest.mark.parametrize("tname", list(TABLES))
def test_ops_under_budget_matches_brute_force_over_every_architecture(space, tname):
    lut = table(TABLES[tname])
    archs = every_architecture(space)
    assert len(archs) == 5 ** 4
    pred = [lut.predict(ops) for ops in archs]
    for theta_name, probs in thetas(space).items():
        lp = [logp_of(space, probs, ops) for ops in archs]
        for budget in budgets(lut, archs):
            ops = ops_under_budget(lut, space, probs, budget)
            assert lut.predict(ops) <= budget, (tname, theta_name, budget)
            best = max((lp[i], -pred[i]) for i in range(len(archs)) if pred[i] <= budget)
            got = (logp_of(space, probs, ops), -lut.predict(ops))
            assert got == best, (tname, theta_name, budget, ops)


@pytest.mark.parametrize("tname", ["steep", "flat", "shipped"])
def test_a_budget_equal_to_a_networks_prediction_admits_it(space, tname):
    """Boundary ties: the budget is exactly some network's prediction, for many networks."""
    lut = table(TABLES[tname])
    archs = every_architecture(space)
    pred = [lut.predict(ops) for ops in archs]
    # log-probability rising with latency at the same rate in every layer: the most probable
    # network within a budget is the slowest that fits, here the one whose prediction it is
    slow = []
    for layer in space.layers:
        row = lut.data["layers"][layer.index]["candidates"]
        e = np.exp(0.01 * np.array([lut.cost(row[op]) for op in layer.candidates]))
        slow.append(e / e.sum())
    rng = np.random.default_rng(11)
    for probs in (slow, thetas(space)["random"]):
        lp = [logp_of(space, probs, ops) for ops in archs]
        for i in rng.choice(len(archs), 80, replace=False):
            ops = ops_under_budget(lut, space, probs, pred[i])
            assert lut.predict(ops) <= pred[i]
            best = max((lp[j], -pred[j]) for j in range(len(archs)) if pred[j] <= pred[i])
            assert (logp_of(space, probs, ops), -lut.predict(ops)) == best
            assert best >= (lp[i], -pred[i])
            if probs is slow:
                assert lut.predict(ops) == pred[i]


@pytest.mark.parametrize("tname", list(TABLES))
def test_raw_limit_is_the_last_table_sum_that_fits(tname):
    lut = table(TABLES[tname])
    a, b = lut.calibration or (1.0, 0.0)
    rng = np.random.default_rng(5)
    for total in rng.uniform(30.0, 3000.0, 2000):
        budget = a * float(total) + b
        t = raw_limit(lut, budget)
        assert a * t + b <= budget and t >= total
        assert a * math.nextafter(t, math.inf) + b > budget


def test_uniform_theta_gives_the_fastest_and_a_loose_budget_the_argmax(space):
    lut = table(TABLES["shipped"])
    probs = thetas(space)
    archs = every_architecture(space)
    fastest = min(archs, key=lut.predict)
    top = max(lut.predict(ops) for ops in archs)
    # every network is equally likely: the tie goes to the faster one
    assert ops_under_budget(lut, space, probs["uniform"], top) == fastest
    argmax = [l.candidates[int(np.argmax(p))] for l, p in zip(space.layers, probs["random"])]
    assert ops_under_budget(lut, space, probs["random"], top) == argmax


def test_probability_zero_candidates_are_used_when_nothing_else_fits(space):
    lut = table(TABLES["shipped"])
    probs = thetas(space)["cheapest_zero"]
    archs = every_architecture(space)
    fastest = min(archs, key=lut.predict)
    assert ops_under_budget(lut, space, probs, lut.predict(fastest)) == fastest
    assert logp_of(space, probs, fastest) == -math.inf


def test_best_path_matches_brute_force_on_raw_costs(space):
    lut = table(None)
    costs = [[lut.cost(lut.data["layers"][l.index]["candidates"][op]) for op in l.candidates]
             for l in space.layers]
    paths = list(itertools.product(*(range(len(c)) for c in costs)))

    def sums(path, logp):
        c = l = 0.0
        for k, j in enumerate(path):
            c += costs[k][j]
            l += logp[k][j]
        return c, l

    for name, probs in thetas(space).items():
        logp = [[math.log(x) if x > 0 else -math.inf for x in p] for p in probs]
        totals = sorted(set(sums(p, logp)[0] for p in paths))
        assert best_path(costs, logp, math.nextafter(totals[0], -math.inf)) is None
        for limit in [totals[0], totals[3], totals[len(totals) // 2], totals[-1],
                      0.5 * (totals[10] + totals[11]), math.inf]:
            path = best_path(costs, logp, limit)
            c, l = sums(path, logp)
            assert c <= limit
            assert (l, -c) == max((sums(p, logp)[1], -sums(p, logp)[0]) for p in paths
                                  if sums(p, logp)[0] <= limit), (name, limit)


def test_a_capped_frontier_still_fits_and_bounds_its_loss():
    """With a frontier of one pair the answer is not proven best, but it fits and the best
    is at most ``gap`` more probable (in log-probability)."""
    rng = np.random.default_rng(3)
    capped = 0
    for _ in range(200):
        costs = [list(rng.uniform(1, 10, 4)) for _ in range(4)]
        logp = [list(rng.normal(size=4) + 0.4 * np.asarray(c)) for c in costs]
        limit = float(rng.uniform(sum(map(min, costs)), sum(map(max, costs))))
        sol = solve(costs, logp, limit, max_states=1)
        paths = itertools.product(*(range(4) for _ in costs))
        best = max(sum(logp[k][j] for k, j in enumerate(p)) for p in paths
                   if sum(costs[k][j] for k, j in enumerate(p)) <= limit)
        assert sol.cost <= limit
        assert best <= sol.logp + sol.gap + 1e-9
        capped += not sol.exact
    assert capped > 0


def test_below_the_fastest_network_is_an_error_naming_the_minimum(space):
    lut = table(TABLES["shipped"])
    probs = thetas(space)["random"]
    low = min(lut.predict(ops) for ops in every_architecture(space))
    with pytest.raises(FbnasError) as e:
        ops_under_budget(lut, space, probs, math.nextafter(low, 0.0))
    msg = str(e.value)
    assert "\n" not in msg and f"{low / 1000:.4f} ms" in msg and "at least" in msg
    ask = float(msg.split("at least ")[1].split()[0])
    assert lut.predict(ops_under_budget(lut, space, probs, ask * 1000.0)) <= ask * 1000.0


def test_a_calibration_without_positive_slope_is_refused(space):
    lut = table(TABLES["shipped"])
    lut.data["calibration"]["a"] = 0.0
    with pytest.raises(FbnasError, match="a latency budget needs a > 0"):
        raw_limit(lut, 100.0)
    with pytest.raises(FbnasError):
        ops_under_budget(lut, space, thetas(space)["random"], 100.0)


def test_fbnet_cifar_budgets_are_solved_exactly():
    """Real thetas on the real table stay well inside the frontier cap: the answer is proven
    optimal (no warning) and within the budget."""
    lut = load_lut(REPO / "lookup_tables" / "fbnet_cifar_ort.json")
    space = lut.space()
    rng = np.random.default_rng(0)
    cheapest = lut.predict([min(l.candidates, key=lambda op, l=l: lut.cost(
        lut.data["layers"][l.index]["candidates"][op])) for l in space.layers])
    warnings = []
    for scale in (0.3, 1.0, 4.0):
        probs = [np.exp(scale * rng.normal(size=len(l.candidates))) for l in space.layers]
        probs = [p / p.sum() for p in probs]
        for factor in (1.0, 1.5, 3.0, 6.0):
            ops = ops_under_budget(lut, space, probs, cheapest * factor, warn=warnings.append)
            assert lut.predict(ops) <= cheapest * factor
    assert warnings == []


# --------------------------------------------------------------------------- fbnas sample


def budget_run(tmp_path, space, config=None, prefer="k3_e3", **overrides):
    """A search run folder (the checkpoint contract, no training) over a copy of the shipped
    tiny table, with theta preferring ``prefer`` (the slow k3_e3) everywhere."""
    data = read_json(TINY, "lookup table")
    data["environment"].pop("cpu", None)
    lut_path = tmp_path / "tiny.json"
    write_json(lut_path, data)
    theta = peaked_theta(space, [prefer] * len(space.layers))
    return make_run(tmp_path, space, lut_path, theta=theta, config=config or {},
                    **overrides), lut_path


def test_sample_hard_target_ms_writes_the_best_entry_within_budget(tmp_path, space):
    run, lut_path = budget_run(tmp_path, space)
    lut = load_lut(lut_path)
    argmax = ["k3_e3"] * len(space.layers)
    target_ms = round(0.8 * lut.predict(argmax) / 1000, 3)
    res = cli("sample", run, "--hard", "--target-ms", target_ms)
    assert res.exit_code == 0, res.output
    entry = read_json(run / "arch.json", "arch")["architectures"]["search_hard"]
    ops = [b["op"] for b in entry["blocks"]]
    assert entry["sampling"] == {"method": "argmax_under_budget", "target_ms": target_ms}
    assert lut.predict(ops) <= target_ms * 1000 and ops != argmax
    assert entry["predicted"]["latency_us"] <= target_ms * 1000 + 1e-3
    probs = load_search_checkpoint(run).probs
    assert ops == ops_under_budget(lut, space, probs, target_ms * 1000)
    assert "p max" in res.stdout and f"within {target_ms:g} ms" in res.stdout
    # too small a budget: one line naming the least budget, nothing written
    before = (run / "arch.json").read_bytes()
    res = cli("sample", run, "--hard", "--target-ms", 0.001, "--name", "x")
    assert_user_error(res, "below the fastest architecture of space tiny", "ask for at least")
    assert res.exit_code == 1 and (run / "arch.json").read_bytes() == before
    assert_user_error(cli("sample", run, "--target-ms", 1), "add --hard")
    assert cli("sample", run, "--target-ms", 1).exit_code == 2
    for bad in ("inf", "nan"):
        res = cli("sample", run, "--hard", "--target-ms", bad)
        assert res.exit_code == 2 and "finite" in res.output
    assert cli("sample", run, "--hard", "--target-ms", 0).exit_code == 2


def test_sample_hard_uses_the_searchs_budget_unless_told_otherwise(tmp_path, space):
    lut = load_lut(TINY)
    loose = round(lut.predict(["k3_e3"] * len(space.layers)) / 1000 * 2, 3)
    tight = round(0.7 * loose / 2, 3)
    cfg = {"loss": {"form": "target", "target_ms": tight}, "search": {"cost": "latency"}}
    run, _ = budget_run(tmp_path, space, config=cfg)
    res = cli("sample", run, "--hard")
    assert res.exit_code == 0, res.output
    assert f"latency budget of {tight:g} ms" in res.stdout
    archs = read_json(run / "arch.json", "arch")["architectures"]
    assert archs["search_hard"]["sampling"]["target_ms"] == tight
    res = cli("sample", run, "--hard", "--target-ms", loose, "--name", "loose")
    assert res.exit_code == 0, res.output
    assert "latency budget of" not in res.stdout
    archs = read_json(run / "arch.json", "arch")["architectures"]
    assert archs["loose"]["sampling"] == {"method": "argmax_under_budget", "target_ms": loose}
    assert [b["op"] for b in archs["loose"]["blocks"]] == ["k3_e3"] * len(space.layers)
    # a search without a budget keeps plain argmax
    (tmp_path / "plain").mkdir()
    plain, _ = budget_run(tmp_path / "plain", space, config={"loss": {"form": "paper"}})
    assert cli("sample", plain, "--hard").exit_code == 0
    entry = json.loads((plain / "arch.json").read_text())["architectures"]["search_hard"]
    assert entry["sampling"] == {"method": "argmax"}


def window_setting(space, tname):
    """(table, every architecture of the space, each one's predicted latency)."""
    lut = table(TABLES[tname])
    archs = every_architecture(space)
    return lut, archs, [lut.predict(ops) for ops in archs]


def window_thetas(space, archs):
    """(name, probabilities, every architecture's log-probability) of each test theta."""
    for theta_name, probs in thetas(space).items():
        yield theta_name, probs, [logp_of(space, probs, ops) for ops in archs]


@pytest.mark.parametrize("tname", list(TABLES))
def test_ops_in_window_is_the_most_probable_network_that_spends_the_budget(space, tname):
    """Against brute force: inside [floor * T, T] wherever a network of the space is, and
    no network there more probable by more than a grid cell's rounding can explain; where
    none reaches the floor, the plain rule under T."""
    lut, archs, pred = window_setting(space, tname)
    for theta_name, probs, lp in window_thetas(space, archs):
        for budget in budgets(lut, archs)[1:-1]:
            for floor in (0.5, 0.9):
                ops = ops_in_window(lut, space, probs, budget, floor)
                plain = ops_under_budget(lut, space, probs, budget)
                inside = floor * budget <= lut.predict(ops) <= budget
                # the grid may miss networks within its margin of the window's edges only
                margin = 0.5 * len(space.layers) * budget / 20_000 * 3
                clear = [i for i in range(len(archs))
                         if floor * budget + margin <= pred[i] <= budget - margin]
                if clear:
                    assert inside, (tname, theta_name, budget, floor)
                    assert logp_of(space, probs, ops) >= max(lp[i] for i in clear) - 1e-9, (
                        tname, theta_name, budget, floor)
                else:
                    assert inside or ops == plain
    # floor 0 is the plain rule
    probs = thetas(space)["random"]
    mid = sorted(pred)[len(pred) // 2]
    assert ops_in_window(lut, space, probs, mid, 0.0) == ops_under_budget(lut, space, probs, mid)


def test_sample_hard_spends_the_searchs_floor_of_its_budget(tmp_path, space):
    """A search saved with loss.target_floor returns a network spending at least that share
    of its budget, even where theta prefers one far under it; --floor 0 returns that one."""
    lut = load_lut(TINY)
    one_block = ["k3_e1"] + ["skip"] * (len(space.layers) - 1)
    budget = round(1.02 * lut.predict(one_block) / 1000, 4)  # far above all-skip
    cfg = {"loss": {"form": "target", "target_ms": budget, "target_floor": 0.9},
           "search": {"cost": "latency"}}
    run, _ = budget_run(tmp_path, space, config=cfg, prefer="skip")
    res = cli("sample", run, "--hard")
    assert res.exit_code == 0, res.output
    entry = read_json(run / "arch.json", "arch")["architectures"]["search_hard"]
    ops = [b["op"] for b in entry["blocks"]]
    assert entry["sampling"]["floor"] == 0.9
    assert f"within {budget:g} ms and at least {0.9 * budget:g} ms" in res.stdout
    assert 0.9 * budget * 1000 <= lut.predict(ops) <= budget * 1000
    res = cli("sample", run, "--hard", "--floor", 0, "--name", "under")
    assert res.exit_code == 0, res.output
    under = read_json(run / "arch.json", "arch")["architectures"]["under"]
    assert [b["op"] for b in under["blocks"]] == ["skip"] * len(space.layers)
    assert "floor" not in under["sampling"]
    for bad in ("1", "-0.1"):
        assert cli("sample", run, "--hard", "--floor", bad).exit_code == 2
    (tmp_path / "plain").mkdir()
    plain, _ = budget_run(tmp_path / "plain", space, config={"loss": {"form": "paper"}})
    assert_user_error(cli("sample", plain, "--hard", "--floor", 0.5), "--floor is a share")


def test_how_decided_each_layer_is():
    from fbnas.search.pictures import relative_entropy, theta_heatmap

    assert relative_entropy([1.0, 0.0, 0.0]) == 0.0
    assert relative_entropy([0.25] * 4) == pytest.approx(1.0)
    assert 0.0 < relative_entropy([0.7, 0.2, 0.1]) < 1.0
    assert relative_entropy([1.0]) == 0.0
    fig = theta_heatmap([[0.9, 0.1], [0.5, 0.5]], [["a", "b"], ["a", "b"]])
    entropy = fig.axes[0].child_axes[0]  # printed right of each row
    assert [t.get_text() for t in entropy.get_yticklabels()] == ["0.47", "1.00"]


@pytest.mark.parametrize("tname", ["shipped", "steep"])
def test_top_in_window_lists_the_most_probable_networks_that_spend_the_budget(space, tname):
    """Against brute force: distinct networks inside the window, the first ops_in_window's,
    and the i-th at least as probable as the i-th most probable network clear of the grid's
    margins; where none reaches the floor, networks under the budget."""
    from fbnas.search.window import top_in_window

    lut, archs, pred = window_setting(space, tname)
    for theta_name, probs, lp in window_thetas(space, archs):
        for budget in budgets(lut, archs)[2:-1]:
            for floor in (0.0, 0.9):
                got = top_in_window(lut, space, probs, budget, floor, 5)
                assert got[0] == ops_in_window(lut, space, probs, budget, floor)
                assert len({tuple(o) for o in got}) == len(got)
                assert all(lut.predict(o) <= budget for o in got)
                margin = 0.5 * len(space.layers) * budget / 20_000 * 3
                clear = sorted((lp[i] for i in range(len(archs))
                                if floor * budget + margin <= pred[i] <= budget - margin),
                               reverse=True)
                if floor and clear:
                    assert all(lut.predict(o) >= floor * budget for o in got)
                mine = [logp_of(space, probs, o) for o in got]
                for i, want in enumerate(clear[:5]):
                    assert i < len(mine) and mine[i] >= want - 1e-9, (theta_name, budget, floor)


def test_sample_hard_returns_the_searchs_one_shot_pick_at_its_budget(tmp_path, space):
    """A search that recorded its last-epoch one-shot pick (search.rerank) is sampled as that
    network at its own budget and floor; another budget or floor decides by theta again."""
    lut = load_lut(TINY)
    loose = round(lut.predict(["k3_e3"] * len(space.layers)) / 1000 * 1.01, 3)
    pick = ["k3_e1"] + ["k3_e3"] * (len(space.layers) - 1)
    cfg = {"loss": {"form": "target", "target_ms": loose, "target_floor": 0.0},
           "search": {"cost": "latency"}}
    decision = {"ops": pick, "rank": 1, "candidates": [
        {"ops": ["k3_e3"] * len(space.layers), "val_top1": 10.0}, {"ops": pick, "val_top1": 12.0}]}
    run, _ = budget_run(tmp_path, space, config=cfg, decision=decision)
    res = cli("sample", run, "--hard")
    assert res.exit_code == 0, res.output
    assert "the best by one-shot (the search's last-epoch check) of the 2 architectures it " \
           "checked, #2 of them, predicted within" in res.stdout
    entry = read_json(run / "arch.json", "arch")["architectures"]["search_hard"]
    assert [b["op"] for b in entry["blocks"]] == pick
    assert entry["sampling"]["method"] == "one_shot_rerank"
    assert entry["sampling"]["by"] == "top1"
    # a check by other figures names them, as the search's epoch line does
    naswot_run, _ = budget_run(tmp_path / "naswot", space, config={
        **cfg, "search": {"cost": "latency", "rerank_by": "naswot_and_theta"}},
        decision=decision)
    res = cli("sample", naswot_run, "--hard")
    assert res.exit_code == 0, res.output
    assert "the best by NASWOT and theta (the search's last-epoch check) of the 2 " \
           "architectures it checked, #2 of them" in res.stdout
    res = cli("sample", run, "--hard", "--floor", 0.5, "--name", "other")
    assert res.exit_code == 0, res.output
    other = read_json(run / "arch.json", "arch")["architectures"]["other"]
    assert [b["op"] for b in other["blocks"]] == ["k3_e3"] * len(space.layers)
    assert other["sampling"]["method"] == "argmax_under_budget"


def test_per_layer_alternatives_are_the_most_probable_networks_using_each_candidate(space):
    """Against brute force: for each layer and candidate, a network in the window using that
    candidate there, as probable as the most probable such network clear of the grid's
    margins (where one has a probability above 0); the check's list holds theta's
    k networks first and every alternative as a distinct network after them."""
    from fbnas.search.window import same_network
    from fbnas.search.oneshot_check import checked_networks, per_layer_alternatives

    lut, archs, pred = window_setting(space, "shipped")
    for theta_name, probs, lp in window_thetas(space, archs):
        for budget in budgets(lut, archs)[3:-2]:
            floor = 0.9
            margin = 0.5 * len(space.layers) * budget / 20_000 * 3
            clear = [i for i in range(len(archs))
                     if floor * budget + margin <= pred[i] <= budget - margin]
            if not clear:
                continue
            got = per_layer_alternatives(lut, space, probs, budget, floor)
            assert all(floor * budget <= lut.predict(o) <= budget for o in got)
            for li, layer in enumerate(space.layers):
                for op in layer.candidates:
                    using = [lp[i] for i in clear if archs[i][li] == op and lp[i] > -math.inf]
                    mine = [logp_of(space, probs, o) for o in got if o[li] == op]
                    if using:
                        assert mine and max(mine) >= max(using) - 1e-9, (theta_name, budget)
            listed = checked_networks(lut, space, probs, budget, floor, 4, alternatives=True)
            top = checked_networks(lut, space, probs, budget, floor, 4)
            assert listed[:len(top)] == top
            keys = [same_network(space, o) for o in listed]
            assert len(set(keys)) == len(keys)
            assert {same_network(space, o) for o in got} <= set(keys)
