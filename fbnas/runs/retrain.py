"""Retraining a sampled architecture from scratch, on the trainer the search uses.

The network trains on every training image outside the held-out evaluation part (the
search's weight and theta parts together) with SGD, momentum and the cosine schedule of
``optim.weights``, gradients clipped by their total norm, label smoothing, and the search's
augmentation; the test set is scored once at the end, for reporting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from fbnas.arch.definition import select, structure_difference
from fbnas.arch.depthwise import route_depthwise
from fbnas.arch.model import Network
from fbnas.arch.pointwise import route_small_map_pointwise
from fbnas.config import Config
from fbnas.errors import FbnasError, UsageError
from fbnas.runs.launch import launch
from fbnas.runs.logs import console
from fbnas.runs.run_config import run_config
from fbnas.runs.trainer import Batch, Trainer


class Retrain(Trainer):
    """Train one fixed architecture (checkpoints of kind "model", which export reads)."""

    kind = "model"
    phases = ("weights",)

    def setup(self, ckpt: dict | None) -> None:
        r = self.cfg.retrain
        if not r.arch:
            raise FbnasError("no architecture to retrain: give ARCH (a file written by fbnas "
                             "sample) or set retrain.arch")
        if ckpt is not None and "definition" in ckpt and not Path(r.arch).exists():
            # the run directory holds what it trains: a resume from another working directory
            # (where a relative retrain.arch names nothing) or machine needs no copy of the file
            self.arch_name, self.definition = ckpt.get("arch_name", r.name), ckpt["definition"]
        else:
            self.arch_name, self.definition = select(r.arch, r.name)
        self.epochs = r.epochs
        self.resolution = self.definition["input"]["resolution"]
        self.in_channels = self.definition["input"]["channels"]
        self.num_classes = self.definition["head"]["classes"]
        # NHWC is where a CPU runs depthwise and 1x1 convs fastest (measured: docs/retrain.md,
        # Speed); the weights are stored so and each batch is converted once
        self.channels_last = r.memory_format == "channels_last"

    def lr_warmup_epochs(self) -> float:
        # a fresh network at lr 0.1 and batch 64 spikes in its first epoch without a ramp
        return max(self.cfg.optim.weights.warmup_epochs, self.cfg.retrain.warmup_epochs)

    def check_resume(self, ckpt: dict) -> None:
        diff = structure_difference(ckpt.get("definition", {}), self.definition)
        if diff:
            raise FbnasError(f"cannot resume: the run trained another architecture ({diff})")

    def make_train_loaders(self, data, splits, **common) -> None:
        indices = torch.cat([splits["weights"], splits["theta"]]).sort().values
        self.train_loader = self.train_batches(data, indices, self.cfg.run.seed, **common)

    def build_model(self) -> Network:
        net = Network(self.definition, dropout=self.cfg.retrain.dropout)
        if self.cfg.retrain.zero_init_residual:
            net.zero_init_residual()
        if self.channels_last:
            net.to(memory_format=torch.channels_last)
        route_depthwise(net)  # a oneDNN defect (fbnas/arch/depthwise.py)
        route_small_map_pointwise(net)  # faster as matrix products (fbnas/arch/pointwise.py)
        if self.folds_batch_norm():
            net.fold_batch_norm()
        return net

    def folds_batch_norm(self) -> bool:
        """retrain.fold_bn applies where it was measured to pay: fp32 steps on a CPU (under
        bf16 autocast the input covariance would be a bfloat16 matmul, too coarse for a
        variance)."""
        return (self.cfg.retrain.fold_bn and self.device.type == "cpu"
                and self.cfg.run.precision == "fp32")

    def build_optimizers(self) -> dict:
        ow = self.cfg.optim.weights
        decay, no_decay = [], []
        for p in self.net.parameters():
            # BN scales/shifts and biases are 1-D; decaying them usually hurts accuracy
            (no_decay if p.dim() == 1 and not self.cfg.retrain.decay_norm_and_bias
             else decay).append(p)
        groups = [{"params": decay, "weight_decay": ow.weight_decay}]
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0})
        return {"weights": torch.optim.SGD(groups, lr=ow.lr, momentum=ow.momentum,
                                           nesterov=ow.nesterov)}

    def apply_hyperparameters(self) -> None:
        super().apply_hyperparameters()
        groups = self.optimizers["weights"].param_groups
        if len(groups) > 1:  # keep the no-decay group undecayed
            groups[1]["weight_decay"] = 0.0

    def before_step(self, phase: str) -> None:
        # At the warm-up's peak (lr 0.05, batch 64) the classifier's gradient alone reaches
        # norm 4-6 on a 2.7M-parameter network; unclipped, training CE climbed from 2.2 to
        # 3.4 and took ~100 steps to recover, costing 2 of 5 epochs. Cut at 2, it fell
        # steadily (2.19, 2.13 over epochs 1-2 against 2.35, 2.80).
        limit = self.cfg.retrain.clip_grad_norm
        if limit:
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), limit)

    def extra_state(self) -> dict:
        return {"definition": self.definition, "arch_name": self.arch_name}

    def plan(self, epoch: int) -> Iterator[tuple[str, Batch]]:
        self.train_loader.set_epoch(epoch)
        for batch in self.train_loader:
            yield "weights", batch

    def plan_length(self, epoch: int) -> int:
        return len(self.train_loader)

    def forward_loss(self, x: torch.Tensor, y: torch.Tensor, epoch: int, phase: str):
        ce = F.cross_entropy(self.model(self.to_format(x)), y,
                             label_smoothing=self.cfg.retrain.label_smoothing)
        return ce, {"ce": ce}

    def to_format(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def eval_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.to_format(x))

    def describe(self) -> str:
        n = len(self.splits["weights"]) + len(self.splits["theta"])
        params = sum(p.numel() for p in self.net.parameters())
        return (f"retrain {self.arch_name}: {len(self.definition['blocks'])} blocks, "
                f"{params:,} parameters, {self.epochs} epochs, {n} training / "
                f"{len(self.splits['val'])} held-out images, {self.info.world_size} "
                f"process(es) on {self.device}")


def run_retrain(cfg: Config, out: str | Path, resume: bool = False, force: bool = False,
                stop_after: int | None = None, echo: Callable[[str], None] | None = None
                ) -> dict:
    """Train (or resume training) the architecture ``cfg.retrain.arch`` into ``out``.

    Its lines go to the "fbnas" logger and RUN_DIR/train.log, and also to ``echo`` if given.
    """
    return launch(Retrain, cfg, out, resume, force, stop_after, echo)


def retrain_command(arch: Path | None, config_path: str | Path | None, out: Path, resume: bool,
                    force: bool, overrides: tuple[str, ...], download: bool, options: dict,
                    echo: Callable[[str], None] = print) -> dict:
    """``fbnas retrain`` once its options are parsed: ``arch`` is required unless the run
    resumes (its config names it); the run's config as ``run_config`` builds it, the
    retrain, and on the first process its test top-1."""
    if arch is None and not resume:
        raise UsageError("give ARCH, the architecture file written by fbnas sample")
    cfg = run_config(config_path, out, resume, force, overrides, download,
                     {"retrain.arch": arch, **options})
    with console():
        result = run_retrain(cfg, out, resume=resume, force=force)
    if not result["stopped"] and "test" in result and result["rank"] == 0:
        echo(f"done: {result['epochs_done']} epochs; test top1 "
             f"{result['test']['top1']:.2f}%")
    return result
