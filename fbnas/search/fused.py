"""A faster soft forward of a mixed op: the same candidates and parameters, fewer passes.

On a CPU the soft supernet step is bound by memory traffic, not arithmetic: each candidate
writes and re-reads its expanded feature maps several times (conv, BN statistics, BN, ReLU,
and as many passes again backwards), and the weighted sum adds a residual, a scaling and an
addition pass per candidate. :func:`fused_forward` computes the function of the
per-candidate loop in :class:`fbnas.search.supernet.MixedOp`, with the same parameters and buffers
(equal up to float rounding), while skipping passes:

- A BN after a 1x1 conv of the layer input x (every candidate's expansion, a projecting
  ``skip``) is folded into the conv. Its batch statistics are linear in x's: mean W mu and
  variance diag(W S W^T), with mu and S the channel mean and covariance of x, computed once
  per layer from the small input instead of from each wide output. The conv then runs with
  weight ``W * scale`` and a bias, so the wide output is written once and never re-read for
  normalisation, forwards or backwards. Running statistics are updated as BN would.
- Each candidate's weight w_i scales the affine parameters of its last BN (w_i * BN(p) is BN
  with w_i * gamma and w_i * beta), so the outputs are summed in place without a scaling pass.
- The identity residuals and an identity ``skip`` are one ``(sum of their w_i) * x`` term.

Which candidates take these paths the op registry says (:attr:`fbnas.arch.ops.OpFamily.fused`);
candidates of other registered ops run unchanged and are weighted and summed as in the loop.

Candidates still run one after another, so each one's feature maps are as small (and as
cache-friendly) as in the loop; concatenating candidates into wide tensors measured slower.
Tensors are expected in channels_last format, where the depthwise convs are markedly faster
on CPUs. Rounding: torch's channels_last BN kernel on CPU accumulates its statistics less
precisely than the NCHW one; on a fbnet_cifar batch of 64, logits differ from the NCHW loop
by ~5e-5 relative and single gradient entries by up to ~2% of the largest gradient (the
float32 loop is itself up to ~0.7% away from a float64 computation).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fbnas.arch.ops import InvertedResidual, Skip, parse_op


def bn_factor(bn: nn.BatchNorm2d) -> float:
    """Count one more batch and return the running-average factor, as _BatchNorm.forward."""
    bn.num_batches_tracked.add_(1)
    if bn.momentum is None:
        return 1.0 / float(bn.num_batches_tracked)
    return bn.momentum


def scaled_batch_norm(x: torch.Tensor, bn: nn.BatchNorm2d, scale: torch.Tensor) -> torch.Tensor:
    """``scale * bn(x)``, computed as one BN call with scaled affine parameters."""
    factor = bn_factor(bn) if bn.training else 0.0
    return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight * scale,
                        bn.bias * scale, bn.training, factor, bn.eps)


class InputStats:
    """Channel mean and (biased) covariance of a layer input, computed on first use.

    A strided 1x1 conv sees only every ``stride``-th pixel, so statistics are kept per stride.
    """

    def __init__(self, x: torch.Tensor):
        self.x = x
        self._stats: dict[tuple[int, int], tuple] = {}

    def get(self, stride: tuple[int, int] = (1, 1)) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(mean, covariance, number of pixels) of the input sampled at ``stride``."""
        if stride not in self._stats:
            x = self.x[:, :, ::stride[0], ::stride[1]]
            rows = x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])
            n = rows.shape[0]
            if n < 2:
                raise ValueError("Expected more than 1 value per channel when training, got "
                                 f"input size {tuple(x.shape)}")
            mean = rows.mean(dim=0)
            centred = rows - mean
            self._stats[stride] = (mean, centred.t().mm(centred) / n, n)
        return self._stats[stride]


def pointwise_input(x: torch.Tensor, stride: tuple[int, int]) -> torch.Tensor:
    """The input a strided 1x1 conv reads, so that it can run at stride 1.

    A 1x1 conv without padding at stride s is the same conv at stride 1 of every s-th pixel,
    to the last bit. The fast supernet always takes that form: oneDNN's weight gradient of a
    strided 1x1 conv on channels_last input with few input channels (fewer than 16, torch
    2.14 on x86) writes out of bounds, which killed a search with SIGSEGV at 112x112 and
    corrupted the heap at 64x64 (the loop supernet, in NCHW, is not affected).
    """
    if stride == (1, 1):
        return x
    return x[:, :, ::stride[0], ::stride[1]]


class PointwiseConv(nn.Conv2d):
    """An ``nn.Conv2d`` with a 1x1 kernel that runs strided as stride 1 on the subsampled
    input (see :func:`pointwise_input`). Same parameters and state_dict keys: the fast
    supernet swaps its strided 1x1 convs' class for this one, so that candidates it runs as
    modules (hard mode, unfused ops) avoid the defect too."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(pointwise_input(x, self.stride), self.weight, self.bias, 1, 0,
                        self.dilation, self.groups)


def route_around_strided_pointwise(module: nn.Module) -> int:
    """Make every strided 1x1 conv without padding in ``module`` a :class:`PointwiseConv`;
    return how many were changed."""
    changed = 0
    for m in module.modules():
        if (type(m) is nn.Conv2d and m.kernel_size == (1, 1) and m.stride != (1, 1)
                and m.padding == (0, 0) and m.padding_mode == "zeros"):
            m.__class__ = PointwiseConv
            changed += 1
    return changed


def _dense(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """A (grouped) 1x1 conv weight as the dense out x in matrix it multiplies by."""
    w = weight.flatten(1)
    if groups == 1:
        return w
    return torch.block_diag(*w.chunk(groups, dim=0))


def folded_conv_bn(x: torch.Tensor, stats: InputStats, conv: nn.Conv2d, bn: nn.BatchNorm2d,
                   scale: torch.Tensor | None = None) -> torch.Tensor:
    """``scale * bn(conv(x))`` for a 1x1 conv, with BN folded into the conv.

    In training mode the batch statistics of conv(x) come from x's mean and covariance
    (exact for a linear map: E[Wx] = W mu, Var[Wx] = diag(W S W^T)), and the BN's running
    statistics and batch counter are updated as BN itself would update them.
    """
    if bn.training:
        mean_x, cov_x, n = stats.get(tuple(conv.stride))
        dense = _dense(conv.weight, conv.groups)
        mean = dense.mv(mean_x)
        var = (dense.mm(cov_x) * dense).sum(dim=1)
        factor = bn_factor(bn)
        with torch.no_grad():
            bn.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
            bn.running_var.mul_(1 - factor).add_(var.detach() * (n / (n - 1)), alpha=factor)
    else:
        mean, var = bn.running_mean, bn.running_var
    gain = bn.weight * torch.rsqrt(var + bn.eps)
    bias = bn.bias - mean * gain
    if scale is not None:
        gain, bias = gain * scale, bias * scale
    weight = conv.weight * gain.view(-1, 1, 1, 1)
    if conv.padding != (0, 0):
        raise TypeError("the fused forward folds BN into 1x1 convs without padding only")
    return F.conv2d(pointwise_input(x, tuple(conv.stride)), weight, bias, 1, 0, conv.dilation,
                    conv.groups)


class FusedPlan:
    """Which candidates of a mixed op are blocks, identities, projecting skips or plain ops.

    The op registry says how each candidate may be fused (:attr:`fbnas.arch.ops.OpFamily.fused`);
    a candidate of a family without a fused kind is a plain op, run as is and weighted.
    """

    def __init__(self, ops: nn.ModuleList, names: Sequence[str]):
        self.blocks: list[int] = []  # inverted residual blocks
        self.residual: list[int] = []  # the blocks among them that add x
        self.identity: list[int] = []  # skip = x
        self.projections: list[int] = []  # skip = BN(conv1x1(x))
        self.plain: list[int] = []  # anything else: w_i * op(x)
        for i, (op, name) in enumerate(zip(ops, names, strict=True)):
            kind = parse_op(name).family.fused
            if kind == "inverted_residual":
                if not isinstance(op, InvertedResidual):
                    raise TypeError(f"candidate {name} is fused as an inverted residual block "
                                    f"but built as {type(op).__name__}")
                if op.body[0][0].kernel_size != (1, 1) or op.body[0][0].padding != (0, 0):
                    raise TypeError("the fused forward folds BN into 1x1 expansion convs only")
                self.blocks.append(i)
                if op.residual:
                    self.residual.append(i)
            elif kind == "skip":
                if not isinstance(op, Skip):
                    raise TypeError(f"candidate {name} is fused as a skip but built as "
                                    f"{type(op).__name__}")
                (self.identity if op.proj is None else self.projections).append(i)
            else:
                self.plain.append(i)
        self.with_x = self.residual + self.identity


def _block(op: InvertedResidual, x: torch.Tensor, stats: InputStats,
           scale: torch.Tensor) -> torch.Tensor:
    """``scale * body(x)`` of an inverted residual block (without its residual)."""
    expand, *middle, project = op.body
    y = F.relu_(folded_conv_bn(x, stats, expand[0], expand[1]))
    for module in middle:  # channel shuffle (grouped blocks), depthwise conv + BN + ReLU
        y = module(y)
    return scaled_batch_norm(project[0](y), project[1], scale)


def fused_forward(ops: nn.ModuleList, plan: FusedPlan, x: torch.Tensor,
                  w: torch.Tensor) -> torch.Tensor:
    """``sum_i w[i] * ops[i](x)`` for one weight vector ``w`` over the candidates."""
    stats = InputStats(x)
    out = None
    for i in plan.blocks:
        y = _block(ops[i], x, stats, w[i])
        out = y if out is None else out.add_(y)
    for i in plan.projections:
        conv, bn = ops[i].proj[0], ops[i].proj[1]
        y = folded_conv_bn(x, stats, conv, bn, w[i])
        out = y if out is None else out.add_(y)
    for i in plan.plain:
        y = w[i] * ops[i](x)
        out = y if out is None else out.add_(y)
    if plan.with_x:
        s = w[plan.with_x].sum()
        out = x * s if out is None else torch.addcmul(out, x, s)
    return out
