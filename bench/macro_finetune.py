"""Does training the shared weights on the check's shortlist rank it better? (bench_macro.py
finetune RUN..., then ``report --protocol finetune``)

Why: within the 16 networks a budget search's check scores one-shot, the best of them is
usually as good as the budget's best network, but the one-shot top-1 orders them poorly
(Kendall tau about 0.3 against the truth). One suspect is uneven training: in the last
epochs theta draws its favourites more often, so their one-shot scores rise for how often
they trained rather than how good they are. Fine-tuning the supernet's weights on the
shortlist alone, each network in turn, evens that out and narrows the weights to the
networks that compete (more weight steps on the paths inside the budget's band).

For each finished search it loads the last weights, trains them ``--finetune-epochs`` epochs
of the weight split (plain SGD with the search's momentum and weight decay at
``--finetune-lr``), the shortlist's networks taking the batches in turn, scores the shortlist
again (BN statistics re-estimated for each network, as the check does) and decides again by
the search's own rule. With --finetune-split each number of ``skip`` layers in the
shortlist trains a copy of the weights of its own (a few-shot split made after the search).
A row keeps both sets of figures, paired: the same weights, networks, data and rule before
and after.
"""

from __future__ import annotations

import statistics
import time

from groundtruth import DIGITS, depth_figures_of, judge, key_of, ops_of  # bench/, beside this file
from macro_report import SEED_STD, tau


def fine_tune(search, paths: list, epochs: float, lr: float, seed: int) -> float:
    """Train ``search``'s supernet weights (not theta) for ``epochs`` epochs of its weight
    split, path ``paths[i % len(paths)]`` taking batch i; returns the seconds it took."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    net, ow = search.net, search.cfg.optim.weights
    params = [p for name, p in net.named_parameters() if not name.endswith("theta")]
    opt = torch.optim.SGD(params, lr=lr, momentum=ow.momentum, weight_decay=ow.weight_decay,
                          nesterov=ow.nesterov)
    steps, done, epoch, start = int(epochs * len(search.train_loader)), 0, 0, time.time()
    net.train()
    while done < steps:
        search.train_loader.set_epoch(epoch)
        for x, y in search.train_loader:
            if done == steps:
                break
            loss = F.cross_entropy(net(x, path=paths[done % len(paths)])[0], y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
        epoch += 1
    net.eval()
    return time.time() - start


def tuned_scores(search, paths: list, groups: list[list[int]], epochs: float,
                 lr: float) -> tuple[list[dict], float]:
    """Each path's val figures after fine-tuning: the weights trained on each group of
    ``paths`` (indices) apart, each group from the search's own weights; (figures in the
    order of ``paths``, seconds of training)."""
    import copy

    start, figures, seconds = copy.deepcopy(search.net.state_dict()), {}, 0.0
    for group in groups:
        search.net.load_state_dict(start)
        seconds += fine_tune(search, [paths[i] for i in group], epochs, lr, search.cfg.run.seed)
        figures.update({i: search.evaluate(search.val_loader, path=paths[i]) for i in group})
    search.net.load_state_dict(start)
    return [figures[i] for i in range(len(paths))], seconds


def measure(search, truth, lat, epochs: float, lr: float, split: bool = False) -> dict | None:
    """The paired row for one finished search: its check's one-shot figures and decision
    before and after fine-tuning on its shortlist; None where it made no one-shot check.
    With ``split``, each number of ``skip`` layers in the shortlist gets its own copy of the
    weights, fine-tuned apart (``epochs`` each): a few-shot split made after the search,
    so that networks of different depth stop sharing the weights they are scored on."""
    from fbnas.search.oneshot_check import choose

    decision, rule = search.decision, search.cfg.search.rerank_by
    if not decision or not any(c.get("val_top1") is not None for c in decision["candidates"]):
        return None
    checked = [dict(c) for c in decision["candidates"]]
    scored = [i for i, c in enumerate(checked) if c.get("val_top1") is not None]
    keys = [key_of(checked[i]["ops"]) for i in scored]
    budget_us = search.budget.us
    before = [[checked[i]["val_top1"], checked[i]["val_ce"]] for i in scored]

    def decisions() -> tuple[str, str]:
        """What the rule keeps from ``checked`` as it stands, with and without a DEEPEST
        rule's fewest-skip filter (without it a better order across depths would show;
        the two are the same for other rules)."""
        figures = search.check_figures(rule, checked)
        return tuple(key_of(checked[choose(rule, filter_depth=f, **figures)]["ops"])
                     for f in (True, False))

    found_before, unfiltered_before = decisions()
    paths = [search.net.path_of(checked[i]["ops"]) for i in scored]
    skips = [ops_of(k).count("skip") for k in keys]
    groups = ([[j for j, s in enumerate(skips) if s == n] for n in sorted(set(skips))]
              if split else [list(range(len(paths)))])
    tuned, seconds = tuned_scores(search, paths, groups, epochs, lr)
    after = []
    for i, figures in zip(scored, tuned):
        checked[i].update(val_top1=figures["top1"], val_ce=figures["ce"])
        after.append([figures["top1"], figures["ce"]])
    found_after, unfiltered_after = decisions()
    true = [truth[k] for k in keys]
    v_before, v_after, u_before, u_after = (
        judge(truth, lat, budget_us, k)
        for k in (found_before, found_after, unfiltered_before, unfiltered_after))
    return {"protocol": "finetune", "budget_ms": search.budget.ms, "seed": search.cfg.run.seed,
            "rule": rule, "finetune_epochs": epochs, "finetune_lr": lr,
            "finetune_split": "skip" if split else None,
            "finetune_seconds": round(seconds, 1), "keys": keys, "truth": true,
            "before": [[round(a, 2), round(b, 4)] for a, b in before],
            "after": [[round(a, 2), round(b, 4)] for a, b in after],
            "found_before": found_before, "found_after": found_after,
            "gap_before": round(v_before.gap, 3), "gap_after": round(v_after.gap, 3),
            "unfiltered_before": unfiltered_before, "unfiltered_after": unfiltered_after,
            "gap_unfiltered_before": round(u_before.gap, 3),
            "gap_unfiltered_after": round(u_after.gap, 3),
            "tau_before": round(tau([a for a, _ in before], true), 3),
            "tau_after": round(tau([a for a, _ in after], true), 3),
            "tau_ce_before": round(tau([-b for _, b in before], true), 3),
            "tau_ce_after": round(tau([-b for _, b in after], true), 3)}


def setting_of(row: dict) -> tuple:
    """(epochs, rate, split, training) of a row's fine-tuning; rows before the split existed
    had none, and rows of weights trained as the bench's config trains them no training."""
    return (row["finetune_epochs"], row["finetune_lr"], row.get("finetune_split") or "",
            row.get("training") or "")


def setting_name(setting: tuple) -> str:
    """"1 epochs at lr 0.01", with ", a copy per skip count" where the weights were split
    and what the search did otherwise, as "(sandwich)"."""
    epochs, lr, split, training = setting
    return (f"{epochs:g} epochs at lr {lr:g}" + (", a copy per skip count" if split else "")
            + (f" ({training})" if training else ""))


def gaps(values) -> str:
    """"median / mean / worst" of decision gaps."""
    return f"{statistics.median(values):.2f} / {statistics.mean(values):.2f} / {max(values):.2f}"


def finetune_table(rows: list[dict]) -> str:
    """One line per fine-tuning setting (epochs, rate, split): the searches, the mean tau of the
    shortlist's one-shot top-1 and CE against the truth before and after, the decision's gap
    to the oracle before and after (median, mean, worst), and how the after-decision fared
    against the before-decision search by search (better / within the benchmark's seed
    spread / worse)."""
    def mean(values) -> float:
        values = [v for v in values if v == v]  # a shortlist of equal scores has no tau
        return statistics.mean(values) if values else float("nan")

    lines = ["| fine-tuning | searches | tau top-1 before, after | tau CE before, after | "
             "gap before: median / mean / worst | gap after | after vs before |",
             "|---|---:|---|---|---|---|---|"]
    for setting in sorted({setting_of(r) for r in rows}):
        mine = [r for r in rows if setting_of(r) == setting]
        diff = [r["gap_before"] - r["gap_after"] for r in mine]
        won, lost = sum(d > SEED_STD for d in diff), sum(d < -SEED_STD for d in diff)
        lines.append(
            f"| {setting_name(setting)} | {len(mine)} | "
            f"{mean(r['tau_before'] for r in mine):.2f}, "
            f"{mean(r['tau_after'] for r in mine):.2f} | "
            f"{mean(r['tau_ce_before'] for r in mine):.2f}, "
            f"{mean(r['tau_ce_after'] for r in mine):.2f} | "
            f"{gaps([r['gap_before'] for r in mine])} | {gaps([r['gap_after'] for r in mine])} | "
            f"{won} / {len(mine) - won - lost} / {lost} |")
    return "\n".join(lines)


def skip_bias(rows: list[dict]) -> str:
    """Per number of ``skip`` layers above the shortlist's fewest: the mean of each
    network's true top-1, and of its one-shot top-1 before and after fine-tuning, each less
    its shortlist's mean (over one fine-tuning setting's rows). Why: a one-shot score that
    rises with depth far faster than the truth does ranks a deeper network over a better
    shallower one, whatever order it keeps within a depth."""
    by_extra: dict[int, list[list[float]]] = {}
    for r in rows:
        skips = [ops_of(k).count("skip") for k in r["keys"]]
        columns = (r["truth"], [a for a, _ in r["before"]], [a for a, _ in r["after"]])
        means = [statistics.mean(c) for c in columns]
        for i, s in enumerate(skips):
            by_extra.setdefault(s - min(skips), []).append(
                [c[i] - m for c, m in zip(columns, means)])
    lines = ["| skip above the fewest | networks | truth | one-shot before | one-shot after |",
             "|---:|---:|---:|---:|---:|"]
    for extra in sorted(by_extra):
        got = by_extra[extra]
        lines.append(f"| {extra} | {len(got)} | " + " | ".join(
            f"{statistics.mean(g[j] for g in got):+.2f}" for j in range(3)) + " |")
    return "\n".join(lines)


def layer_bias(rows: list[dict]) -> str:
    """Per layer, what putting ``skip`` or ``k5_e6`` there instead of ``k3_e3`` is worth
    within a shortlist: least-squares effects on each network's true top-1 and on its
    one-shot top-1 before and after fine-tuning, each centred on its shortlist (one
    setting's rows). Why: :func:`skip_bias` counts every ``skip`` alike, but a skip that
    changes the shape (a strided 1x1 conv) and one that is the identity need not be
    misjudged alike; "-" where no shortlist varies that layer's op that way."""
    import numpy as np

    ref, others = DIGITS[1], [op for op in DIGITS if op != DIGITS[1]]
    x, ys = [], [[], [], []]
    for r in rows:
        ops = [ops_of(k) for k in r["keys"]]
        f = np.array([[float(net[i] == op) for op in others for i in range(len(net))]
                      for net in ops])
        x.append(f - f.mean(0))
        for y, column in zip(ys, (r["truth"], [a for a, _ in r["before"]],
                                  [a for a, _ in r["after"]])):
            y.extend(np.asarray(column) - np.mean(column))
    x = np.vstack(x)
    effects = [np.linalg.lstsq(x, np.asarray(y), rcond=None)[0] for y in ys]
    varies = np.abs(x).sum(0) > 0
    layers = x.shape[1] // len(others)
    lines = ["| layer | " + " | ".join(f"{op} for {ref}: truth, one-shot before, after"
                                      for op in others) + " |",
             "|---:|" + "---|" * len(others)]
    for i in range(layers):
        cells = []
        for j in range(len(others)):
            c = j * layers + i
            cells.append(", ".join(f"{e[c]:+.2f}" for e in effects) if varies[c] else "-")
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def unfiltered_gaps(row: dict, twin: dict | None) -> tuple[float, float] | None:
    """(before, after): the gap to the oracle of what the row's rule keeps without its
    fewest-skip filter. Rows record it since 2026-12-07; an older row is decided again from
    its search's sweep row ``twin`` (the same budget and seed), whose check kept NASWOT and
    theta of every checked network. None where neither is at hand, or where the twin's
    figures do not give the row's own filtered decisions (records of another search)."""
    from fbnas.search.oneshot_check import choose

    if "gap_unfiltered_before" in row:
        return row["gap_unfiltered_before"], row["gap_unfiltered_after"]
    if twin is None:
        return None
    keys = [c[0] for c in twin["found_candidates"]]
    truth = dict(zip(row["keys"], row["truth"]))
    figures = {"naswot": [c[3] for c in twin["found_candidates"]],
               "theta": [c[4] for c in twin["found_candidates"]],
               **depth_figures_of(keys)}
    out = []
    for when in ("before", "after"):
        top1 = dict(zip(row["keys"], (a for a, _ in row[when])))
        figures["top1"] = [top1.get(k) for k in keys]
        if keys[choose(row["rule"], **figures)] != row[f"found_{when}"]:
            return None
        kept = keys[choose(row["rule"], filter_depth=False, **figures)]
        out.append(round(twin["oracle_accuracy"] - truth[kept], 3))
    return out[0], out[1]


def one_shot_alone_gaps(row: dict) -> tuple[float, float]:
    """(before, after): the gap to the oracle of the shortlist's best one-shot top-1, all
    depths competing, no other figure (ties to the earlier listed). The oracle is the row's
    own: its filtered decision's truth plus that decision's gap."""
    truth = dict(zip(row["keys"], row["truth"]))
    oracle = row["gap_before"] + truth[row["found_before"]]
    out = []
    for when in ("before", "after"):
        top1 = [a for a, _ in row[when]]
        out.append(round(oracle - row["truth"][top1.index(max(top1))], 3))
    return out[0], out[1]


def unfiltered_table(rows: list[dict], twins: dict) -> str | None:
    """Per fine-tuning setting, over the rows of a fewest-skip rule whose unfiltered decision
    is known (:func:`unfiltered_gaps`; ``twins`` maps (seed, budget_ms) to sweep rows): the
    decision's gap with the filter and without it, and of the one-shot top-1 alone
    (:func:`one_shot_alone_gaps`), each before and after fine-tuning (median / mean / worst),
    on the same searches. Why: the filter lets only the shortlist's deepest networks compete,
    so a better order across depths can move only the decisions without it; and NASWOT,
    summed into the rule, has its own lean towards depth. None where no row has one."""
    from fbnas.check_rules import DEEPEST_RULES

    lines = ["| fine-tuning | searches | filtered: before | after | unfiltered: before | "
             "after | one-shot alone: before | after |", "|---|---:|---|---|---|---|---|---|"]
    for setting in sorted({setting_of(r) for r in rows}):
        mine = [(r, unfiltered_gaps(r, twins.get((r["seed"], r["budget_ms"]))))
                for r in rows if setting_of(r) == setting and r["rule"] in DEEPEST_RULES]
        mine = [(r, u, one_shot_alone_gaps(r)) for r, u in mine if u is not None]
        if not mine:
            continue
        lines.append(f"| {setting_name(setting)} | {len(mine)} | "
                     f"{gaps([r['gap_before'] for r, _, _ in mine])} | "
                     f"{gaps([r['gap_after'] for r, _, _ in mine])} | "
                     + " | ".join(gaps([g[i][j] for g in mine]) for i in (1, 2) for j in (0, 1))
                     + " |")
    return "\n".join(lines) if len(lines) > 2 else None
