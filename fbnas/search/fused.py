"""A faster soft forward of a mixed op: the same candidates and parameters, fewer passes.

On a CPU the soft supernet step is bound by memory traffic, not arithmetic: each candidate
writes and re-reads its expanded feature maps several times (conv, BN statistics, BN, ReLU,
and as many passes again backwards), and the weighted sum adds a residual, a scaling and an
addition pass per candidate. :func:`fused_forward` computes the function of the
per-candidate loop in :class:`fbnas.search.supernet.MixedOp`, with the same parameters and buffers
(equal up to float rounding), while skipping passes:

- A BN after a 1x1 conv of the layer input x (every candidate's expansion, a projecting
  ``skip``) is folded into the conv (:mod:`fbnas.arch.folded_bn`): its batch statistics come
  from x's channel mean and covariance, computed once per layer and shared by every
  candidate, so each wide output is written once and never re-read for normalisation.
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

from fbnas.arch.folded_bn import InputStats, bn_factor, folded_conv_bn, pointwise_input
from fbnas.arch.ops import InvertedResidual, Skip, parse_op
from fbnas.arch.pointwise import pointwise_conv


def scaled_batch_norm(x: torch.Tensor, bn: nn.BatchNorm2d, scale: torch.Tensor) -> torch.Tensor:
    """``scale * bn(x)``, computed as one BN call with scaled affine parameters."""
    factor = bn_factor(bn) if bn.training else 0.0
    return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight * scale,
                        bn.bias * scale, bn.training, factor, bn.eps)


class PointwiseConv(nn.Conv2d):
    """An ``nn.Conv2d`` with a 1x1 kernel that runs strided as stride 1 on the subsampled
    input (see :func:`pointwise_input`). Same parameters and state_dict keys: the fast
    supernet swaps its strided 1x1 convs' class for this one, so that candidates it runs as
    modules (hard mode, unfused ops) avoid the defect too."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the subsampled maps are small: fbnas/arch/pointwise.py may run them as products
        return pointwise_conv(pointwise_input(x, self.stride), self.weight, self.bias,
                              self.groups)


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
