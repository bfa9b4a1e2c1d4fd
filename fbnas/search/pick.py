"""A network under a latency budget without training a supernet: ``fbnas pick``.

The decision is made in three steps, none of which trains a weight:

1. a prior over the space from the latency term alone
   (:func:`~fbnas.search.latency_prior.latency_prior`: theta moved by the search loss's cost
   term, as many steps as a search of the same config would take on the same data);
2. the prior's ``networks`` most probable networks within the budget's window (predicted at
   most the budget and, where the space allows, at least ``loss.target_floor`` of it;
   :func:`~fbnas.search.oneshot_check.checked_networks`);
3. each of them scored by NASWOT (fbnas/search/naswot.py: one forward pass of a freshly
   initialised copy on a batch of training images), and the best kept: by NASWOT's z-score
   plus a quarter of the prior's log-probability's (``naswot_and_theta``, the default), by
   NASWOT alone (``naswot``), or by the first rule among its best 16's deepest networks
   (``naswot_and_theta_deepest``: the fewest ``skip`` layers; fbnas/search/oneshot_check.py
   says why).

Why offer it: on NAS-Bench-Macro, where every network's accuracy after full training is
known, this decision (the benches' cost-only control) came close to the best network at
every budget tried, and searches checked the same way with their trained theta as the prior
did not clearly beat it. The prior matters as much as the score: NASWOT alone over a whole
window crowns networks of a few wide early blocks and skips, far from the best. That is one
space, where NASWOT ranks networks unusually well; nothing says how well it ranks another
space's, so ``fbnas train`` stays the method. Evidence: docs/results.md, "Training-free
picks" and "The long check against the 8-network check".
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from fbnas.check_rules import PICK_RULES

#: networks scored by default: the list length measured on NAS-Bench-Macro
DEFAULT_NETWORKS = 256


def default_name(target_ms: float) -> str:
    """The name a pick under ``target_ms`` gets unless ``--name`` says: ``pick_1.8ms``, and
    for a budget written with an exponent ``pick_1e06ms`` (an architecture name holds no
    '+')."""
    return f"pick_{target_ms:g}ms".replace("e+", "e")


def pick(cfg, networks: int = DEFAULT_NETWORKS, rule: str = PICK_RULES[0],
         echo: Callable[[str], None] = print, scorer: Callable | None = None) -> dict:
    """Decide a network for ``cfg``'s space, table and budget without training; return
    ``{"ops", "rank", "candidates", "probs", "theta_steps", "budget", "space", "lut"}`` with
    each candidate's ``ops``, ``naswot``, ``log_prob`` and ``latency_us``. ``scorer`` maps a
    list of architectures to their NASWOT scores (default: scored here, on the data's first
    training images); a bench passes one that remembers scores across picks."""
    from fbnas.arch.space import load_space
    from fbnas.config import Budget
    from fbnas.data.splits import make_splits
    from fbnas.errors import FbnasError, UsageError, brief, warn_stderr
    from fbnas.latency.lut import load_lut
    from fbnas.runs.loaders import open_dataset
    from fbnas.search.window import check_budget
    from fbnas.search.latency_prior import latency_prior, search_theta_steps
    from fbnas.search.naswot import data_images, score_architectures
    from fbnas.search.oneshot_check import checked_networks, choose, depth_figures, log_probabilities

    if rule not in PICK_RULES:
        raise UsageError(f"a pick decides by {' or '.join(PICK_RULES)}, not {brief(rule)}: the "
                         "other rules score networks on a trained supernet (fbnas train)")
    budget = Budget.of(cfg)
    if budget is None:
        raise UsageError("fbnas pick needs a latency budget: give --target-ms MS")
    if networks < 2:
        raise UsageError("--networks must be at least 2: the pick compares networks")
    space = load_space(cfg.space)
    if not Path(cfg.lut).is_file():
        raise FbnasError(f"lookup table {cfg.lut} does not exist; create it with: "
                         f"fbnas profile --space {cfg.space} --out {cfg.lut}")
    lut = load_lut(cfg.lut, space)
    note = lut.other_machine()
    if note:
        warn_stderr(note)
    # in the order a user fixes them: the inputs, the budget, then the list's memory
    data = open_dataset(cfg, space.resolution)
    if data.channels != space.in_channels:
        raise FbnasError(f"the data's images have {data.channels} channels but the space "
                         f"expects {space.in_channels}-channel inputs")
    check_budget(lut, space, budget.us, networks, knob="--networks")
    n = min(len(data), cfg.data.limit) if cfg.data.limit else len(data)
    splits = make_splits(n, cfg.run.seed, cfg.data.theta_fraction, cfg.data.val_fraction)
    steps = search_theta_steps(cfg, len(splits["weights"]), len(splits["theta"]))
    echo(f"pick {space.name} under {budget.ms:g} ms: the latency term's prior ({steps} theta "
         f"steps), then NASWOT of its {networks} most probable networks within the budget")
    probs = latency_prior(cfg, space, lut, steps)
    options = checked_networks(lut, space, probs, budget.us, budget.floor, networks)
    if scorer is None:
        scores = score_architectures(space, options, data_images(cfg, data))
    else:
        scores = scorer(options)
    log_probs = log_probabilities(space, probs, options)
    best = choose(rule, naswot=scores, theta=log_probs, **depth_figures(space, options))
    candidates = [{"ops": ops, "naswot": s, "log_prob": lp, "latency_us": lut.predict(ops)}
                  for ops, s, lp in zip(options, scores, log_probs)]
    return {"ops": options[best], "rank": best, "candidates": candidates, "probs": probs,
            "theta_steps": steps, "budget": budget, "space": space, "lut": lut}


def pick_to_file(cfg, out: Path, name: str, networks: int = DEFAULT_NETWORKS,
                 rule: str = PICK_RULES[0], force: bool = False,
                 echo: Callable[[str], None] = print) -> dict:
    """:func:`pick`, then add the network to the architecture file ``out`` as ``name`` (the
    file ``fbnas retrain``, ``summary``, ``latency`` and ``export`` read); return its entry."""
    from fbnas.arch.definition import add_architectures, read_arch_file
    from fbnas.check_rules import rule_label as label
    from fbnas.errors import FbnasError
    from fbnas.io import check_writable, file_hash
    from fbnas.latency.reports import format_entry
    from fbnas.search.sampling import architecture_entry, check_name

    check_name(name)
    check_writable(out)
    if out.is_file() and not force and name in read_arch_file(out)["architectures"]:
        # refused before the work, not after it; add_architectures checks again when writing
        raise FbnasError(f"{out} already holds architecture(s) {name}; pass --name NEW or "
                         "--force to replace")
    found = pick(cfg, networks, rule, echo)
    lut, budget = found["lut"], found["budget"]
    how = {"method": "training_free", "by": rule, "target_ms": round(budget.ms, 9),
           "rank": found["rank"], "of": len(found["candidates"]),
           "theta_steps": found["theta_steps"],
           "naswot": round(found["candidates"][found["rank"]]["naswot"], 4)}
    if budget.floor:
        how["floor"] = budget.floor
    entry = architecture_entry(found["space"], found["probs"], lut, found["ops"], name, how, {
        "config": {"space": str(cfg.space), "data": str(cfg.data.dir), "seed": cfg.run.seed},
        "lut": str(lut.path) if lut.path else None,
        "lut_hash": file_hash(lut.path) if lut.path else None,
    })
    add_architectures(out, [entry], force=force)
    echo(format_entry(entry, lut))
    echo(f"kept #{found['rank'] + 1} of the prior's {len(found['candidates'])} most probable "
         f"networks within {budget.ms:g} ms, the best by "
         f"{label(rule).replace('theta', 'the prior')}")
    echo(f"wrote {name} to {out}")
    return entry


def pick_command(target_ms: float, config_path: str | Path | None, overrides: tuple[str, ...],
                 options: dict, out: Path, name: str | None, networks: int = DEFAULT_NETWORKS,
                 rule: str = PICK_RULES[0], force: bool = False,
                 echo: Callable[[str], None] = print) -> dict:
    """``fbnas pick`` once its options are parsed: the config from ``config_path``, the
    named ``options`` given (None: not given) and ``overrides``, under the budget
    ``target_ms``; torch's threads as it says; then :func:`pick_to_file` under ``name``
    (default: :func:`default_name`)."""
    import torch

    from fbnas.config import load_config

    given = {**options, "loss.form": "target", "loss.target_ms": target_ms}
    cfg = load_config(config_path, list(overrides),
                      options={k: v for k, v in given.items() if v is not None})
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    if cfg.data.download:  # as train and retrain do, before anything reads the data
        from fbnas.data.cifar import download_cifar10

        download_cifar10(cfg.data.dir)
    return pick_to_file(cfg, out, name or default_name(target_ms), networks, rule, force,
                        echo=echo)
