"""The alternating search: weights by SGD on one split, theta by Adam on another.

An epoch is weights-only during the warm-up epochs, then either every weight batch followed
by every theta batch (``alternation: epoch``, the paper) or ``accumulate`` weight
micro-batches followed by ``theta_steps`` times ``accumulate`` theta micro-batches
(``alternation: step``; ``final_theta_steps`` times in the last epoch where set). The
weights minimise the cross-entropy, theta the latency-aware loss (fbnas/search/loss.py); each
optimizer steps only its own parameters. The weights' rate follows a cosine over the run;
theta's is constant, or under ``optim.theta.final_lr`` falls over the last epoch
(fbnas/runs/schedule.py).

After every epoch the search reports two scores on the val split: the supernet's (argmax
layers, transition layers mixed by softmax(theta)) and the found network's, the one
``fbnas sample --hard`` would return now (under a budget, the most probable architecture
within it), run alone on the supernet's weights with its batch-norm statistics re-estimated.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from fbnas.arch.space import load_space
from fbnas.check_rules import rule_label
from fbnas.config import Budget, Config
from fbnas.errors import FbnasError, UsageError
from fbnas.io import file_hash
from fbnas.latency.lut import load_lut
from fbnas.latency.recorded import TABLE_COPY, table_copy
from fbnas.runs.dist import exit_without_teardown, leave_if_child, relaunch
from fbnas.runs.launch import launch
from fbnas.runs.loaders import loader
from fbnas.runs.logs import console
from fbnas.runs.run_config import run_config
from fbnas.runs.rundir import check_run_dir, resume_config
from fbnas.runs.schedule import cosine_between
from fbnas.runs.stats import StepFigures
from fbnas.runs.trainer import Batch, Trainer
from fbnas.search.checkpoint import check_search_parts
from fbnas.search.health import search_warnings, skip_count
from fbnas.search.loss import multiplier_step, paper_loss, target_loss
from fbnas.search.oneshot_check import (RULES, checked_networks, choose, depth_figures,
                                        log_probabilities, needs, shortlist)
from fbnas.search.pictures import progress_chart, theta_heatmap, write_png
from fbnas.search.supernet import Supernet, recalibrated_bn
from fbnas.search.table import copy_table

__all__ = ["Search", "run_search", "resume_config", "temperature"]


def temperature(cfg: Config, epoch: int) -> float:
    t = cfg.search.temperature
    return t.initial * math.exp(-t.decay * epoch)


def build_supernet(cfg: Config, space, lut) -> Supernet:
    """The supernet ``cfg``'s search keys describe (also used to reload a run's weights)."""
    s = cfg.search
    return Supernet(space, lut, s.cost, impl=s.supernet, zero_init_residual=s.zero_init_residual,
                    soft_transitions=s.soft_transitions, shared_weights=s.shared_weights,
                    transition_paths=s.transition_paths)


def theta_step_mode(cfg: Config) -> str:
    """The supernet mode a theta step runs in (``search.theta_relaxation``)."""
    return "softmax" if cfg.search.theta_relaxation == "softmax" else cfg.search.mode


def uses_multiplier(cfg: Config) -> bool:
    return cfg.loss.form == "target" and cfg.loss.target_penalty == "multiplier"


def search_loss(cfg: Config, budget: Budget | None, ce: torch.Tensor, cost: torch.Tensor,
                multiplier: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, cost factor or penalty): the target form against ``budget`` (``Budget.of(cfg)``)
    where there is one, else the paper's; ``multiplier`` is the budget's Lagrange multiplier
    under ``loss.target_penalty: multiplier``."""
    lo = cfg.loss
    if budget is not None:
        return target_loss(ce, cost, budget.us, lo.target_weight,
                           multiplier if uses_multiplier(cfg) else None)
    return paper_loss(ce, cost, lo.alpha, lo.beta)


def next_multiplier(cfg: Config, budget: Budget, net, multiplier: float) -> float:
    """The multiplier after a theta step: dual ascent on the argmax network's latency, the
    network whose latency the penalty charges (and, under ``target_on: sample``, still the
    one the search is steered by), at ``loss.multiplier_lr``."""
    return multiplier_step(multiplier, net.cost_of(net.argmax_ops()), budget.us,
                           cfg.loss.multiplier_lr)


def penalised_cost(cfg: Config, net, cost: torch.Tensor) -> torch.Tensor:
    """The cost the loss charges: the step's sampled cost, or with a budget and
    ``loss.target_on: argmax``, the argmax network's cost carrying the sample's gradient.

    The user gets the argmax (what ``sample --hard`` returns), not a sample. While theta is
    undecided the two part ways: the absolute-value penalty puts the samples' median latency
    on the budget, and with a few cheap candidates near a tie and the expensive ones sharing
    the rest, each layer's argmax is a cheap one, far under the budget. Taking
    the sign of the push from the argmax's latency makes the search spend the budget on the
    network it returns; the gradient stays the sample's (straight-through)."""
    if cfg.loss.form != "target" or cfg.loss.target_on != "argmax":
        return cost
    argmax = net.cost_of(net.argmax_ops())
    return cost + (argmax - cost.detach())


def format_cost(value: float, metric: str) -> str:
    """A cost of ``search.cost``'s metric in its unit: "0.466 ms", "385.0M MACs"."""
    if metric == "latency":
        return f"{value / 1000:.3f} ms"
    if metric == "macs":
        return f"{value / 1e6:.1f}M MACs"
    return f"{value / 1e6:.3f}M params"


class Search(Trainer):
    """A supernet search run."""

    kind = "search"
    phases = ("weights", "theta")
    lr_keys = ("optim.weights.lr", "optim.theta.lr")
    val_label = "supernet val top1"
    own_files = (TABLE_COPY,)
    #: beside the cross-entropy, every step reports the sampled network's cost and the
    #: cost factor (paper) or budget penalty (target) of the search loss
    figures = ("ce", "cost", "factor")
    figure_tags = {**Trainer.figure_tags, "factor": "loss_cost_factor", "cost": "cost_sampled"}
    #: the budget's Lagrange multiplier (loss.target_penalty: multiplier); set in setup
    multiplier = 0.0

    def setup(self, ckpt: dict | None) -> None:
        cfg = self.cfg
        self.space = self._space(ckpt)
        self.lut_path = self._table(ckpt)
        self.lut = load_lut(self.lut_path, self.space)
        note = self.lut.other_machine()
        if note and cfg.search.cost == "latency":
            self.warn(note)
        self.lut_hash = file_hash(self.lut_path)
        self.epochs = cfg.search.epochs
        self.accumulate = cfg.search.accumulate
        self.resolution = self.space.resolution
        self.in_channels = self.space.in_channels
        self.num_classes = self.space.num_classes
        self.find_unused_parameters = cfg.search.mode == "hard"
        if cfg.search.sandwich_every and self.info.enabled:
            # DDP reduces one forward's gradients a step; the biggest network's would be a second
            raise UsageError("search.sandwich_every trains two networks a weight step, which "
                             "one process does but DDP cannot: train with one process or set "
                             "search.sandwich_every=0")
        self.budget = Budget.of(cfg)
        # the budget's Lagrange multiplier (loss.target_penalty: multiplier), resumed exactly
        self.multiplier = float((ckpt or {}).get("multiplier", 0.0))
        # this epoch's theta steps, and the one after which the argmax last changed
        # REINFORCE theta steps: the moving average of the rewards (fbnas/search/reinforce.py)
        self.reward_baseline = (ckpt or {}).get("reward_baseline")
        self.argmax_track = dict((ckpt or {}).get("argmax_track") or
                                 {"steps": 0, "changed": 0, "ops": None})
        # the last epoch's one-shot check of the most probable networks (Search.rerank)
        self.decision = (ckpt or {}).get("decision")

    def check_with_data(self) -> None:
        """Refuse a budget no network of the space meets, or a check list too long to find
        (before training, not after it; after the data folder, which a user fixes first);
        warn of a budget it cannot spend."""
        from fbnas.search.window import check_budget

        if self.budget is not None:
            check_budget(self.lut, self.space, self.budget.us, self.cfg.search.rerank,
                         self.warn)

    def _space(self, ckpt: dict | None):
        """The space to search: config key ``space`` for a new run; for a resumed one the space
        its checkpoint records, so that a run whose space file was named by a relative path,
        or was edited since, resumes from any working directory, as its table copy lets it.
        A resume naming another space loads that one, and :meth:`check_resume` compares."""
        from fbnas.arch.space import SearchSpace

        saved = (ckpt or {}).get("space")
        config = (ckpt or {}).get("config")
        same_name = isinstance(config, dict) and str(config.get("space")) == str(self.cfg.space)
        if not (isinstance(saved, dict) and same_name):
            return load_space(self.cfg.space)
        try:
            return SearchSpace.from_dict(saved)
        except (FbnasError, ValueError, TypeError, KeyError) as e:
            raise FbnasError(f"cannot resume: {self.paths.last} holds an invalid space ({e}); "
                             "start over with --force") from None

    def _table(self, ckpt: dict | None) -> Path:
        """The table to search with: config key ``lut`` for a new run; the run's copy,
        RUN_DIR/lut.json, for a resumed one, whatever happened to the original since (a run
        directory from before the copy existed resumes with the original, if unchanged)."""
        named, copy = Path(self.cfg.lut), table_copy(self.paths.root)
        if ckpt is not None and copy.is_file():
            # --lut naming another file than the one the run started with must be that table
            if str(self.cfg.lut) != ckpt.get("lut_path") and not (
                    named.is_file() and file_hash(named) == file_hash(copy)):
                raise FbnasError(f"cannot resume: lookup table {named} differs from the one "
                                 f"the run started with ({ckpt.get('lut_path')}, kept as "
                                 f"{copy}); resume without --lut to use the run's copy")
            return copy
        if not named.is_file():
            raise FbnasError(f"lookup table {named} does not exist; create it with: "
                             f"fbnas profile --space {self.cfg.space} --out {named}")
        return named

    def check_resume_parts(self, ckpt: dict, where: str) -> None:
        check_search_parts(ckpt, where)

    def check_resume(self, ckpt: dict) -> None:
        if ckpt.get("space_hash") != self.space.hash:
            space = ckpt.get("space")
            name = space.get("name", "?") if isinstance(space, dict) else "not recorded"
            raise FbnasError(f"cannot resume: the run searched a different space "
                             f"({name}, hash {ckpt.get('space_hash')}) than "
                             f"{self.space.name} (hash {self.space.hash}); start over with "
                             "--force")
        if ckpt.get("lut_hash") != self.lut_hash:
            raise FbnasError(f"cannot resume: lookup table {self.lut_path} (hash "
                             f"{self.lut_hash}) differs from the one the run started with "
                             f"({ckpt.get('lut_path')}, hash {ckpt.get('lut_hash')}); put that "
                             f"table back as {self.lut_path}, or start over with --force")

    def write_run_files(self) -> None:
        super().write_run_files()
        copy_table(self.lut_path, self.paths.root, self.lut_hash)

    def apply_hyperparameters(self) -> None:
        super().apply_hyperparameters()
        ot = self.cfg.optim.theta
        for g in self.optimizers["theta"].param_groups:
            g.update(lr=ot.lr, betas=(ot.beta1, ot.beta2), weight_decay=ot.weight_decay)

    def phase_record(self, phase: str, mean: StepFigures) -> dict:
        record = super().phase_record(phase, mean)
        if phase == "theta":
            record["theta_cost_sampled"] = mean["cost"]
        return record

    def make_train_loaders(self, data, splits, **common) -> None:
        seed = self.cfg.run.seed
        self.train_loader = self.train_batches(data, splits["weights"], seed, **common)
        self.theta_loader = self.train_batches(data, splits["theta"], seed + 1, **common)
        batches = len(self.train_loader)
        if self.cfg.search.alternation == "step" and self.accumulate > batches:
            raise UsageError(f"search.accumulate ({self.accumulate}) is above the {batches} "
                             "weight batches of an epoch, so no step would ever run; use at "
                             f"most --set search.accumulate={max(1, batches)}")
        # the same un-augmented weight-split images on every process, so that recalibrated
        # statistics agree across ranks without communication
        n = min(self.cfg.search.recalibrate_images, len(splits["weights"]))
        self.recal_loader = None
        if n:
            self.recal_loader = loader(self.cfg, data, "train", splits["weights"][:n],
                                       self.cfg.data.batch_size, train=False, seed=0,
                                       drop_last=False, **{**common, "rank": 0, "world_size": 1})

    def evaluate(self, loader, path: list[int] | None = None) -> dict:
        """Score the deterministic (argmax or softmax) supernet, or the one architecture
        ``path``, with batch-norm statistics re-estimated for what is scored."""
        return self.evaluate_on([loader], path)[0]

    def evaluate_on(self, loaders: list, path: list[int] | None = None) -> list[dict]:
        """:meth:`evaluate` over each of ``loaders`` in turn, under one re-estimation of the
        batch-norm statistics: the re-estimation (``search.recalibrate_images`` forward
        passes) costs about as much as scoring a split, so scoring two splits under one
        halves the extra work."""
        if path is None:
            logits_of = self.eval_logits
        else:
            def logits_of(x):
                return self.net(x, path=path)[0]
        recal = nullcontext() if self.recal_loader is None else recalibrated_bn(
            self.net, (x for x, _ in self.recal_loader), logits_of)
        out = []
        with recal:
            for loader in loaders:
                out.append(super().evaluate(loader, logits_of))
        return out

    def found_ops(self) -> list[str]:
        """The architecture ``fbnas sample --hard`` returns now: the argmax of theta, or under
        a budget the most probable architecture whose predicted latency is within it and, where
        the space allows, at least ``loss.target_floor`` of it; after the last epoch, the
        one-shot check's pick (:meth:`rerank`) where it ran."""
        if self.budget is None:
            return self.net.argmax_ops()
        if self.decision is not None:
            return list(self.decision["ops"])
        from fbnas.search.window import ops_in_window

        probs = self.probabilities_np()
        return ops_in_window(self.lut, self.space, probs, self.budget.us, self.budget.floor)

    def probabilities_np(self) -> list[np.ndarray]:
        """softmax(theta) of each layer as float64 numpy arrays (on the host, wherever theta
        lives), as the budget's window searches take them."""
        return [p.double().cpu().numpy() for p in self.net.probabilities()]

    #: where each figure of a rule (oneshot_check.RULES) is kept in a checked network's record
    CHECK_KEYS = {"top1": "val_top1", "macs": "macs", "naswot": "naswot",
                  "theta": "log_prob", "depth": "depth", "early_depth": "early_depth"}

    def rerank(self) -> dict | None:
        """Score the ``search.rerank`` most probable networks within the budget's window (and,
        with ``search.rerank_alternatives``, each layer's alternatives) by
        what ``search.rerank_by`` uses (one-shot: val top-1 on the supernet's weights, BN
        re-estimated for each; MACs; the training-free NASWOT score) and pick the best
        (fbnas/search/oneshot_check.py); ties go to the more probable. None where there is
        nothing to compare.

        Why: theta ends a short search with near-ties, and sometimes with a confident mistake
        (skip in a layer the benchmark says matters most); a second opinion on its few most
        probable networks tells the worst of those apart.
        """
        k, rule = self.cfg.search.rerank, self.cfg.search.rerank_by
        if self.budget is None or k <= 1 or self.val_loader is None:
            return None
        probs = self.probabilities_np()
        options = checked_networks(self.lut, self.space, probs, self.budget.us,
                                   self.budget.floor, k, self.cfg.search.rerank_alternatives)
        deep = depth_figures(self.space, options)
        scored = [{"ops": ops, "macs": self.lut.raw_sum(ops, "macs"), "log_prob": lp, "depth": d,
                   "early_depth": e}
                  for ops, lp, d, e in zip(options, log_probabilities(self.space, probs, options),
                                           deep["depth"], deep["early_depth"])]
        if needs(rule, "naswot"):
            from fbnas.search.naswot import data_images, score_architectures

            images = data_images(self.cfg, self.data)
            for s, v in zip(scored, score_architectures(self.space, options, images)):
                s["naswot"] = v
        if needs(rule, "top1"):  # every network, or a shortlist rule's few
            for i in shortlist(rule, len(scored), **self.check_figures(rule, scored)):
                s = scored[i]
                figures = self.evaluate(self.val_loader, path=self.net.path_of(s["ops"]))
                s.update(val_top1=figures["top1"], val_ce=figures["ce"])
        best = choose(rule, **self.check_figures(rule, scored))
        return {"ops": scored[best]["ops"], "rank": best, "candidates": scored}

    @classmethod
    def check_figures(cls, rule: str, scored: list[dict]) -> dict:
        """The figures ``rule`` uses, one list each over the checked networks ``scored``
        (None where a network has none yet: one-shot top-1 before, or outside, the
        shortlist). A class method: benches read them back from a checkpoint's decision."""
        return {f: [s.get(cls.CHECK_KEYS[f]) for s in scored] for f in RULES[rule]}

    def build_model(self) -> Supernet:
        return build_supernet(self.cfg, self.space, self.lut)

    def build_optimizers(self) -> dict:
        ow, ot = self.cfg.optim.weights, self.cfg.optim.theta
        return {
            "weights": torch.optim.SGD(self.net.weight_parameters(), lr=ow.lr,
                                       momentum=ow.momentum, weight_decay=ow.weight_decay,
                                       nesterov=ow.nesterov),
            # theta has its own optimizer and weight decay, never the weights' decay. The decay
            # is decoupled (AdamW): added to the gradient, as Adam's L2 term, it outweighed
            # theta's gradients (about 1e-4 per entry) once theta reached |gradient| / decay,
            # about 0.2 to 0.4, so most layers stayed undecided whatever the search saw
            "theta": torch.optim.Adam(self.net.theta_parameters(), lr=ot.lr,
                                      betas=(ot.beta1, ot.beta2), weight_decay=ot.weight_decay,
                                      decoupled_weight_decay=True),
        }

    def extra_state(self) -> dict:
        return {"space": self.space.raw, "space_hash": self.space.hash,
                "lut_path": str(self.cfg.lut), "lut_hash": self.lut_hash,
                "theta": self.net.theta_state(), "multiplier": self.multiplier,
                "candidates": [list(l.candidates) for l in self.net.layers],
                "argmax_track": dict(self.argmax_track),
                "reward_baseline": self.reward_baseline, "decision": self.decision}

    def before_step(self, phase: str) -> None:
        if phase == "theta":
            lr = self.theta_lr(self.epoch, self.position)
            for g in self.optimizers["theta"].param_groups:
                g["lr"] = lr

    def theta_lr(self, epoch: int, item: int) -> float:
        """Theta's learning rate at plan item ``item`` of ``epoch``: ``optim.theta.lr``, or
        in the last epoch, under ``optim.theta.final_lr``, a cosine from it down to that."""
        ot = self.cfg.optim.theta
        if ot.final_lr is None or epoch != self.epochs - 1:
            return ot.lr
        return cosine_between(ot.lr, ot.final_lr, item / self.plan_length(epoch))

    def after_step(self, phase: str) -> None:
        if phase != "theta":
            return
        if uses_multiplier(self.cfg):
            self.multiplier = next_multiplier(self.cfg, self.budget, self.net, self.multiplier)
        track, ops = self.argmax_track, self.net.argmax_ops()
        track["steps"] += 1
        if ops != track["ops"]:
            track.update(ops=ops, changed=track["steps"])

    def argmax_stable(self) -> float | None:
        """The share of this epoch's theta steps, counted back from its end, over which the
        argmax of theta did not change (1: it never changed this epoch; None: no theta
        step). A decided search ends with a long stable tail."""
        track = self.argmax_track
        if not track["steps"]:
            return None
        return (track["steps"] - track["changed"]) / track["steps"]

    # -- one epoch ---------------------------------------------------------------------------
    def plan(self, epoch: int) -> Iterator[tuple[str, Batch]]:
        w_loader, t_loader = self.train_loader, self.theta_loader
        w_loader.set_epoch(epoch)
        t_loader.set_epoch(epoch)
        if epoch < self.cfg.warmup_epochs:
            for batch in w_loader:
                yield "weights", batch
            return
        if self.cfg.search.alternation == "epoch":
            for batch in w_loader:
                yield "weights", batch
            for batch in t_loader:
                yield "theta", batch
            return
        k = self.accumulate
        theta_iter = iter(t_loader)
        w_batches = iter(w_loader)
        while True:
            group = [b for _, b in zip(range(k), w_batches)]
            if len(group) < k:
                return
            for b in group:
                yield "weights", b
            for _ in range(k * self.theta_steps(epoch)):
                try:
                    b = next(theta_iter)
                except StopIteration:
                    theta_iter = iter(t_loader)
                    b = next(theta_iter)
                yield "theta", b

    def plan_length(self, epoch: int) -> int:
        nw = len(self.train_loader)
        if epoch < self.cfg.warmup_epochs:
            return nw
        if self.cfg.search.alternation == "epoch":
            return nw + len(self.theta_loader)
        k = self.accumulate
        return (1 + self.theta_steps(epoch)) * (nw // k) * k

    def theta_steps(self, epoch: int) -> int:
        """Theta steps after each weight step in ``epoch`` (alternation: step)."""
        s = self.cfg.search
        return s.final_theta_steps if s.final_theta_steps and epoch == self.epochs - 1 \
            else s.theta_steps

    def forward_loss(self, x: torch.Tensor, y: torch.Tensor, epoch: int, phase: str):
        s = self.cfg.search
        if phase == "theta" and s.theta_estimator == "reinforce":
            return self.reinforce_loss(x, y)
        mode = theta_step_mode(self.cfg) if phase == "theta" else s.mode
        # a hard theta step runs every candidate, weighted by the one-hot sample, so that the
        # straight-through gradient reaches each candidate's theta (docs/search.md, Supernet)
        every = mode == "hard" and phase == "theta"
        self._weights_need_grad(phase == "weights")
        logits, cost = self.model(x, tau=temperature(self.cfg, epoch), mode=mode,
                                  per_sample=s.per_sample, all_candidates=every)
        ce = F.cross_entropy(logits, y, reduction="none" if cost.dim() else "mean")
        loss, factor = search_loss(self.cfg, self.budget, ce,
                                   penalised_cost(self.cfg, self.net, cost), self.multiplier)
        if phase == "weights":
            # the cost term trains theta only: as a factor of the weights' loss it would scale
            # their learning rate with every knob of the trade-off (see fbnas/search/loss.py)
            loss = ce
            # the scheduler counts weight steps, and a resumed run restores it
            if s.sandwich_every and self.scheduler.last_epoch % s.sandwich_every == 0:
                loss = ce.mean() + self.biggest_loss(x, y)
        return loss.mean(), {"ce": ce, "cost": cost, "factor": factor}

    def biggest_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The cross-entropy of the biggest network, each layer's costliest candidate
        (search.sandwich_every). Why: a drawn network trains a big candidate's weights only
        when it draws it, and with shared weights its small slice trains at every step
        besides; the one-shot check then underrates the big candidates and the networks
        without ``skip`` that the benchmark ranks first."""
        path = [int(layer.cost.argmax()) for layer in self.net.layers]
        return F.cross_entropy(self.model(x, path=path)[0], y)

    def reinforce_loss(self, x: torch.Tensor, y: torch.Tensor):
        """A theta step on ``search.theta_paths`` networks drawn from softmax(theta), each run
        alone without gradients; the reward is minus its search loss."""
        from fbnas.search.reinforce import (leave_one_out, log_probability, next_baseline,
                                            sample_paths, surrogate)

        self._weights_need_grad(False)
        theta = self.net.theta_parameters()
        paths = sample_paths(theta, self.cfg.search.theta_paths)
        ces, costs = [], []
        with torch.no_grad():
            for path in paths.tolist():
                ces.append(F.cross_entropy(self.model(x, path=path)[0], y))
                costs.append(self.net.cost_of([l.candidates[i] for l, i in
                                               zip(self.net.layers, path)]))
        ce = torch.stack(ces)
        cost = torch.tensor(costs, dtype=ce.dtype, device=ce.device)
        reward_loss, factor = search_loss(self.cfg, self.budget, ce, cost, self.multiplier)
        baseline = self.reward_baseline
        if self.cfg.search.reinforce_baseline == "leave_one_out":
            against = leave_one_out(-reward_loss)
        else:
            against = float(-reward_loss.mean()) if baseline is None else baseline
        loss = surrogate(log_probability(theta, paths), -reward_loss, against)
        self.reward_baseline = next_baseline(baseline, -reward_loss,
                                             self.cfg.search.reinforce_momentum)
        # the value printed is the sampled networks' search loss; the gradient the surrogate's
        loss = loss - loss.detach() + reward_loss.mean()
        return loss, {"ce": ce.mean(), "cost": cost.mean(), "factor": factor.mean()}

    def _weights_need_grad(self, on: bool) -> None:
        """A theta step never uses the weights' gradients: not computing them saves about a
        third of its backward. Under DDP only where unused parameters are allowed (hard mode);
        otherwise the reducer would wait for gradients that never come."""
        if self.info.enabled and not self.find_unused_parameters:
            return
        weights = self.net.weight_parameters()
        if weights[0].requires_grad != on:
            for p in weights:
                p.requires_grad_(on)

    def eval_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Deterministic: argmax or softmax of theta, never Gumbel noise."""
        return self.net(x, mode=self.cfg.search.eval_mode)[0]

    # -- reporting ---------------------------------------------------------------------------
    def describe(self) -> str:
        cfg = self.cfg
        return (f"search {self.space.name}: {len(self.net.layers)} layers, mode {cfg.search.mode}, "
                f"{self.epochs} epochs ({cfg.warmup_epochs} weights-only), splits "
                f"weights/theta/val = {len(self.splits['weights'])}/{len(self.splits['theta'])}/"
                f"{len(self.splits['val'])} images, {self.info.world_size} process(es) on "
                f"{self.device}, batch {cfg.data.batch_size} per process, supernet "
                f"{cfg.search.supernet}, " + (
                    f"latency budget {self.budget.ms:g} ms ({cfg.loss.target_penalty} "
                    "penalty)" if self.budget is not None
                    else f"loss CE * {cfg.loss.alpha:g} * (log LAT)^{cfg.loss.beta:g}"))

    def epoch_extras(self, epoch: int) -> dict:
        ops = self.net.argmax_ops()
        extras = {"multiplier": self.multiplier} if uses_multiplier(self.cfg) else {}
        return {**extras, "temperature": temperature(self.cfg, epoch),
                "cost_argmax": self.net.cost_of(ops),
                "cost_expected": self.net.expected_cost(),
                "argmax_skips": skip_count(ops), "layers": len(ops)}

    def scores_epoch(self, epoch: int) -> bool:
        return (epoch + 1) % self.cfg.search.evaluate_every == 0 or epoch == self.epochs - 1

    def epoch_evaluation(self, epoch: int) -> dict:
        self.decision = self.rerank() if epoch == self.epochs - 1 else None
        ops = self.found_ops()
        probs = self.net.probabilities()
        record = {"found_cost": self.net.cost_of(ops), "found_skips": skip_count(ops),
                  # how decided theta is: the mean over layers of the largest probability
                  "theta_decided": float(np.mean([float(p.max()) for p in probs]))}
        if self.budget is not None:
            record["budget_ms"] = self.budget.ms
        stable = self.argmax_stable()
        if stable is not None:
            record["argmax_stable"] = stable
        # the next epoch counts its own theta steps; its first step compares with this argmax
        self.argmax_track.update(steps=0, changed=0)
        chosen = None if self.decision is None else self.decision["candidates"][
            self.decision["rank"]]
        if chosen is not None and "val_top1" in chosen:
            record["found_val_top1"] = chosen["val_top1"]
        elif self.val_loader is not None and self.scores_epoch(epoch):
            ev = self.evaluate(self.val_loader, path=self.net.path_of(ops))
            record["found_val_top1"] = ev["top1"]
        if chosen is not None:
            record["rerank_moved"] = self.decision["rank"]
            record["rerank_scored"] = len(self.decision["candidates"])
        return record

    def on_resume(self) -> None:
        """Draw the last finished epoch's pictures if a kill after its checkpoint stopped
        them: the checkpoint's theta is that epoch's, and no later epoch redraws them."""
        if self.position == 0 and self.history and not (
                self.paths.pictures / f"theta_epoch{self.epoch:03d}.png").is_file():
            self._draw(self.epoch - 1, self.net.probabilities())

    def epoch_warnings(self) -> list[str]:
        return search_warnings(self.history, self.classes) + self.skip_warnings()

    def epoch_line_extras(self, r: dict) -> list[str]:
        metric = self.cfg.search.cost
        found = (f"found net {format_cost(r['found_cost'], metric)} ({r['found_skips']}/"
                 f"{r['layers']} skip)")
        if "budget_ms" in r:
            found += f" under {r['budget_ms']:.3f} ms"
        if "multiplier" in r:
            found += f" (multiplier {r['multiplier']:+.3f})"
        if "found_val_top1" in r:
            found += f" val top1 {r['found_val_top1']:.2f}%"
        if "rerank_moved" in r:
            by = rule_label(self.cfg.search.rerank_by)
            also = " and per-layer alternatives" if self.cfg.search.rerank_alternatives else ""
            # as many as the window holds, up to search.rerank (older records: the latter)
            scored = r.get("rerank_scored", self.cfg.search.rerank)
            found += (f" (best {by} of {scored} checked, theta's most probable{also}: "
                      f"#{r['rerank_moved'] + 1})")
        return [f"tau {r['temperature']:.3f}", found,
                f"expected {format_cost(r['cost_expected'], metric)}, max p "
                f"{r['theta_decided']:.2f}"]

    def log_epoch_extras(self, epoch: int) -> None:
        w, step = self.writer, epoch + 1
        probs = self.net.probabilities()
        self._draw(epoch, probs)
        for i, p in enumerate(probs):
            entropy = float(-(p * p.clamp_min(1e-12).log()).sum())
            w.add_scalar(f"theta_entropy/layer_{i:02d}", entropy, step)
            w.add_histogram(f"theta_prob/layer_{i:02d}", p, step)
        rows = ["| layer | op | p |", "|---|---|---|"]
        for i, (layer, p) in enumerate(zip(self.net.layers, probs)):
            j = int(p.argmax())
            rows.append(f"| {i} | {layer.candidates[j]} | {float(p[j]):.3f} |")
        w.add_text("argmax_architecture", "\n".join(rows), step)

    def _draw(self, epoch: int, probs: list[torch.Tensor]) -> None:
        """softmax(theta) as a heatmap, and val top-1 and the found network's cost over the
        epochs, as PNGs in RUN_DIR/pictures/ and as figures in TensorBoard."""
        names = [list(layer.candidates) for layer in self.net.layers]
        heat = theta_heatmap([p.tolist() for p in probs], names,
                             f"softmax(theta) after epoch {epoch + 1}")
        h = self.history
        metric = self.cfg.search.cost
        scale, unit = {"latency": (1e-3, "latency (ms)"), "macs": (1e-6, "MACs (millions)")
                       }.get(metric, (1e-6, f"{metric} (millions)"))
        budgets = [r["budget_ms"] for r in h if "budget_ms" in r]
        chart = progress_chart([r["epoch"] for r in h], [r.get("val_top1") for r in h],
                               [r.get("found_cost", r["cost_argmax"]) * scale for r in h],
                               f"search {self.space.name}", f"found net {unit}",
                               found_top1=[r.get("found_val_top1") for r in h],
                               budget=budgets[-1] if budgets else None,
                               budget_unit="ms")
        folder = self.paths.pictures
        for tag, fig, path in (("theta_heatmap", heat, folder / f"theta_epoch{epoch + 1:03d}.png"),
                               ("progress", chart, folder / "progress.png")):
            write_png(path, fig)
            self.writer.add_figure(tag, fig, epoch + 1, close=True)
            fig.clear()

    def summary(self, stopped: bool) -> dict:
        ops = self.found_ops()
        return {**super().summary(stopped), "found_ops": ops, "found_cost": self.net.cost_of(ops)}


def run_search(cfg: Config, out: str | Path, resume: bool = False, force: bool = False,
               stop_after: int | None = None, echo: Callable[[str], None] | None = None
               ) -> dict:
    """Run (or resume) a search into run directory ``out``; return a summary.

    Its lines go to the "fbnas" logger and RUN_DIR/train.log, and also to ``echo`` if given.
    """
    return launch(Search, cfg, out, resume, force, stop_after, echo)


def search_command(config_path: str | Path | None, out: Path, resume: bool, force: bool,
                   overrides: tuple[str, ...], download: bool, options: dict,
                   nproc: int | None = None, command_line: list[tuple[str, object]] = (),
                   echo: Callable[[str], None] = print) -> dict:
    """``fbnas train`` once its options are parsed: the run's config from the file, the
    resumed run, the named ``options`` and ``overrides`` (see ``run_config``), the search,
    and on the first process the lines saying what it found and what to run next. A
    torchrun child ends here once its run has finished (``leave_if_child``).

    With ``nproc`` above 1 this process only starts that many torchrun processes running
    ``fbnas train`` with ``command_line`` (the options as given, for ``relaunch``) and ends
    with their exit code; a bad ``out`` is reported once, before they start."""
    if nproc is not None and nproc > 1:
        check_run_dir(out, resume, force)
        # the launching process holds nothing else to tear down
        exit_without_teardown(relaunch("train", list(command_line), nproc,
                                       options.get("run.threads")))
    cfg = run_config(config_path, out, resume, force, overrides, download, options)
    with console():
        result = run_search(cfg, out, resume=resume, force=force)
    if not result["stopped"] and result["rank"] == 0:
        echo(f"done: {result['epochs_done']} epochs; the found architecture's predicted "
             f"latency is {result['found_cost'] / 1000:.3f} ms"
             if cfg.search.cost == "latency" else f"done: {result['epochs_done']} epochs")
        echo(f"next: fbnas sample {out} --hard")
    leave_if_child()
    return result
