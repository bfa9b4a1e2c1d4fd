"""A depthwise conv whose weight gradient avoids oneDNN's slow path on small feature maps.

Where a depthwise kernel is wider than its input (5x5 on the 4x4 maps of the last stage of
``fbnet_cifar`` and ``nasbench_macro``), oneDNN's CPU backward computes the weight gradient
30 to 140 times slower than the forward: 60 ms against 1 ms for 1,104 channels at batch 64
on a 2-core AMD EPYC, 2 threads (``bench/bench_depthwise.py``). Such layers held about a tenth of a hard ``fbnet_cifar``
supernet step (docs/results.md, Training speed).

The weight gradient is a correlation of the input with the output gradient, channel by
channel and summed over the batch. :func:`depthwise_weight_grad` runs it as a depthwise
*forward* conv in which every (channel, image) pair is a group, the output gradient is the
kernel (dilated by the stride) and the kernel's taps are the output; oneDNN's forward is fast
there (4.4 ms for the layer above). The input gradient keeps oneDNN's backward, which is
fast at every size measured. Same parameters and state_dict keys as ``nn.Conv2d``; results
equal up to float rounding (the batch sum runs in another order).

Elsewhere (inputs at least as large as the kernel, devices other than the CPU, no gradient
needed, bf16 autocast) the module is a plain ``nn.Conv2d``: on larger inputs the two forms
measured 0.1x to 1.3x of each other, and the rest was not measured.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def depthwise_weight_grad(x: torch.Tensor, grad_out: torch.Tensor, kernel: tuple[int, int],
                          stride: tuple[int, int], padding: tuple[int, int]) -> torch.Tensor:
    """d loss / d weight of ``conv2d(x, weight, stride=stride, padding=padding,
    groups=channels)`` given ``grad_out``; shape (channels, 1, kh, kw).

    weight_grad[c, i, j] = sum over n, h, w of grad_out[n, c, h, w] *
    x_padded[n, c, h * stride + i, w * stride + j]: a correlation of each (n, c) input plane
    with its output-gradient plane, dilated by the stride."""
    n, c, h, w = x.shape
    ho, wo = grad_out.shape[-2:]
    planes = x.transpose(0, 1).reshape(1, c * n, h, w)
    kernels = grad_out.transpose(0, 1).reshape(c * n, 1, ho, wo)
    taps = F.conv2d(planes, kernels, None, 1, padding, stride, c * n)
    taps = taps[..., :kernel[0], :kernel[1]]
    return taps.reshape(c, n, kernel[0], kernel[1]).sum(1).unsqueeze(1)


class _DepthwiseConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, stride, padding):
        ctx.save_for_backward(x, weight)
        ctx.stride, ctx.padding = stride, padding
        return F.conv2d(x, weight, None, stride, padding, 1, weight.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.ops.aten.convolution_backward(
                grad_out, x, weight, None, list(ctx.stride), list(ctx.padding), [1, 1], False,
                [0, 0], weight.shape[0], [True, False, False])[0]
        if ctx.needs_input_grad[1]:
            grad_w = depthwise_weight_grad(x, grad_out, weight.shape[-2:], ctx.stride,
                                           ctx.padding)
        return grad_x, grad_w, None, None


class SmallInputDepthwiseConv(nn.Conv2d):
    """An ``nn.Conv2d`` (depthwise, no bias, dilation 1) whose weight gradient takes
    :func:`depthwise_weight_grad` when its kernel is wider or taller than its CPU input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kh, kw = self.kernel_size
        if (x.device.type == "cpu" and torch.is_grad_enabled() and self.weight.requires_grad
                and not torch.is_autocast_enabled("cpu")  # bf16 steps keep oneDNN's own
                and (x.shape[-2] < kh or x.shape[-1] < kw)):
            return _DepthwiseConv.apply(x, self.weight, self.stride, self.padding)
        return super().forward(x)


def route_small_input_depthwise(module: nn.Module) -> int:
    """Make every depthwise conv of ``module`` (groups = in = out channels, no bias, dilation 1,
    zero padding) a :class:`SmallInputDepthwiseConv`; return how many were changed. The
    choice by input size is made at each call: where the kernel is wider than the input the
    forward form measured 11x to 18x faster, elsewhere 0.1x to 1.3x
    (``bench/bench_depthwise.py``)."""
    changed = 0
    for m in module.modules():
        if (type(m) is nn.Conv2d and m.groups == m.in_channels == m.out_channels
                and m.groups > 1 and m.bias is None and m.dilation == (1, 1)
                and m.padding_mode == "zeros" and isinstance(m.padding, tuple)):
            m.__class__ = SmallInputDepthwiseConv
            changed += 1
    return changed
