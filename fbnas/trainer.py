"""What every fbnas training run shares: run directory, data, checkpoints, resume, logging.

A run is a sequence of epochs; an epoch is a deterministic plan of (phase, batch) items
built from (seed, epoch), each phase with its own optimizer ("weights", and "theta" for a
search). Because the plan and the global RNG are functions of (seed, epoch, rank), a run
resumed at an epoch boundary reproduces the uninterrupted run exactly; a single-process run
stopped with Ctrl-C mid-epoch also records its position and RNG state, and resumes exactly.
Subclasses (fbnas.search.Search, fbnas.retrain.Retrain) supply the model, the plan and the loss.
"""

from __future__ import annotations

import math
import shutil
import signal
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from fbnas.checkpoint import CHECKPOINT_FORMAT, load_checkpoint
from fbnas.config import Config, dump, from_dict
from fbnas.data import BatchLoader, Dataset, load_dataset, make_splits
from fbnas.dist import (DistInfo, all_reduce_sum, barrier, init_from_env, peer_failed,
                        ranks_agree, run_on_main, shutdown, sync_buffers)
from fbnas.errors import FbnasError
from fbnas.health import epoch_warnings
from fbnas.io import atomic_write
from fbnas.progress import Progress

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def last(self) -> Path:
        return self.checkpoints / "last.pt"


def prepare_run_dir(out: Path, resume: bool, force: bool, clear: bool = True) -> RunPaths:
    """Refuse to mix two runs in one folder unless the user asked to resume or overwrite."""
    paths = RunPaths(Path(out))
    if out.exists() and not out.is_dir():
        raise FbnasError(f"run directory {out} is a file; pick another --out")
    if resume:
        if not paths.last.is_file():
            raise FbnasError(f"nothing to resume: {paths.last} does not exist")
        return paths
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise FbnasError(f"run directory {out} is not empty; pass --resume to continue the "
                             "run in it or --force to start over")
        if clear:
            for p in (paths.checkpoints, paths.tensorboard):
                shutil.rmtree(p, ignore_errors=True)
            for p in (paths.config, paths.log):
                p.unlink(missing_ok=True)
    return paths


def save_checkpoint(state: dict, path: Path) -> None:
    atomic_write(path, lambda p: torch.save(state, p))


def pick_device(name: str, info: DistInfo) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise FbnasError("--device cuda was asked for but no CUDA device is available; "
                             "use --device cpu")
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


def _epoch_seed(seed: int, epoch: int, rank: int) -> int:
    return (seed * 1_000_003 + epoch * 7919 + rank * 104_729) % (2**63 - 1)


class Logger:
    """Console lines (rank 0) mirrored into the run's log file."""

    def __init__(self, path: Path | None, echo: Callable[[str], None]):
        self.path, self.echo = path, echo

    def __call__(self, msg: str) -> None:
        self.echo(msg)
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(time.strftime("%Y-%m-%d %H:%M:%S ") + msg + "\n")


def cosine_factor(steps_per_epoch: int, epochs: int, warmup_epochs: float, floor: float
                  ) -> Callable[[int], float]:
    """LR multiplier per optimizer step: linear warm-up, then cosine down to ``floor``."""
    total = steps_per_epoch * epochs
    warm = int(round(warmup_epochs * steps_per_epoch))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        progress = min(1.0, (step - warm) / max(1, total - warm))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


class Trainer:
    """The epoch loop with checkpoints, resume, evaluation and logging."""

    kind = "base"
    phases: tuple[str, ...] = ("weights",)

    # -- to be provided by subclasses ---------------------------------------------------------
    epochs: int
    accumulate: int = 1
    resolution: int
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

    def forward_loss(self, x: torch.Tensor, y: torch.Tensor, epoch: int, phase: str):
        """(loss, ce, cost or None, cost factor or None) of one micro-batch of ``phase``."""
        raise NotImplementedError

    def eval_logits(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def extra_state(self) -> dict:
        return {}

    def check_resume(self, ckpt: dict) -> None:
        """Refuse a checkpoint that belongs to a different run setup."""

    def epoch_extras(self, epoch: int) -> dict:
        return {}

    def describe(self) -> str:
        raise NotImplementedError

    def log_epoch_extras(self, epoch: int) -> None:
        """Per-epoch TensorBoard entries beyond the scalars of the epoch record."""

    def epoch_line_extras(self, record: dict) -> list[str]:
        return []

    # -- setup ---------------------------------------------------------------------------------
    def __init__(self, cfg: Config, paths: RunPaths, info: DistInfo, device: torch.device,
                 echo: Callable[[str], None], ckpt: dict | None):
        self.cfg, self.paths, self.info, self.device = cfg, paths, info, device
        self.log = Logger(paths.log if info.is_main else None,
                          echo if info.is_main else (lambda m: None))
        self.setup()
        if ckpt is not None:
            self.check_resume(ckpt)
        self._load_data()
        torch.manual_seed(cfg.run.seed)
        self.net = self.build_model().to(device)
        self.model = self.net
        if info.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            # theta is a parameter of the wrapped module, so its gradients are averaged like
            # the weights'; BN buffers are averaged at epoch ends instead of broadcast from
            # rank 0 at every forward
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
        self.global_step = 0
        self.history: list[dict] = []
        self.rng_state = None
        if ckpt is not None:
            self._restore(ckpt)
        self.stop_requested = False
        self.writer = None

    def setup(self) -> None:
        """Resolve what the model is built from (space, table, definition)."""

    def lr_warmup_epochs(self) -> float:
        """Epochs of linear learning-rate warm-up before the cosine schedule."""
        return self.cfg.optim.weights.warmup_epochs

    find_unused_parameters = False

    def _load_data(self) -> None:
        cfg, info = self.cfg, self.info
        data = load_dataset(cfg.data.dir, cfg.data.kind, cfg.data.resolution)
        if data.resolution != self.resolution:
            raise FbnasError(f"the data is {data.resolution}x{data.resolution} but the network "
                             f"expects {self.resolution}x{self.resolution} inputs")
        self.classes = len(data.classes)
        if self.classes != self.num_classes:
            raise FbnasError(f"the data has {self.classes} classes but the network's head has "
                             f"{self.num_classes}")
        n = data.train_images.shape[0]
        if cfg.data.limit:
            n = min(n, cfg.data.limit)
        self.splits = make_splits(n, cfg.run.seed, cfg.data.theta_fraction, cfg.data.val_fraction)
        common = dict(mean=data.mean, std=data.std, rank=info.rank, world_size=info.world_size,
                      device=self.device)
        self.make_train_loaders(data, self.splits, **common)
        self.val_loader = self._eval_batches(data.train_images, data.train_labels,
                                             self.splits["val"], common)
        self.test_loader = None
        if data.has_test:
            self.test_loader = self._eval_batches(data.test_images, data.test_labels,
                                                  torch.arange(data.test_images.shape[0]), common)

    def _eval_batches(self, images, labels, indices, common) -> BatchLoader | None:
        """Each rank scores a disjoint share, unpadded, so summed counts cover every image once."""
        share = indices[self.info.rank::self.info.world_size]
        if not len(share):
            return None
        opts = {**common, "rank": 0, "world_size": 1}
        return BatchLoader(images, labels, share, self.cfg.data.eval_batch_size, train=False,
                           seed=0, drop_last=False, **opts)

    def train_batches(self, data: Dataset, indices: torch.Tensor, seed: int, **common
                      ) -> BatchLoader:
        """A shuffled, augmented (unless data.augment is false) loader over ``indices``."""
        aug = self.cfg.data.augment
        return BatchLoader(data.train_images, data.train_labels, indices,
                           self.cfg.data.batch_size, train=True, seed=seed, drop_last=True,
                           padding=4 if aug else 0, flip=aug, **common)

    # -- checkpoints -------------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "format": CHECKPOINT_FORMAT, "kind": self.kind, "epoch": self.epoch,
            "position": self.position, "global_step": self.global_step,
            "config": self.cfg.to_dict(), "model": self.net.state_dict(),
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "scheduler": self.scheduler.state_dict(),
            "rng_torch": torch.get_rng_state() if self.position else None,
            "history": self.history, "world_size": self.info.world_size,
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
        self._apply_hyperparameters()
        self.epoch, self.position = int(ckpt["epoch"]), int(ckpt.get("position") or 0)
        self.global_step = int(ckpt.get("global_step", 0))
        self.history = list(ckpt.get("history", []))
        self.rng_state = ckpt.get("rng_torch")
        if self.position and ckpt.get("world_size", 1) != self.info.world_size:
            raise FbnasError("this checkpoint was saved mid-epoch by a run with a different "
                             "number of processes; resume it with the same number")

    def _apply_hyperparameters(self) -> None:
        """Make the config win over the hyperparameters stored in a resumed optimizer state,
        so that a run can be resumed with, say, a lower learning rate."""
        ow, ot = self.cfg.optim.weights, self.cfg.optim.theta
        self.scheduler.base_lrs = [ow.lr for _ in self.optimizers["weights"].param_groups]
        factor = self.scheduler.lr_lambdas[0](self.scheduler.last_epoch)
        for g in self.optimizers["weights"].param_groups:
            g.update(initial_lr=ow.lr, lr=ow.lr * factor, momentum=ow.momentum,
                     weight_decay=ow.weight_decay, nesterov=ow.nesterov)
        if "theta" in self.optimizers:
            for g in self.optimizers["theta"].param_groups:
                g.update(lr=ot.lr, betas=(ot.beta1, ot.beta2), weight_decay=ot.weight_decay)

    def save(self) -> None:
        if self.info.is_main:
            save_checkpoint(self.state(), self.paths.last)

    # -- one epoch ---------------------------------------------------------------------------
    def train_epoch(self, epoch: int) -> dict:
        cfg, k = self.cfg, self.accumulate
        # per phase: loss, ce, sampled cost, cost factor of the loss, items
        sums = {p: [0.0, 0.0, 0.0, 0.0, 0] for p in self.phases}
        micro = {p: 0 for p in self.phases}
        self.model.train()
        progress = Progress(self.plan_length(epoch) - self.position, f"epoch {epoch + 1}",
                            enabled=cfg.run.progress and self.info.is_main, interval=60)
        for item, (phase, (x, y)) in enumerate(self.plan(epoch)):
            if item < self.position:
                continue
            opt = self.optimizers[phase]
            if micro[phase] % k == 0:
                self.model.zero_grad(set_to_none=True)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            last_micro = (micro[phase] + 1) % k == 0
            # DDP averages gradients in backward: accumulate micro-batches locally and
            # average once, in the backward of the last micro-batch of each step
            sync = nullcontext() if last_micro or not self.info.enabled else self.model.no_sync()
            with sync:
                loss, ce, cost, factor = self.forward_loss(x, y, epoch, phase)
                values = self._step_values(loss, ce, cost, factor)
                if values is None:
                    raise self._diverged(epoch, item, phase)
                (loss / k).backward()
            micro[phase] += 1
            if last_micro:
                opt.step()
                if phase == "weights":
                    self.scheduler.step()
                self.global_step += 1
            s = sums[phase]
            for i, v in enumerate(values):
                s[i] += v
            s[4] += 1
            self.position = item + 1
            progress.update()
            if self.writer is not None and self.global_step % cfg.run.log_every == 0 \
                    and micro[phase] % k == 0:
                self._log_step(phase, *(v / s[4] for v in s[:4]), cost is not None, epoch)
            if self.stop_requested and all(m % k == 0 for m in micro.values()):
                break
        progress.close()
        return sums

    def _step_values(self, loss, ce, cost, factor) -> list[float] | None:
        """(loss, CE, cost, cost factor) of this step averaged over ranks, or None if any rank's
        loss is not finite: one small all-reduce per step, so that a NaN on one rank stops
        every rank together instead of leaving the others waiting in backward."""
        vals = [float(loss.detach()), float(ce.detach().mean()),
                float(cost.detach().mean()) if cost is not None else 0.0,
                float(factor.detach().mean()) if factor is not None else 0.0]
        bad = not all(math.isfinite(v) for v in vals)
        if not self.info.enabled:
            return None if bad else vals
        total = all_reduce_sum([0.0 if bad else v for v in vals] + [float(bad)], self.info,
                               self.device)
        if total[4]:
            return None
        return [v / self.info.world_size for v in total[:4]]

    def _diverged(self, epoch: int, item: int, phase: str) -> FbnasError:
        where = f"at epoch {epoch + 1}, step {item + 1} ({phase} phase)"
        if self.info.enabled:
            where += " on at least one process"
        fix = ("Lower optim.weights.lr or optim.theta.lr and resume; the last good checkpoint "
               f"{self.paths.last} is intact" if self.paths.last.is_file() else
               "Lower optim.weights.lr or optim.theta.lr and start again")
        err = FbnasError(f"the loss is not finite {where}. {fix}")
        err.on_every_rank = True  # every rank saw the same all-reduced flag
        return err

    @torch.no_grad()
    def evaluate(self, loader: BatchLoader) -> dict:
        """Deterministic top-1/top-5 accuracy and cross-entropy over ``loader``."""
        self.net.eval()
        top_k = min(5, self.classes)
        correct1 = correct5 = ce_sum = count = 0.0
        for x, y in loader:
            x, y = x.to(self.device), y.to(self.device)
            logits = self.eval_logits(x)
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
    def _log_step(self, phase: str, loss: float, ce: float, cost: float, factor: float,
                  has_cost: bool, epoch: int) -> None:
        """Running means of the phase so far in this epoch."""
        w, step = self.writer, self.global_step
        w.add_scalar(f"train_{phase}/loss_total", loss, step)
        w.add_scalar(f"train_{phase}/loss_ce", ce, step)
        if has_cost:
            w.add_scalar(f"train_{phase}/loss_cost_factor", factor, step)
            w.add_scalar(f"train_{phase}/cost_sampled", cost, step)
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

    def _epoch_record(self, epoch: int, sums: dict, seconds: float) -> dict:
        flat = []
        for p in self.phases:
            s = sums[p]
            flat += [s[0], s[1], s[2], s[4]]
        vals = flat  # per-step values are already averages over the ranks
        record = {"epoch": epoch + 1, "seconds": seconds, "processes": self.info.world_size}
        for i, p in enumerate(self.phases):
            loss, ce, cost, n = vals[4 * i: 4 * i + 4]
            if n:
                record.update({f"{p}_loss": loss / n, f"{p}_ce": ce / n})
                if p == "theta":
                    record["theta_cost_sampled"] = cost / n
        if self.info.enabled:
            sync_buffers(self.net, self.info)
            if not ranks_agree(self.net, self.info):
                raise FbnasError(f"after epoch {epoch + 1} the processes hold different weights "
                                 "or theta; this is a bug, please report it with your config")
            record["ranks_identical"] = True
        if self.val_loader is not None:
            ev = self.evaluate(self.val_loader)
            record.update({f"val_{k}": v for k, v in ev.items() if k != "images"})
        record.update(self.epoch_extras(epoch))
        return record

    def _epoch_line(self, r: dict) -> str:
        done = [p for p in self.phases if f"{p}_loss" in r]
        parts = [f"epoch {r['epoch']}/{self.epochs} [{'+'.join(done)}]"]
        for p in done:
            parts.append(f"{p} loss {r[f'{p}_loss']:.3f} (ce {r[f'{p}_ce']:.3f})")
        if "val_top1" in r:
            k = next(x for x in r if x.startswith("val_top") and x != "val_top1")
            parts.append(f"val top1 {r['val_top1']:.2f}% {k[4:]} {r[k]:.2f}%")
        parts += self.epoch_line_extras(r)
        parts.append(f"{r['seconds']:.1f}s")
        return " | ".join(parts)

    # -- the run -----------------------------------------------------------------------------
    def run(self, stop_after: int | None = None) -> dict:
        cfg = self.cfg
        if self.info.is_main:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.paths.tensorboard))
            atomic_write(self.paths.config, lambda p: p.write_text(dump(cfg)))
        if self.epoch == 0 and self.position == 0:
            self.log(self.describe())
        else:
            self.log(f"resuming at epoch {self.epoch + 1}"
                     + (f", item {self.position}" if self.position else ""))
        done_now = 0
        try:
            with self._interrupt_guard():
                while self.epoch < self.epochs:
                    epoch = self.epoch
                    if self.position and self.rng_state is not None:
                        torch.set_rng_state(self.rng_state)
                    else:
                        torch.manual_seed(_epoch_seed(cfg.run.seed, epoch, self.info.rank))
                    started = time.monotonic()
                    sums = self.train_epoch(epoch)
                    if self.stop_requested and self.position < self.plan_length(epoch):
                        self.save()
                        self.log(f"stopped at epoch {epoch + 1}, item {self.position}; saved "
                                 f"{self.paths.last}; continue with --resume")
                        return self.summary(stopped=True)
                    record = self._epoch_record(epoch, sums, time.monotonic() - started)
                    self.history.append(record)
                    self.epoch, self.position, self.rng_state = epoch + 1, 0, None
                    self.save()
                    barrier(self.info)
                    self._log_epoch(epoch, record)
                    self.log(self._epoch_line(record))
                    for warning in epoch_warnings(self.history, self.classes):
                        self.log(f"warning: {warning}")
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


def launch(trainer_cls: type[Trainer], cfg: Config, out: str | Path, resume: bool, force: bool,
           stop_after: int | None, echo: Callable[[str], None]) -> dict:
    """Prepare the run directory, the process group and the device, then run ``trainer_cls``."""
    out = Path(out)
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    info = init_from_env("cuda" if cfg.run.device == "cuda" or
                         (cfg.run.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        device = pick_device(cfg.run.device, info)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        collectives = device if device.type == "cuda" else torch.device("cpu")

        def prepare() -> RunPaths:
            try:
                paths = prepare_run_dir(out, resume, force)
                out.mkdir(parents=True, exist_ok=True)
                probe = out / ".fbnas-write-test"
                probe.touch()
                probe.unlink()
            except OSError as e:
                raise FbnasError(f"cannot use {out} as the run directory: "
                                 f"{e.strerror or e}; pick another --out") from None
            return paths

        # rank 0 alone checks and clears the folder; its error, if any, stops every rank
        paths = run_on_main(prepare, info, collectives) or RunPaths(out)
        if cfg.data.download:
            from fbnas.data import download_cifar10

            run_on_main(lambda: download_cifar10(cfg.data.dir), info, collectives)
        ckpt = load_checkpoint(paths.last, trainer_cls.kind) if resume else None
        trainer = trainer_cls(cfg, paths, info, device, echo, ckpt)
        result = trainer.run(stop_after=stop_after)
        result["rank"] = info.rank
        return result
    except RuntimeError as e:
        if info.enabled and peer_failed(e):
            raise FbnasError(f"process {info.rank} stops: another process of this run failed "
                             "(its message is above)") from None
        raise
    finally:
        shutdown(info)


def resume_config(out: str | Path) -> dict:
    """The config a run in ``out`` was started with (to continue it with the same settings)."""
    return from_dict(load_checkpoint(RunPaths(Path(out)).last)["config"]).to_dict()
