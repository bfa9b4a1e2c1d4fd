"""Batch norm after a 1x1 conv, folded into the conv while training.

On a CPU a training step of these networks is bound by memory traffic: a BN forward reads its
input two or three times and writes it once, its backward reads and writes four to six times
more, and the BN after a block's 1x1 expansion runs on the block's widest tensor. When the
conv is 1x1, the BN's batch statistics need not be read off that wide output: they are linear
in the input's (for y = W x, mean W mu and variance diag(W S W^T), with mu and S the channel
mean and covariance of x), and x has E times fewer channels. :func:`folded_conv_bn` computes
them from x, then runs the conv once with the BN folded into its weight and bias, so the wide
output is written once and never re-read for normalisation, forwards or backwards. It is the
same function as conv followed by BN in training mode, running statistics and batch counter
included, up to float rounding.

The fast supernet (:mod:`fbnas.search.fused`) folds every candidate's expansion this way; a
fixed network's blocks do it where :meth:`fbnas.arch.model.Network.fold_batch_norm` turns it on
(``retrain.fold_bn``, off by default: whole retrain steps were no faster with it;
docs/retrain.md, Speed).
"""

from __future__ import annotations

import torch
from torch import nn

from fbnas.arch.pointwise import pointwise_conv


def fold_pays(c_in: int, expansion: int) -> bool:
    """Whether folding an expansion's BN saved time in a block's training step on a CPU.

    The fold saves BN passes over the wide output, about E * C values a pixel, and costs a
    C x C covariance and its backward, about C * C multiply-adds a pixel, plus a few small
    ops. So it pays where the expansion is wide against the channels (E >= 3 and C < 20 E),
    not for E = 1 (nothing is wider to save) nor for wide inputs (the covariance outgrows
    the saving). Per-block timings behind the rule: docs/retrain.md, Speed.
    """
    return expansion >= 3 and c_in < 20 * expansion


def bn_factor(bn: nn.BatchNorm2d) -> float:
    """Count one more batch and return the running-average factor, as _BatchNorm.forward."""
    bn.num_batches_tracked.add_(1)
    if bn.momentum is None:
        return 1.0 / float(bn.num_batches_tracked)
    return bn.momentum


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
            x = pointwise_input(self.x, stride)
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
    """The input a strided 1x1 conv reads, so that it can run at stride 1: every
    ``stride``-th pixel of x, its gradient in x's memory format.

    A 1x1 conv without padding at stride s is the same conv at stride 1 of every s-th pixel,
    to the last bit. The fast supernet always takes that form: oneDNN's weight gradient of a
    strided 1x1 conv on channels_last input with few input channels (fewer than 16, torch
    2.14 on x86) writes out of bounds, which killed a search with SIGSEGV at 112x112 and
    corrupted the heap at 64x64 (the loop supernet, in NCHW, is not affected).
    """
    if stride == (1, 1):
        return x
    return _Subsample.apply(x, tuple(stride))


class _Subsample(torch.autograd.Function):
    """Every ``stride``-th pixel of x, with a gradient in x's memory format.

    Plain slicing's backward writes its gradient into zeros in NCHW whatever the input's
    format; added to the channels_last gradients of the layer input's other uses, it turned
    their sum NCHW, and every later op on it ran on mixed formats, about twice as slow."""

    @staticmethod
    def forward(ctx, x, stride):
        ctx.shape, ctx.stride = x.shape, stride
        ctx.format = (torch.channels_last if x.is_contiguous(memory_format=torch.channels_last)
                      else torch.contiguous_format)
        return x[:, :, ::stride[0], ::stride[1]].contiguous(memory_format=ctx.format)

    @staticmethod
    def backward(ctx, grad):
        out = torch.empty(ctx.shape, dtype=grad.dtype, device=grad.device,
                          memory_format=ctx.format).zero_()
        out[:, :, ::ctx.stride[0], ::ctx.stride[1]] = grad
        return out, None


def dense_weight(weight: torch.Tensor, groups: int) -> torch.Tensor:
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
        dense = dense_weight(conv.weight, conv.groups)
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
    return pointwise_conv(pointwise_input(x, tuple(conv.stride)), weight, bias, conv.groups)
