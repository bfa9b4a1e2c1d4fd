"""The epoch loop every fbnas training run shares: steps, evaluation, checkpoints, resume.

A run is a sequence of epochs; an epoch is a deterministic plan of (phase, batch) items
built from (seed, epoch), each phase with its own optimizer. Because the plan and the global
RNG are functions of (seed, epoch, rank), a run resumed at an epoch boundary reproduces the
uninterrupted run exactly; a single-process run stopped with Ctrl-C mid-epoch also records its
position and RNG state, and resumes exactly. The base class trains the "weights" phase and
knows nothing about what a subclass searches: fbnas.search.run.Search adds theta and its phase,
fbnas.runs.retrain.Retrain trains one fixed network. Where the run's files live is fbnas.runs.rundir;
how a run is started, fbnas.runs.launch.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from fbnas.arch.pointwise import bf16_products
from fbnas.config import Config, dump
from fbnas.data.batches import BatchLoader
from fbnas.data.dataset import Dataset
from fbnas.errors import FbnasError, UsageError
from fbnas.io import atomic_write
from fbnas.machine import busy_warning, precision_warning
from fbnas.progress import Progress
from fbnas.runs.checkpoint import CHECKPOINT_FORMAT, check_resumable, save_checkpoint
from fbnas.runs.dist import (DistInfo, align_grad_strides, all_reduce_sum, barrier, ranks_agree,
                             sync_buffers)
from fbnas.runs.health import epoch_warnings
from fbnas.runs.loaders import load_run_data, skipped_files, train_batches
from fbnas.runs.rundir import RunPaths, append_metrics, new_run_id, write_metrics, write_run_id
from fbnas.runs.schedule import cosine_factor
from fbnas.runs.stats import PhaseStats, StepFigures, across_ranks, step_figures

Batch = tuple[torch.Tensor, torch.Tensor]
logger = logging.getLogger(__name__)


def _epoch_seed(seed: int, epoch: int, rank: int) -> int:
    return (seed * 1_000_003 + epoch * 7919 + rank * 104_729) % (2**63 - 1)


class Trainer:
    """The epoch loop with checkpoints, resume, evaluation and logging."""

    kind = "base"
    phases: tuple[str, ...] = ("weights",)
    #: what forward_loss reports beside the loss, in this order: averaged per step (and over
    #: the processes), summed per phase, kept in a mid-epoch checkpoint
    figures: tuple[str, ...] = ("ce",)
    #: the TensorBoard name of the loss and of each figure, under train_PHASE/
    figure_tags: dict[str, str] = {"loss": "loss_total", "ce": "loss_ce"}
    #: the config keys a diverged run should lower
    lr_keys: tuple[str, ...] = ("optim.weights.lr",)
    find_unused_parameters = False
    #: what the epoch line calls the val set's score
    val_label = "val top1"
    #: files in the run directory that this kind of run writes beside the shared ones (a
    #: fresh run removes those an earlier run left)
    own_files: tuple[str, ...] = ()

    # -- to be provided by subclasses ---------------------------------------------------------
    epochs: int
    accumulate: int = 1
    #: the config key that sets ``accumulate``, for the error that refuses it
    accumulate_key = "search.accumulate"
    resolution: int
    in_channels: int = 3
    num_classes: int

    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def build_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        raise NotImplementedError

    def make_train_loaders(self, data: Dataset, splits: dict, **common) -> None:
        raise NotImplementedError

    def plan(self, epoch: int) -> Iterator[tuple[str, Batch]]:
        raise NotImplementedError

    def plan_length(self, epoch: int) -> int:
        raise NotImplementedError

    def forward_loss(self, x: torch.Tensor, y: torch.Tensor, epoch: int, phase: str
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(loss, {name: figure for each name of ``figures``}) of one micro-batch of
        ``phase``; the loss is what backward runs on, a figure may be per image."""
        raise NotImplementedError

    def eval_logits(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def extra_state(self) -> dict:
        return {}

    def before_step(self, phase: str) -> None:
        """Called before each optimizer step of ``phase``, its gradients complete."""

    def after_step(self, phase: str) -> None:
        """Called after each optimizer step of ``phase`` (state that follows the steps)."""

    def check_resume_parts(self, ckpt: dict, where: str) -> None:
        """Refuse a checkpoint to resume from whose own parts (what this kind of run keeps
        beside the weights) are missing or unusable; runs before its weights are checked.
        ``where`` starts the error."""

    def check_with_data(self) -> None:
        """Checks of the run's other inputs that wait for its data to be found: a user fixes a
        missing data folder first, so it is the first thing reported."""

    def check_resume(self, ckpt: dict) -> None:
        """Refuse a checkpoint that belongs to a different run setup (one that is unusable
        in itself, truncated or not finite, is refused before this is called)."""

    def epoch_extras(self, epoch: int) -> dict:
        """Cheap figures of the current state, for the epoch record and every logged step."""
        return {}

    def epoch_evaluation(self, epoch: int) -> dict:
        """Figures worth an evaluation pass, once per epoch (after the val set's)."""
        return {}

    def describe(self) -> str:
        raise NotImplementedError

    def log_epoch_extras(self, epoch: int) -> None:
        """Per-epoch TensorBoard entries beyond the scalars of the epoch record."""

    def epoch_line_extras(self, record: dict) -> list[str]:
        return []

    def on_resume(self) -> None:
        """Called once when a run resumes, with the run directory ready: redo what a kill
        between the checkpoint and the end of an epoch's logging left undone."""

    def epoch_warnings(self) -> list[str]:
        """One-line warnings after an epoch: how the run is going wrong, if it is."""
        return epoch_warnings(self.history, self.classes) + self.skip_warnings()

    def loaders(self) -> list[BatchLoader]:
        """Every loader of the run (train, theta, evaluation, recalibration)."""
        return [v for v in vars(self).values() if isinstance(v, BatchLoader)]

    def skip_warnings(self) -> list[str]:
        """A line when files skipped under data.skip_bad were found since the last one."""
        skipped = skipped_files(self.data, self.loaders())
        new = skipped[self._skips_reported:]
        # a line for what the scan found (headers, links, empty folders), one for what failed
        # to decode (before training, or in a batch)
        decoded = [w for w in new if w[1].startswith("cannot be decoded")]
        lines = []
        for group in ([w for w in new if w not in decoded], decoded):
            if group:
                self._skips_reported += len(group)
                path, why = group[0]
                lines.append(f"skipped {len(group)} unreadable file(s) or empty class folder(s) "
                             f"(data.skip_bad; {self._skips_reported} in all), first {path}: "
                             f"{why}")
        return lines

    def phase_record(self, phase: str, mean: StepFigures) -> dict:
        """The epoch record's figures of one phase, from the mean of its step figures."""
        return {f"{phase}_loss": mean["loss"], f"{phase}_ce": mean["ce"]}

    def setup(self, ckpt: dict | None) -> None:
        """Resolve what the model is built from (space, table, definition); ``ckpt`` is the
        checkpoint being resumed, or None."""

    def lr_warmup_epochs(self) -> float:
        """Epochs of linear learning-rate warm-up before the cosine schedule."""
        return self.cfg.optim.weights.warmup_epochs

    def apply_hyperparameters(self) -> None:
        """Make the config win over the hyperparameters stored in a resumed optimizer state,
        so that a run can be resumed with, say, a lower learning rate. A subclass with more
        optimizers (or parameter groups with their own settings) extends this."""
        ow = self.cfg.optim.weights
        self.scheduler.base_lrs = [ow.lr for _ in self.optimizers["weights"].param_groups]
        factor = self.scheduler.lr_lambdas[0](self.scheduler.last_epoch)
        for g in self.optimizers["weights"].param_groups:
            g.update(initial_lr=ow.lr, lr=ow.lr * factor, momentum=ow.momentum,
                     weight_decay=ow.weight_decay, nesterov=ow.nesterov)

    def write_run_files(self) -> None:
        """At the start (or resume) of a run, once its folder exists: the resolved config and
        metrics.jsonl as far as the run got."""
        atomic_write(self.paths.config, lambda p: p.write_text(dump(self.cfg)))
        write_metrics(self.paths, self.history)
        write_run_id(self.paths, self.run_id)

    # -- setup ---------------------------------------------------------------------------------
    def __init__(self, cfg: Config, paths: RunPaths, info: DistInfo, device: torch.device,
                 ckpt: dict | None):
        self.cfg, self.paths, self.info, self.device = cfg, paths, info, device
        # the run's identity, kept in every checkpoint and in RUN_DIR/run_id (a run saved
        # before ids existed takes one when resumed)
        self.run_id = (ckpt or {}).get("run_id") or new_run_id()
        self.setup(ckpt)
        if ckpt is not None:
            check_resumable(ckpt, f"checkpoint {self.paths.last}", self.check_resume_parts)
            self.check_resume(ckpt)
        self._load_data()
        self.check_with_data()
        if ckpt is not None:
            self._check_same_data(ckpt)
        torch.manual_seed(cfg.run.seed)
        self.net = self.build_model().to(device)
        self.model = self.net
        if info.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            align_grad_strides(self.net)
            # every trained parameter, of every phase, belongs to the wrapped module, so all
            # their gradients are averaged; BN buffers are averaged at epoch ends instead of
            # broadcast from rank 0 at every forward
            self.model = DDP(self.net, device_ids=[device.index] if device.type == "cuda" else None,
                             find_unused_parameters=self.find_unused_parameters,
                             forward_sync_buffers=False)
        self.optimizers = self.build_optimizers()
        ow = cfg.optim.weights
        steps = max(1, len(self.train_loader) // self.accumulate)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizers["weights"],
            cosine_factor(steps, self.epochs, self.lr_warmup_epochs(), ow.min_lr / ow.lr))
        self.epoch = 0
        self.position = 0  # plan items already done in the current epoch
        self.epoch_stats = {p: PhaseStats.of(self.figures) for p in self.phases}  # their sums
        self.global_step = 0
        self.history: list[dict] = []
        self.rng_state = None
        self.rng_cuda = None
        if ckpt is not None:
            self._restore(ckpt)
        self.stop_requested = False
        self.writer = None

    def log(self, msg: str) -> None:
        """One line to the fbnas logger (from the main process only)."""
        if self.info.is_main:
            logger.info(msg)

    def warn(self, msg: str) -> None:
        if self.info.is_main:
            logger.warning(f"warning: {msg}")

    def precision(self):
        """The context a training step's forward runs in: bfloat16 autocast under
        ``run.precision: bf16`` (losses and softmaxes stay fp32, as autocast keeps them),
        bfloat16 1x1 conv products under ``bf16_products`` on a CPU."""
        if self.cfg.run.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        if self.cfg.run.precision == "bf16_products" and self.device.type == "cpu":
            return bf16_products()
        return nullcontext()

    def _load_data(self) -> None:
        rd = load_run_data(self.cfg, self.info, self.device, self.resolution, self.num_classes,
                           self.in_channels)
        self.classes, self.splits, self.data = rd.classes, rd.splits, rd.data
        self._skips_reported = 0
        self.make_train_loaders(rd.data, rd.splits, **rd.common)
        self.val_loader, self.test_loader = rd.val_loader, rd.test_loader
        self._check_accumulation()

    def _check_same_data(self, ckpt: dict) -> None:
        """Refuse to resume on training data of another size: the splits and every batch
        order are drawn from the image count, so the resumed run would silently train on
        other images (an image skipped under data.skip_bad since the stop, for one).
        Checkpoints from before the count was kept resume unchecked."""
        saved, now = ckpt.get("train_images"), len(self.data.train_labels)
        if isinstance(saved, int) and not isinstance(saved, bool) and saved != now:
            raise FbnasError(f"cannot resume: the training data now has {now} images, the run "
                             f"started with {saved} (images were added, removed or became "
                             "unreadable since); restore the data and resume, or start over "
                             "with --force")

    def _check_accumulation(self) -> None:
        """Refuse an ``accumulate`` above the batches a phase gets in an epoch, whatever the
        plan's alternation: that phase's optimizer would never step. The plans of the first
        and the last epoch (warm-up and not) are run on batch tokens and counted."""
        k = self.accumulate
        if k <= 1:
            return
        loaders = self.loaders()
        for ld in loaders:
            ld.dry_run(True)
        try:
            for epoch in sorted({0, self.epochs - 1}):
                counts: dict[str, int] = {}
                for phase, _ in self.plan(epoch):
                    counts[phase] = counts.get(phase, 0) + 1
                # a phase without batches is one the plan leaves out of that epoch (theta
                # during warm-up); an empty plan never steps at all
                short = [(p, n) for p, n in counts.items() if n < k] or \
                    ([] if counts else [(self.phases[0], 0)])
                if short:
                    phase, n = short[0]
                    raise UsageError(
                        f"{self.accumulate_key} ({k}) is above the {n} {phase} batches of "
                        f"epoch {epoch + 1}, so its optimizer would never step; use at most "
                        f"--set {self.accumulate_key}={max(1, n)}, or larger splits or "
                        "smaller batches")
        finally:
            for ld in loaders:
                ld.dry_run(False)

    def train_batches(self, data: Dataset, indices: torch.Tensor, seed: int, **common
                      ) -> BatchLoader:
        """A shuffled, augmented (unless data.augment is false) loader over ``indices``."""
        return train_batches(self.cfg, data, indices, seed, **common)

    # -- checkpoints -------------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "format": CHECKPOINT_FORMAT, "kind": self.kind, "epoch": self.epoch,
            "position": self.position, "global_step": self.global_step,
            "config": self.cfg.to_dict(), "run_id": self.run_id,
            "model": self.net.state_dict(),
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "scheduler": self.scheduler.state_dict(),
            "rng_torch": torch.get_rng_state() if self.position else None,
            # Gumbel noise and dropout on a GPU draw from its own generator
            "rng_cuda": (torch.cuda.get_rng_state(self.device)
                         if self.position and self.device.type == "cuda" else None),
            "history": self.history, "world_size": self.info.world_size,
            "train_images": len(self.data.train_labels),
            # mid-epoch: the sums so far, so that the resumed epoch's record covers all of it
            "epoch_stats": ({p: st.to_dict() for p, st in self.epoch_stats.items()}
                            if self.position else None),
            **self.extra_state(),
        }

    def _restore(self, ckpt: dict) -> None:
        try:
            self.net.load_state_dict(ckpt["model"])
            for k, opt in self.optimizers.items():
                opt.load_state_dict(ckpt["optimizers"][k])
            self.scheduler.load_state_dict(ckpt["scheduler"])
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise FbnasError(f"cannot resume from {self.paths.last}: it does not match this "
                             f"run's model or optimizers ({first[:200]}); start over with "
                             "--force") from None
        self.apply_hyperparameters()
        self.epoch, self.position = int(ckpt["epoch"]), int(ckpt.get("position") or 0)
        self.global_step = int(ckpt.get("global_step", 0))
        self.history = list(ckpt.get("history", []))
        self.rng_state = ckpt.get("rng_torch")
        self.rng_cuda = ckpt.get("rng_cuda")
        sums = ckpt.get("epoch_stats")
        if self.position and isinstance(sums, dict):
            try:
                self.epoch_stats = {p: PhaseStats.from_dict(sums[p], self.figures)
                                    for p in self.phases}
            except (KeyError, TypeError, ValueError):
                raise FbnasError(f"cannot resume from {self.paths.last}: its epoch_stats are "
                                 "damaged; start over with --force") from None
        if self.position and ckpt.get("world_size", 1) != self.info.world_size:
            raise FbnasError("this checkpoint was saved mid-epoch by a run with a different "
                             "number of processes; resume it with the same number")

    def save(self) -> None:
        if self.info.is_main:
            save_checkpoint(self.state(), self.paths.last)

    # -- one epoch ---------------------------------------------------------------------------
    def _fast_forward(self, epoch: int) -> None:
        """Before a resumed epoch: tell each loader how many leading batches of each of its
        iterations the first ``position`` items of the plan use, found by running the plan
        on batch tokens, so that a loader that can (a streamed folder) does not decode them."""
        loaders = self.loaders()
        for ld in loaders:
            ld.dry_run(True)
        used: dict[tuple[int, int], int] = {}
        try:
            for _, (_, (ld, it, k)) in zip(range(self.position), self.plan(epoch)):
                used[id(ld), it] = max(used.get((id(ld), it), 0), k + 1)
        finally:
            counts = {id(ld): ld._iterations for ld in loaders}
            for ld in loaders:
                ld.dry_run(False)
        for ld in loaders:
            ld.skip_leading([used.get((id(ld), it), 0) for it in range(counts[id(ld)])])

    def train_epoch(self, epoch: int) -> dict[str, PhaseStats]:
        cfg, k = self.cfg, self.accumulate
        if not self.position:  # a resumed epoch goes on from the checkpoint's sums
            self.epoch_stats = {p: PhaseStats.of(self.figures) for p in self.phases}
        stats = self.epoch_stats
        micro = {p: 0 for p in self.phases}
        self.model.train()
        progress = Progress(self.plan_length(epoch) - self.position, f"epoch {epoch + 1}",
                            enabled=cfg.run.progress and self.info.is_main, interval=60)
        if self.position:
            self._fast_forward(epoch)
        for item, (phase, batch) in enumerate(self.plan(epoch)):
            if item < self.position:
                continue
            x, y = batch
            opt = self.optimizers[phase]
            if micro[phase] % k == 0:
                self.model.zero_grad(set_to_none=True)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            last_micro = (micro[phase] + 1) % k == 0
            # DDP averages gradients in backward: accumulate micro-batches locally and
            # average once, in the backward of the last micro-batch of each step
            sync = nullcontext() if last_micro or not self.info.enabled else self.model.no_sync()
            with sync:
                with self.precision():
                    loss, figures = self.forward_loss(x, y, epoch, phase)
                step = across_ranks(step_figures(loss, figures), self.info, self.device)
                if step is None:
                    raise self._diverged(epoch, item, phase)
                (loss / k).backward()
            micro[phase] += 1
            if last_micro:
                self.before_step(phase)
                opt.step()
                if phase == "weights":
                    self.scheduler.step()
                self.after_step(phase)
                self.global_step += 1
            stats[phase].add(step)
            self.position = item + 1
            progress.update()
            if self.writer is not None and self.global_step % cfg.run.log_every == 0 \
                    and micro[phase] % k == 0:
                self._log_step(phase, stats[phase].mean(), epoch)
            if self.stop_requested and all(m % k == 0 for m in micro.values()):
                break
        progress.close()
        for ld in self.loaders():
            ld.skip_leading([])
        return stats

    def _diverged(self, epoch: int, item: int, phase: str) -> FbnasError:
        where = f"at epoch {epoch + 1}, step {item + 1} ({phase} phase)"
        if self.info.enabled:
            where += " on at least one process"
        lower = f"Lower {' or '.join(self.lr_keys)}"
        fix = (f"{lower} and resume; the last good checkpoint {self.paths.last} is intact"
               if self.paths.last.is_file() else f"{lower} and start again")
        err = FbnasError(f"the loss is not finite {where}. {fix}")
        err.on_every_rank = True  # every rank saw the same all-reduced flag
        return err

    def scores_epoch(self, epoch: int) -> bool:
        """Whether ``epoch`` ends with a val evaluation (a search may skip some)."""
        return True

    @torch.no_grad()
    def evaluate(self, loader: BatchLoader, logits_of=None) -> dict:
        """Deterministic top-1/top-5 accuracy and cross-entropy over ``loader``, of
        ``logits_of`` (default: :meth:`eval_logits`)."""
        logits_of = logits_of or self.eval_logits
        self.net.eval()
        top_k = min(5, self.classes)
        correct1 = correct5 = ce_sum = count = 0.0
        for x, y in loader:
            x, y = x.to(self.device), y.to(self.device)
            logits = logits_of(x)
            ce_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            top = logits.topk(top_k, dim=1).indices
            correct1 += float((top[:, 0] == y).sum())
            correct5 += float((top == y[:, None]).any(dim=1).sum())
            count += y.numel()
        correct1, correct5, ce_sum, count = all_reduce_sum([correct1, correct5, ce_sum, count],
                                                           self.info, self.device)
        n = max(count, 1)
        return {"top1": 100 * correct1 / n, f"top{top_k}": 100 * correct5 / n, "ce": ce_sum / n,
                "images": int(count)}

    # -- logging -----------------------------------------------------------------------------
    def _log_step(self, phase: str, mean: StepFigures, epoch: int) -> None:
        """Running means of the phase so far in this epoch."""
        w, step = self.writer, self.global_step
        for name, tag in self.figure_tags.items():
            w.add_scalar(f"train_{phase}/{tag}", mean[name], step)
        for name, opt in self.optimizers.items():
            w.add_scalar(f"lr/{name}", opt.param_groups[0]["lr"], step)
        for key, value in self.epoch_extras(epoch).items():
            w.add_scalar(key, value, step)

    def _log_epoch(self, epoch: int, record: dict) -> None:
        if self.writer is None:
            return
        for key, value in record.items():
            if isinstance(value, (int, float)) and key != "epoch":
                self.writer.add_scalar(f"epoch/{key}", value, epoch + 1)
        self.log_epoch_extras(epoch)
        self.writer.flush()

    def _epoch_record(self, epoch: int, stats: dict[str, PhaseStats], seconds: float) -> dict:
        # the step figures are already averages over the ranks
        record = {"epoch": epoch + 1, "seconds": seconds, "processes": self.info.world_size}
        for p in self.phases:
            if stats[p].items:
                record.update(self.phase_record(p, stats[p].mean()))
        if self.info.enabled:
            sync_buffers(self.net, self.info)
            if not ranks_agree(self.net, self.info):
                raise FbnasError(f"after epoch {epoch + 1} the processes hold different weights "
                                 "or theta; this is a bug, please report it with your config")
            record["ranks_identical"] = True
        if self.val_loader is not None:
            if self.scores_epoch(epoch):
                ev = self.evaluate(self.val_loader)
                record.update({f"val_{k}": v for k, v in ev.items() if k != "images"})
            else:
                record["val_skipped"] = True  # the health checks then know why none is there
        record.update(self.epoch_extras(epoch))
        record.update(self.epoch_evaluation(epoch))
        return record

    def _epoch_line(self, r: dict) -> str:
        done = [p for p in self.phases if f"{p}_loss" in r]
        parts = [f"epoch {r['epoch']}/{self.epochs} [{'+'.join(done)}]"]
        for p in done:
            parts.append(f"{p} loss {r[f'{p}_loss']:.3f} (ce {r[f'{p}_ce']:.3f})")
        if "val_top1" in r:
            k = next(x for x in r if x.startswith("val_top") and x != "val_top1")
            parts.append(f"{self.val_label} {r['val_top1']:.2f}% {k[4:]} {r[k]:.2f}%")
        parts += self.epoch_line_extras(r)
        parts.append(f"{r['seconds']:.1f}s")
        return " | ".join(parts)

    # -- the run -----------------------------------------------------------------------------
    def run(self, stop_after: int | None = None) -> dict:
        cfg = self.cfg
        if self.info.is_main:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.paths.tensorboard))
        if self.epoch == 0 and self.position == 0:
            self.log(self.describe())
            self.log(f"data: {self.data.how}")
            for warning in (busy_warning(self.cfg.run.threads, "training"),
                            precision_warning(self.cfg.run.precision, self.device)):
                if warning:
                    self.warn(warning)
            for warning in self.skip_warnings():  # what the scan of a folder skipped
                self.warn(warning)
        elif self.epoch >= self.epochs and self.position == 0:
            self.log(f"run {self.paths.root} already finished all {self.epoch} epochs; nothing "
                     "to resume (use --force to start over)")
        else:
            self.log(f"resuming at epoch {self.epoch + 1}"
                     + (f", item {self.position}" if self.position else ""))
        if self.epoch and self.info.is_main:
            self.on_resume()
        done_now = 0
        try:
            with self._interrupt_guard():
                while self.epoch < self.epochs:
                    epoch = self.epoch
                    if self.position and self.rng_state is not None:
                        torch.set_rng_state(self.rng_state)
                        if self.rng_cuda is not None and self.device.type == "cuda":
                            torch.cuda.set_rng_state(self.rng_cuda, self.device)
                    else:
                        torch.manual_seed(_epoch_seed(cfg.run.seed, epoch, self.info.rank))
                    started = time.monotonic()
                    stats = self.train_epoch(epoch)
                    if self.stop_requested and self.position < self.plan_length(epoch):
                        self.save()
                        self.log(f"stopped at epoch {epoch + 1}, item {self.position}; saved "
                                 f"{self.paths.last}; continue with --resume")
                        return self.summary(stopped=True)
                    record = self._epoch_record(epoch, stats, time.monotonic() - started)
                    self.history.append(record)
                    self.epoch, self.position, self.rng_state = epoch + 1, 0, None
                    self.rng_cuda = None
                    self.save()
                    barrier(self.info)
                    if self.info.is_main:
                        append_metrics(self.paths, record)
                    self._log_epoch(epoch, record)
                    self.log(self._epoch_line(record))
                    for warning in self.epoch_warnings():
                        self.warn(warning)
                    done_now += 1
                    if self.stop_requested or (stop_after is not None and done_now >= stop_after):
                        if self.epoch < self.epochs:
                            self.log(f"stopped after epoch {self.epoch}; saved {self.paths.last}; "
                                     "continue with --resume")
                        return self.summary(stopped=self.epoch < self.epochs)
            result = self.summary(stopped=False)
            if self.test_loader is not None:
                test = self.evaluate(self.test_loader)
                result["test"] = test
                self.log(f"test set (reporting only, never used for choices): top1 "
                         f"{test['top1']:.2f}% on {test['images']} images")
            return result
        finally:
            if self.writer is not None:
                self.writer.close()

    def summary(self, stopped: bool) -> dict:
        return {"epochs_done": self.epoch, "stopped": stopped, "checkpoint": str(self.paths.last),
                "history": self.history}

    @contextmanager
    def _interrupt_guard(self):
        """First Ctrl-C: finish the step, save, stop. A second one aborts at once."""
        if self.info.enabled or threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            if self.stop_requested:
                raise KeyboardInterrupt
            self.stop_requested = True
            self.log("interrupt: stopping after this step and saving (Ctrl-C again to abort)")

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
