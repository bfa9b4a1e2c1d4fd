"""A depthwise conv whose weight gradient avoids oneDNN's slow paths on the CPU.

oneDNN's CPU backward computes the weight gradient of a depthwise conv fast for 3x3 kernels
and slowly for 5x5 ones: many times slower than the form below where the kernel is wider
than its input (5x5 on the 4x4 maps of the last stage of ``fbnet_cifar`` and
``nasbench_macro``), and slower for 5x5 at stride 1 on larger maps.

The weight gradient is a correlation of the input with the output gradient, channel by
channel and summed over the batch. :func:`depthwise_weight_grad` runs it as one depthwise
*forward* conv in which every (image, channel) plane is a group, the output gradient is the
kernel (dilated by the stride) and the kernel's taps are the output. The input gradient keeps
oneDNN's backward, which is fast at every size. Same parameters and state_dict keys
as ``nn.Conv2d``; results equal up to float rounding (the batch sum runs in another order).

Elsewhere (3x3 kernels and strided 5x5 ones on maps at least as large as the kernel, where
the form below is no faster; devices other than the CPU; no gradient needed; bf16 autocast)
the module is a plain ``nn.Conv2d``. Evidence (``bench/bench_depthwise.py``):
docs/notebook/training-speed.md.
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
    with its output-gradient plane, dilated by the stride. In the default (NCHW) layout the
    (n, c) planes are already the groups in order: the only copies are those that bring a
    channels_last input into that layout, cheaper than transposing (n, c) to (c, n)."""
    n, c, h, w = x.shape
    ho, wo = grad_out.shape[-2:]
    planes = x.contiguous().view(1, n * c, h, w)
    kernels = grad_out.contiguous().view(n * c, 1, ho, wo)
    taps = F.conv2d(planes, kernels, None, 1, padding, stride, n * c)
    return taps[..., :kernel[0], :kernel[1]].reshape(n, c, *kernel).sum(0).unsqueeze(1)


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


def forward_form_pays(kernel: tuple[int, int], stride: tuple[int, int], height: int,
                      width: int) -> bool:
    """Whether :func:`depthwise_weight_grad` runs faster than oneDNN's backward for this
    shape: a kernel wider or taller than the input, or a kernel of 5 or more at stride 1."""
    return (height < kernel[0] or width < kernel[1]
            or (min(kernel) >= 5 and tuple(stride) == (1, 1)))


def depthwise_conv(x: torch.Tensor, weight: torch.Tensor, stride: tuple[int, int],
                   padding: tuple[int, int]) -> torch.Tensor:
    """``F.conv2d(x, weight, None, stride, padding, groups=channels)`` (no bias, dilation 1),
    its weight gradient by :func:`depthwise_weight_grad` on the CPU where
    :func:`forward_form_pays`. ``weight`` may be a slice of a larger parameter (a shared-weight
    supernet's centre kernel): the gradient flows back through the slice."""
    if (x.device.type == "cpu" and torch.is_grad_enabled() and weight.requires_grad
            and not torch.is_autocast_enabled("cpu")  # bf16 steps keep oneDNN's own
            and forward_form_pays(tuple(weight.shape[-2:]), stride, *x.shape[-2:])):
        return _DepthwiseConv.apply(x, weight, tuple(stride), tuple(padding))
    return F.conv2d(x, weight, None, stride, padding, 1, weight.shape[0])


class RoutedDepthwiseConv(nn.Conv2d):
    """An ``nn.Conv2d`` (depthwise, no bias, dilation 1) whose weight gradient takes
    :func:`depthwise_weight_grad` on the CPU where :func:`forward_form_pays`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return depthwise_conv(x, self.weight, self.stride, self.padding)


def route_depthwise(module: nn.Module) -> int:
    """Make every depthwise conv of ``module`` (groups = in = out channels, no bias, dilation 1,
    zero padding) a :class:`RoutedDepthwiseConv`; return how many were changed. The form of
    the weight gradient is chosen by the input's size at each call."""
    changed = 0
    for m in module.modules():
        if (type(m) is nn.Conv2d and m.groups == m.in_channels == m.out_channels
                and m.groups > 1 and m.bias is None and m.dilation == (1, 1)
                and m.padding_mode == "zeros" and isinstance(m.padding, tuple)):
            m.__class__ = RoutedDepthwiseConv
            changed += 1
    return changed
