"""1x1 convs trained as matrix products on small feature maps.

A 1x1 conv of a channels_last tensor is a matrix product: the (images x pixels, channels)
rows of the input times the transposed weight. On the 8x8 and smaller maps of a CIFAR
network's last stages the channels are wide (up to 1,984 in ``fbnet_cifar``'s head) and the
rows few, and there oneDNN's conv backward runs slower than the two matrix products it
amounts to: the products are faster on 4x4 maps, even on 8x8, and slower on 16x16 and
32x32, which keep the conv (``bench/bench_pointwise.py``; docs/results.md, Training speed).

:func:`pointwise_conv` picks the form; :class:`SmallMapPointwiseConv` is an ``nn.Conv2d``
that calls it (same parameters and state_dict keys), and :func:`route_small_map_pointwise`
swaps it in. The products are only used where a step trains: a CPU tensor in channels_last
format, gradients enabled, no autocast, not compiling; evaluation, export and everything else
keep the conv.
Results equal the conv's up to float rounding (the sums run in another order).

Under :func:`bf16_products` (``run.precision: bf16_products``) the products take bfloat16
operands and the CPU's bf16 units, on maps of every size, and everything around them (their
inputs and outputs, gradients, batch norm, depthwise convs, the weights the optimizer keeps)
stays fp32. Why only these: on a CPU with bf16 units a bf16 product runs well ahead of its
fp32 one, casts included, while the fp32 products already run at the CPU's arithmetic peak,
so nothing else in a step gains as much; bf16 autocast of the whole forward
(``run.precision: bf16``) also casts depthwise convs and batch norms, which run slower in
bf16 there, and is slower than fp32 on a CPU (docs/retrain.md, Speed).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

#: the largest map (height x width, in pixels) trained as fp32 matrix products: 8x8
MAX_PIXELS = 64
#: the same for bf16 products: every map (bench/bench_pointwise.py's bf16 column)
BF16_MAX_PIXELS = 1 << 30

_state = threading.local()


@contextmanager
def bf16_products(enabled: bool = True):
    """Within this context (on this thread), 1x1 convs that train as matrix products take
    bfloat16 operands (see the module docstring). The choice is made in the forward, so the
    backward may run outside the context."""
    before = getattr(_state, "bf16", False)
    _state.bf16 = enabled
    try:
        yield
    finally:
        _state.bf16 = before


def _bf16() -> bool:
    return getattr(_state, "bf16", False)


def uses_products(x: torch.Tensor, weight: torch.Tensor, groups: int = 1) -> bool:
    """Whether a 1x1 conv of ``x`` at stride 1 trains as matrix products here."""
    limit = BF16_MAX_PIXELS if _bf16() else MAX_PIXELS
    return (groups == 1 and x.device.type == "cpu" and x.dim() == 4
            and x.shape[2] * x.shape[3] <= limit and torch.is_grad_enabled()
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
    if _bf16() and x.dtype == torch.float32:
        return _Bf16Products.apply(x, weight.flatten(1), bias)
    return _Products.apply(x, weight.flatten(1), bias)


def _channels_last_like(x: torch.Tensor, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An empty channels_last tensor of ``x``'s images, map and dtype with ``channels``
    channels, and its (images x pixels, channels) rows as a view. Products are written into
    a tensor of their own rather than returned as a permuted view, which autograd would
    forbid the in-place ReLU after them to modify."""
    n, _, h, wd = x.shape
    out = torch.empty((n, channels, h, wd), dtype=x.dtype, device=x.device,
                      memory_format=torch.channels_last)
    return out, out.permute(0, 2, 3, 1).view(-1, channels)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """The (images x pixels, channels) rows of a channels_last tensor, as a view."""
    return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])


class _Products(torch.autograd.Function):
    """y = rows(x) @ w.T (+ bias), in and out channels_last; the backward is two products."""

    @staticmethod
    def forward(ctx, x, w, bias):
        rows = _rows(x)
        ctx.save_for_backward(rows, w)
        ctx.shape, ctx.has_bias = tuple(x.shape), bias is not None
        out, out_rows = _channels_last_like(x, w.shape[0])
        if bias is None:
            torch.mm(rows, w.t(), out=out_rows)
        else:
            torch.addmm(bias, rows, w.t(), out=out_rows)
        return out

    @staticmethod
    def backward(ctx, grad):
        rows, w = ctx.saved_tensors
        n, c, h, wd = ctx.shape
        g = _rows(grad)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = (g @ w).view(n, h, wd, c).permute(0, 3, 1, 2)
        if ctx.needs_input_grad[1]:
            grad_w = g.t() @ rows
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)
        return grad_x, grad_w, grad_b


class _Bf16Products(torch.autograd.Function):
    """:class:`_Products` with bfloat16 operands: each product reads bf16 copies of its fp32
    operands and its result is written back as fp32. It keeps the bf16 copies of the rows
    and weight for the backward (half the memory of the fp32 rows)."""

    @staticmethod
    def forward(ctx, x, w, bias):
        rows, wb = _rows(x).to(torch.bfloat16), w.to(torch.bfloat16)
        ctx.save_for_backward(rows, wb)
        ctx.has_bias, ctx.w_dtype = bias is not None, w.dtype
        out, out_rows = _channels_last_like(x, w.shape[0])
        out_rows.copy_(rows @ wb.t())
        if bias is not None:
            out_rows.add_(bias)
        return out

    @staticmethod
    def backward(ctx, grad):
        rows, wb = ctx.saved_tensors
        g32 = _rows(grad)
        g = g32.to(torch.bfloat16)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x, grad_rows = _channels_last_like(grad, rows.shape[1])
            grad_rows.copy_(g @ wb)
        if ctx.needs_input_grad[1]:
            grad_w = (g.t() @ rows).to(ctx.w_dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g32.sum(0)
        return grad_x, grad_w, grad_b


class SmallMapPointwiseConv(nn.Conv2d):
    """An ``nn.Conv2d`` with a 1x1 kernel at stride 1 that trains as matrix products on
    small maps, and on every map under :func:`bf16_products` (see the module docstring)."""

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
