"""1x1 convs trained as matrix products on small feature maps.

A 1x1 conv of a channels_last tensor is a matrix product: the (images x pixels, channels)
rows of the input times the transposed weight. On the 8x8 and smaller maps of a CIFAR
network's last stages the channels are wide (up to 1,984 in ``fbnet_cifar``'s head) and the
rows few, and there oneDNN's conv backward runs slower than the two matrix products it
amounts to. ``bench/bench_pointwise.py`` (the 2-core AMD EPYC, 1 thread, batch 64, forward and
backward of each 1x1 shape of a 1.8 ms ``fbnet_cifar`` network): 1.09x to 1.27x faster as
products on 4x4 maps (75.0 against 61.9 ms for the head's 352 to 1,984 channels), 0.97x to
1.07x on 8x8, and slower on 16x16 (0.88x to 0.92x) and 32x32 (0.63x to 0.87x), which keep
the conv. A whole retrain step of that network gained 1.05x, a hard supernet step 1.01x to
1.04x (docs/results.md, Training speed).

:func:`pointwise_conv` picks the form; :class:`SmallMapPointwiseConv` is an ``nn.Conv2d``
that calls it (same parameters and state_dict keys), and :func:`route_small_map_pointwise`
swaps it in. The products are only used where a step trains: a CPU tensor in channels_last
format, gradients enabled, no autocast, not compiling; evaluation, export and everything else
keep the conv.
Results equal the conv's up to float rounding (the sums run in another order).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: the largest map (height x width, in pixels) trained as matrix products: 8x8
MAX_PIXELS = 64


def uses_products(x: torch.Tensor, weight: torch.Tensor, groups: int = 1) -> bool:
    """Whether a 1x1 conv of ``x`` at stride 1 trains as matrix products here."""
    return (groups == 1 and x.device.type == "cpu" and x.dim() == 4
            and x.shape[2] * x.shape[3] <= MAX_PIXELS and torch.is_grad_enabled()
            and (x.requires_grad or weight.requires_grad)
            and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling()  # torch.compile and torch.export see the conv
            and x.is_contiguous(memory_format=torch.channels_last))


def pointwise_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                   groups: int = 1) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, groups=groups)`` for a 1x1 kernel at stride 1, as matrix
    products where :func:`uses_products` says they are faster."""
    if not uses_products(x, weight, groups):
        return F.conv2d(x, weight, bias, groups=groups)
    return _Products.apply(x, weight.flatten(1), bias)


class _Products(torch.autograd.Function):
    """y = rows(x) @ w.T (+ bias), in and out channels_last; the backward is two products."""

    @staticmethod
    def forward(ctx, x, w, bias):
        n, c, h, wd = x.shape
        rows = x.permute(0, 2, 3, 1).reshape(-1, c)  # a view: x is channels_last
        ctx.save_for_backward(rows, w)
        ctx.shape, ctx.has_bias = (n, c, h, wd), bias is not None
        # written into a channels_last tensor of its own rather than returned as a permuted
        # view, which autograd would forbid the in-place ReLU after it to modify
        out = torch.empty((n, w.shape[0], h, wd), dtype=x.dtype, device=x.device,
                          memory_format=torch.channels_last)
        out_rows = out.permute(0, 2, 3, 1).view(-1, w.shape[0])
        if bias is None:
            torch.mm(rows, w.t(), out=out_rows)
        else:
            torch.addmm(bias, rows, w.t(), out=out_rows)
        return out

    @staticmethod
    def backward(ctx, grad):
        rows, w = ctx.saved_tensors
        n, c, h, wd = ctx.shape
        g = grad.permute(0, 2, 3, 1).reshape(-1, grad.shape[1])
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = (g @ w).view(n, h, wd, c).permute(0, 3, 1, 2)
        if ctx.needs_input_grad[1]:
            grad_w = g.t() @ rows
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)
        return grad_x, grad_w, grad_b


class SmallMapPointwiseConv(nn.Conv2d):
    """An ``nn.Conv2d`` with a 1x1 kernel at stride 1 that trains as matrix products on
    small maps (see the module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pointwise_conv(x, self.weight, self.bias, self.groups)


def route_small_map_pointwise(module: nn.Module) -> int:
    """Swap the class of every plain 1x1 stride-1 unpadded ``nn.Conv2d`` in ``module`` for
    :class:`SmallMapPointwiseConv`; return how many were swapped."""
    count = 0
    for m in module.modules():
        if (type(m) is nn.Conv2d and m.kernel_size == (1, 1) and m.stride == (1, 1)
                and m.padding == (0, 0) and m.padding_mode == "zeros"):
            m.__class__ = SmallMapPointwiseConv
            count += 1
    return count
