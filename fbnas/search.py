"""The alternating search loop: weights by SGD on one split, theta by Adam on another.

An epoch is a deterministic plan of (phase, batch) items built from (seed, epoch): weights-only
during the warm-up epochs, then either every weight batch followed by every theta batch
(``alternation: epoch``, the paper) or ``accumulate`` weight micro-batches followed by
``accumulate`` theta micro-batches (``alternation: step``). Because the plan and the global
RNG are functions of (seed, epoch, rank), a run resumed at an epoch boundary reproduces the
uninterrupted run exactly; a single-process run stopped mid-epoch also records its position
and RNG state.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from fbnas.config import Config, dump, from_dict
from fbnas.data import BatchLoader, load_dataset, make_splits
from fbnas.dist import (DistInfo, all_reduce_sum, barrier, init_from_env, peer_failed, run_on_main,
                        shutdown, sync_buffers)
from fbnas.errors import FbnasError
from fbnas.io import atomic_write, file_hash
from fbnas.loss import paper_loss, target_loss
from fbnas.lut import load_lut
from fbnas.progress import Progress
from fbnas.space import load_space
from fbnas.supernet import Supernet

CHECKPOINT_FORMAT = "fbnas.checkpoint/1"
# When set (to anything but "" or "0"), every rank saves its final weights, buffers and theta
# as rank<r>.pt in the run directory, so that a test or a user can check that the ranks of a
# distributed run ended identical.
RANK_STATE_ENV = "FBNAS_SAVE_RANK_STATE"


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


def check_run_dir(out: Path, resume: bool, force: bool) -> RunPaths:
    """Refuse to mix two runs in one folder unless the user asked to resume or overwrite."""
    out = Path(out)
    paths = RunPaths(out)
    if out.exists() and not out.is_dir():
        raise FbnasError(f"run directory {out} is a file; pick another --out")
    if resume:
        if not paths.last.is_file():
            raise FbnasError(f"nothing to resume: {paths.last} does not exist")
    elif out.is_dir() and any(out.iterdir()) and not force:
        raise FbnasError(f"run directory {out} is not empty; pass --resume to continue the "
                         "run in it or --force to start over")
    return paths


def prepare_run_dir(out: Path, resume: bool, force: bool) -> RunPaths:
    """:func:`check_run_dir`, then clear the previous run's files when starting over."""
    paths = check_run_dir(out, resume, force)
    if not resume and out.is_dir() and any(out.iterdir()):
        for p in (paths.checkpoints, paths.tensorboard):
            shutil.rmtree(p, ignore_errors=True)
        for p in (paths.config, paths.log):
            p.unlink(missing_ok=True)
    return paths


def load_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint safely (tensors and plain containers only)."""
    path = Path(path)
    if not path.is_file():
        raise FbnasError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for truncated or foreign files
        raise FbnasError(f"checkpoint {path} cannot be loaded (truncated or not an fbnas "
                         f"checkpoint): {str(e).splitlines()[0][:200]}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise FbnasError(f"{path} is not an fbnas checkpoint ({CHECKPOINT_FORMAT})")
    return ckpt


def save_checkpoint(state: dict, path: Path) -> None:
    atomic_write(path, lambda p: torch.save(state, p))


def pick_device(name: str, info: DistInfo) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise FbnasError("--device cuda was asked for but no CUDA device is available; "
                             "use --device cpu")
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


def temperature(cfg: Config, epoch: int) -> float:
    t = cfg.search.temperature
    return t.initial * math.exp(-t.decay * epoch)


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


def format_cost(value: float, metric: str) -> str:
    if metric == "latency":
        return f"{value / 1000:.3f} ms"
    if metric == "flops":
        return f"{value / 1e6:.1f} MFLOPs"
    return f"{value / 1e6:.3f} M params"


def load_space_and_lut(cfg: Config):
    """The search space and its validated lookup table."""
    space = load_space(cfg.space)
    lut_path = Path(cfg.lut)
    if not lut_path.is_file():
        raise FbnasError(f"lookup table {lut_path} does not exist; create it with: "
                         f"fbnas profile --space {cfg.space} --out {lut_path}")
    return space, load_lut(lut_path, space)


class Search:
    """One search run; build with :func:`run_search`."""

    def __init__(self, cfg: Config, paths: RunPaths, info: DistInfo, device: torch.device,
                 echo: Callable[[str], None], ckpt: dict | None):
        self.cfg, self.paths, self.info, self.device = cfg, paths, info, device
        self.log = Logger(paths.log if info.is_main else None, echo if info.is_main else
                          (lambda m: None))
        space, self.lut = load_space_and_lut(cfg)
        lut_path = Path(cfg.lut)
        self.lut_hash = file_hash(lut_path)
        self.space = space
        if ckpt is not None:
            if ckpt.get("space_hash") != space.hash:
                raise FbnasError(f"cannot resume: the run searched a different space "
                                 f"({ckpt['space']['name']}, hash {ckpt.get('space_hash')}) "
                                 f"than {space.name} (hash {space.hash})")
            if ckpt.get("lut_hash") != self.lut_hash:
                raise FbnasError(f"cannot resume: lookup table {lut_path} differs from the one "
                                 f"the run started with ({ckpt.get('lut_path')})")

        data = load_dataset(cfg.data.dir, cfg.data.kind, cfg.data.resolution)
        if data.resolution != space.resolution:
            raise FbnasError(f"the data is {data.resolution}x{data.resolution} but space "
                             f"{space.name} expects {space.resolution}x{space.resolution}")
        n = data.train_images.shape[0]
        if cfg.data.limit:
            n = min(n, cfg.data.limit)
        splits = make_splits(n, cfg.run.seed, cfg.data.theta_fraction, cfg.data.val_fraction)
        self.splits = splits
        self.mean_std = (data.mean, data.std)
        common = dict(mean=data.mean, std=data.std, rank=info.rank, world_size=info.world_size,
                      device=device)
        aug = dict(padding=4 if cfg.data.augment else 0, flip=cfg.data.augment)
        bs = cfg.data.batch_size
        imgs, labels = data.train_images, data.train_labels
        self.w_loader = BatchLoader(imgs, labels, splits["weights"], bs, train=True,
                                    seed=cfg.run.seed, drop_last=True, **common, **aug)
        self.t_loader = BatchLoader(imgs, labels, splits["theta"], bs, train=True,
                                    seed=cfg.run.seed + 1, drop_last=True, **common, **aug)
        for name, loader in (("weight", self.w_loader), ("theta", self.t_loader)):
            if len(loader) == 0:
                raise FbnasError(f"the {name} split has fewer images than one batch per process "
                                 f"({bs}); lower data.batch_size or use more data")
        # Evaluation shards are strided slices, not the padded shards of training: a padded
        # shard would count some images twice. Shards may differ in length (evaluation has
        # no collective until the final sums) and may be empty on some ranks.
        self.has_val = len(splits["val"]) > 0
        self.val_loader = self._eval_loader(imgs, labels, splits["val"])
        self.has_test = data.has_test
        self.test_loader = None
        if data.has_test:
            self.test_loader = self._eval_loader(data.test_images, data.test_labels,
                                                 torch.arange(data.test_images.shape[0]))
        self.classes = len(data.classes)
        if self.classes != space.num_classes:
            raise FbnasError(f"the data has {self.classes} classes but space {space.name}'s head "
                             f"has {space.num_classes}")

        torch.manual_seed(cfg.run.seed)
        self.net = Supernet(space, self.lut, cfg.search.cost, impl=cfg.search.supernet).to(device)
        self.model = self.net
        if info.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            # theta is a parameter of the wrapped module, so its gradients are averaged like
            # the weights'; hard mode leaves the unchosen candidates without gradients. BN
            # buffers are averaged at epoch ends instead of broadcast from rank 0 every step.
            self.model = DDP(self.net, device_ids=[device.index] if device.type == "cuda" else None,
                             find_unused_parameters=cfg.search.mode == "hard",
                             forward_sync_buffers=False)
        ow, ot = cfg.optim.weights, cfg.optim.theta
        self.opt_w = torch.optim.SGD(self.net.weight_parameters(), lr=ow.lr, momentum=ow.momentum,
                                     weight_decay=ow.weight_decay, nesterov=ow.nesterov)
        self.opt_t = torch.optim.Adam(self.net.theta_parameters(), lr=ot.lr,
                                      betas=(ot.beta1, ot.beta2), weight_decay=ot.weight_decay)
        steps_per_epoch = max(1, len(self.w_loader) // cfg.search.accumulate)
        total = steps_per_epoch * cfg.search.epochs
        warm = int(round(ow.warmup_epochs * steps_per_epoch))
        floor = ow.min_lr / ow.lr

        def lr_factor(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            progress = min(1.0, (step - warm) / max(1, total - warm))
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

        self.sched_w = torch.optim.lr_scheduler.LambdaLR(self.opt_w, lr_factor)
        self.epoch = 0
        self.position = 0  # plan items already done in the current epoch
        self.global_step = 0
        self.history: list[dict] = []
        self.rng_state = None
        if ckpt is not None:
            self._restore(ckpt)
        self.stop_requested = False
        self.writer = None

    def _eval_loader(self, images, labels, indices) -> BatchLoader | None:
        part = indices[self.info.rank::self.info.world_size]
        if len(part) == 0:
            return None
        return BatchLoader(images, labels, part, self.cfg.data.eval_batch_size, train=False,
                           seed=0, drop_last=False, mean=self.mean_std[0], std=self.mean_std[1],
                           device=self.device)

    # -- checkpoints -------------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "format": CHECKPOINT_FORMAT, "kind": "search", "epoch": self.epoch,
            "position": self.position, "global_step": self.global_step,
            "config": self.cfg.to_dict(), "space": self.space.raw, "space_hash": self.space.hash,
            "lut_path": str(self.cfg.lut), "lut_hash": self.lut_hash,
            "model": self.net.state_dict(), "theta": self.net.theta_state(),
            "candidates": [list(l.candidates) for l in self.net.layers],
            "optim_weights": self.opt_w.state_dict(), "optim_theta": self.opt_t.state_dict(),
            "sched_weights": self.sched_w.state_dict(),
            "rng_torch": torch.get_rng_state() if self.position else None,
            "history": self.history, "world_size": self.info.world_size,
        }

    def _restore(self, ckpt: dict) -> None:
        self.net.load_state_dict(ckpt["model"])
        self.opt_w.load_state_dict(ckpt["optim_weights"])
        self.opt_t.load_state_dict(ckpt["optim_theta"])
        self.sched_w.load_state_dict(ckpt["sched_weights"])
        self.epoch, self.position = int(ckpt["epoch"]), int(ckpt.get("position") or 0)
        self.global_step = int(ckpt.get("global_step", 0))
        self.history = list(ckpt.get("history", []))
        self.rng_state = ckpt.get("rng_torch")
        if self.position and ckpt.get("world_size", 1) != self.info.world_size:
            raise FbnasError("this checkpoint was saved mid-epoch by a run with a different "
                             "number of processes; resume it with the same number")

    def save(self) -> None:
        if self.info.is_main:
            save_checkpoint(self.state(), self.paths.last)

    # -- one epoch ---------------------------------------------------------------------------
    def plan(self, epoch: int) -> Iterator[tuple[str, tuple[torch.Tensor, torch.Tensor]]]:
        self.w_loader.set_epoch(epoch)
        self.t_loader.set_epoch(epoch)
        if epoch < self.cfg.warmup_epochs:
            for batch in self.w_loader:
                yield "weights", batch
            return
        if self.cfg.search.alternation == "epoch":
            for batch in self.w_loader:
                yield "weights", batch
            for batch in self.t_loader:
                yield "theta", batch
            return
        k = self.cfg.search.accumulate
        theta_iter = iter(self.t_loader)
        w_batches = iter(self.w_loader)
        while True:
            group = [b for _, b in zip(range(k), w_batches)]
            if len(group) < k:
                return
            for b in group:
                yield "weights", b
            for _ in range(k):
                try:
                    b = next(theta_iter)
                except StopIteration:
                    theta_iter = iter(self.t_loader)
                    b = next(theta_iter)
                yield "theta", b

    def plan_length(self, epoch: int) -> int:
        nw = len(self.w_loader)
        if epoch < self.cfg.warmup_epochs:
            return nw
        if self.cfg.search.alternation == "epoch":
            return nw + len(self.t_loader)
        k = self.cfg.search.accumulate
        return 2 * (nw // k) * k

    def train_epoch(self, epoch: int) -> dict:
        cfg = self.cfg
        tau = temperature(cfg, epoch)
        k = cfg.search.accumulate
        sums = {"weights": [0.0, 0.0, 0.0, 0], "theta": [0.0, 0.0, 0.0, 0]}  # loss, ce, cost, n
        micro = {"weights": 0, "theta": 0}
        self.model.train()
        total_items = self.plan_length(epoch)
        progress = Progress(total_items - self.position, f"epoch {epoch + 1}",
                            enabled=cfg.run.progress and self.info.is_main, interval=60)
        for item, (phase, (x, y)) in enumerate(self.plan(epoch)):
            if item < self.position:
                continue
            opt = self.opt_w if phase == "weights" else self.opt_t
            if micro[phase] % k == 0:
                self.model.zero_grad(set_to_none=True)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            last_micro = (micro[phase] + 1) % k == 0
            # DDP averages gradients in backward; accumulate micro-batches locally and
            # average once, in the backward of the last micro-batch of each step
            sync = nullcontext() if last_micro or not self.info.enabled else self.model.no_sync()
            with sync:
                logits, cost = self.model(x, tau=tau, mode=cfg.search.mode,
                                          per_sample=cfg.search.per_sample)
                ce = F.cross_entropy(logits, y, reduction="none" if cost.dim() else "mean")
                loss, _ = self.loss(ce, cost)
                loss = loss.mean()
                values = self._step_values(loss, ce, cost)
                if values is None:
                    raise self._diverged(epoch, item, phase)
                (loss / k).backward()
            micro[phase] += 1
            if last_micro:
                opt.step()
                if phase == "weights":
                    self.sched_w.step()
                self.global_step += 1
            s = sums[phase]
            for i, v in enumerate(values):
                s[i] += v
            s[3] += 1
            self.position = item + 1
            progress.update()
            if self.writer is not None and self.global_step % cfg.run.log_every == 0 \
                    and micro[phase] % k == 0:
                self._log_step(phase, *values, tau)
            if self.stop_requested and micro["weights"] % k == 0 and micro["theta"] % k == 0:
                break
        progress.close()
        return sums

    def _diverged(self, epoch: int, item: int, phase: str) -> FbnasError:
        where = f"at epoch {epoch + 1}, step {item + 1} ({phase} phase)"
        if self.info.enabled:
            where += " on at least one process"
        fix = "Lower optim.weights.lr or optim.theta.lr and "
        fix += (f"resume; the last good checkpoint {self.paths.last} is intact"
                if self.paths.last.is_file() else "start again")
        err = FbnasError(f"the loss is not finite {where}. {fix}")
        err.on_every_rank = True  # every rank sees the same all-reduced flag
        return err

    def _step_values(self, loss: torch.Tensor, ce: torch.Tensor,
                     cost: torch.Tensor) -> list[float] | None:
        """(loss, CE, cost) of this step averaged over ranks, or None if any rank's is not finite.

        One small all-reduce per step; every rank then takes the same decision, so a NaN on one
        rank stops all of them together instead of leaving the others waiting in backward.
        """
        vals = [float(loss.detach()), float(ce.detach().mean()), float(cost.detach().mean())]
        bad = not all(math.isfinite(v) for v in vals)
        if not self.info.enabled:
            return None if bad else vals
        total = all_reduce_sum([0.0 if bad else v for v in vals] + [float(bad)], self.info,
                               self.device)
        if total[3]:
            return None
        return [v / self.info.world_size for v in total[:3]]

    def loss(self, ce: torch.Tensor, cost: torch.Tensor):
        lo = self.cfg.loss
        if lo.form == "target":
            return target_loss(ce, cost, lo.target_ms * 1000.0, lo.target_exponent)
        return paper_loss(ce, cost, lo.alpha, lo.beta)

    @torch.no_grad()
    def evaluate(self, loader: BatchLoader | None) -> dict:
        """Deterministic accuracy (argmax or softmax of theta, no Gumbel noise), over all ranks.

        Each rank evaluates its shard with the unwrapped network (no collectives inside, so
        shards may differ in length or be empty); the counts are then summed over ranks.
        """
        self.net.eval()
        top_k = min(5, self.classes)
        correct1 = correct5 = ce_sum = count = 0.0
        for x, y in loader if loader is not None else ():
            x, y = x.to(self.device), y.to(self.device)
            logits, _ = self.net(x, mode=self.cfg.search.eval_mode)
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
    def _log_step(self, phase: str, loss: float, ce: float, cost: float, tau: float) -> None:
        w, step = self.writer, self.global_step
        w.add_scalar(f"train_{phase}/loss_total", loss, step)
        w.add_scalar(f"train_{phase}/loss_ce", ce, step)
        w.add_scalar(f"train_{phase}/cost_sampled", cost, step)
        w.add_scalar("lr/weights", self.opt_w.param_groups[0]["lr"], step)
        w.add_scalar("lr/theta", self.opt_t.param_groups[0]["lr"], step)
        w.add_scalar("temperature", tau, step)

    def _log_epoch(self, epoch: int, record: dict) -> None:
        w = self.writer
        if w is None:
            return
        step = epoch + 1
        for key, value in record.items():
            if isinstance(value, (int, float)) and key != "epoch":
                w.add_scalar(f"epoch/{key}", value, step)
        for i, p in enumerate(self.net.probabilities()):
            entropy = float(-(p * p.clamp_min(1e-12).log()).sum())
            w.add_scalar(f"theta_entropy/layer_{i:02d}", entropy, step)
            w.add_histogram(f"theta_prob/layer_{i:02d}", p, step)
        rows = ["| layer | op | p |", "|---|---|---|"]
        for i, (layer, p) in enumerate(zip(self.net.layers, self.net.probabilities())):
            j = int(p.argmax())
            rows.append(f"| {i} | {layer.candidates[j]} | {float(p[j]):.3f} |")
        w.add_text("argmax_architecture", "\n".join(rows), step)
        w.flush()

    # -- the run -----------------------------------------------------------------------------
    def run(self, stop_after: int | None = None) -> dict:
        """Train until the last epoch (or ``stop_after`` epochs, or Ctrl-C); return a summary."""
        if self.info.is_main:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.paths.tensorboard))
            atomic_write(self.paths.config, lambda p: p.write_text(dump(self.cfg)))
        try:
            result = self._run(stop_after)
        finally:
            if self.writer is not None:
                self.writer.close()
        self._save_rank_state()
        return result

    def _run(self, stop_after: int | None) -> dict:
        cfg = self.cfg
        metric = cfg.search.cost
        if self.epoch == 0 and self.position == 0:
            self.log(f"search {self.space.name}: {len(self.net.layers)} layers, mode "
                     f"{cfg.search.mode}, {cfg.search.epochs} epochs ({cfg.warmup_epochs} weights-"
                     f"only), splits weights/theta/val = {len(self.splits['weights'])}/"
                     f"{len(self.splits['theta'])}/{len(self.splits['val'])} images, "
                     f"{self.info.world_size} process(es) on {self.device}, batch "
                     f"{cfg.data.batch_size} per process "
                     f"({cfg.data.batch_size * self.info.world_size} per step), supernet "
                     f"{cfg.search.supernet}")
        else:
            self.log(f"resuming at epoch {self.epoch + 1}"
                     + (f", item {self.position}" if self.position else ""))
        done_now = 0
        with self._interrupt_guard():
            while self.epoch < cfg.search.epochs:
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
                self.log(self._epoch_line(record, metric))
                done_now += 1
                if self.stop_requested or (stop_after is not None and done_now >= stop_after):
                    if self.epoch < cfg.search.epochs:
                        self.log(f"stopped after epoch {self.epoch}; saved {self.paths.last}; "
                                 "continue with --resume")
                    return self.summary(stopped=self.epoch < cfg.search.epochs)
        result = self.summary(stopped=False)
        if self.has_test:
            test = self.evaluate(self.test_loader)
            result["test"] = test
            self.log(f"test set (reporting only, never used for choices): top1 "
                     f"{test['top1']:.2f}% on {test['images']} images")
        return result

    def _save_rank_state(self) -> None:
        if os.environ.get(RANK_STATE_ENV, "") in ("", "0"):
            return
        state = {"rank": self.info.rank, "world_size": self.info.world_size,
                 "model": self.net.state_dict(), "theta": self.net.theta_state()}
        save_checkpoint(state, self.paths.root / f"rank{self.info.rank}.pt")

    def _epoch_record(self, epoch: int, sums: dict, seconds: float) -> dict:
        world = self.info.world_size
        w, t = sums["weights"], sums["theta"]
        vals = w + t  # per-step values are already averages over ranks
        record = {"epoch": epoch + 1, "temperature": temperature(self.cfg, epoch),
                  "seconds": seconds, "processes": world}
        if vals[3]:
            record.update(w_loss=vals[0] / vals[3], w_ce=vals[1] / vals[3])
        if vals[7]:
            record.update(theta_loss=vals[4] / vals[7], theta_ce=vals[5] / vals[7],
                          theta_cost_sampled=vals[6] / vals[7])
        sync_buffers(self.net, self.info)
        if self.has_val:
            ev = self.evaluate(self.val_loader)
            record.update({f"val_{k}": v for k, v in ev.items() if k != "images"})
        record["cost_argmax"] = self.net.cost_of(self.net.argmax_ops())
        record["cost_expected"] = self.net.expected_cost()
        return record

    def _epoch_line(self, r: dict, metric: str) -> str:
        phase = "w" if "theta_loss" not in r else "w+theta"
        parts = [f"epoch {r['epoch']}/{self.cfg.search.epochs} [{phase}] tau {r['temperature']:.3f}"]
        if "w_loss" in r:
            parts.append(f"w loss {r['w_loss']:.3f} (ce {r['w_ce']:.3f})")
        if "theta_loss" in r:
            parts.append(f"theta loss {r['theta_loss']:.3f}")
        if "val_top1" in r:
            k = "val_top5" if "val_top5" in r else next(x for x in r if x.startswith("val_top")
                                                         and x != "val_top1")
            parts.append(f"val top1 {r['val_top1']:.2f}% {k[4:]} {r[k]:.2f}%")
        parts.append(f"argmax {format_cost(r['cost_argmax'], metric)}, expected "
                     f"{format_cost(r['cost_expected'], metric)}")
        parts.append(f"{r['seconds']:.1f}s")
        return " | ".join(parts)

    def summary(self, stopped: bool) -> dict:
        return {"epochs_done": self.epoch, "stopped": stopped, "checkpoint": str(self.paths.last),
                "argmax_ops": self.net.argmax_ops(),
                "argmax_cost": self.net.cost_of(self.net.argmax_ops()),
                "history": self.history}

    @contextmanager
    def _interrupt_guard(self):
        """First Ctrl-C: finish the step, save, stop. A second one aborts at once."""
        if self.info.enabled or not _main_thread():
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


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run_search(cfg: Config, out: str | Path, resume: bool = False, force: bool = False,
               stop_after: int | None = None, echo: Callable[[str], None] = print) -> dict:
    """Run (or resume) a search into run directory ``out``; return a summary.

    Under torchrun (WORLD_SIZE > 1) every process calls this: rank 0 alone checks and clears
    the run directory, logs and writes; all ranks load the checkpoint to resume from.
    """
    out = Path(out)
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    info = init_from_env("cuda" if cfg.run.device == "cuda" or
                         (cfg.run.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        device = pick_device(cfg.run.device, info)
        if device.type == "cuda":
            torch.cuda.set_device(device)

        def prepare() -> RunPaths:
            paths = prepare_run_dir(out, resume, force)
            out.mkdir(parents=True, exist_ok=True)
            return paths

        paths = run_on_main(prepare, info, device) or RunPaths(out)
        run_on_main(lambda: load_space_and_lut(cfg), info, device)  # report once
        if cfg.data.download:
            from fbnas.data import download_cifar10

            run_on_main(lambda: download_cifar10(cfg.data.dir), info, device)
        ckpt = load_checkpoint(paths.last) if resume else None
        if ckpt is not None and ckpt.get("kind") != "search":
            raise FbnasError(f"{paths.last} is not a search checkpoint")
        search = Search(cfg, paths, info, device, echo, ckpt)
        result = search.run(stop_after=stop_after)
        result["main"] = info.is_main
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
    ckpt = load_checkpoint(RunPaths(Path(out)).last)
    return from_dict(ckpt["config"]).to_dict()
