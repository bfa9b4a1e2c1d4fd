"""1x1 convs trained as matrix products on small maps (fbnas/arch/pointwise.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fbnas.arch import pointwise
from fbnas.arch.pointwise import SmallMapPointwiseConv, pointwise_conv, route_small_map_pointwise


def _inputs(c_in=6, c_out=5, size=4, batch=3, dtype=torch.float32, bias=True):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, c_in, size, size, generator=g, dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(c_out, c_in, 1, 1, generator=g, dtype=dtype, requires_grad=True)
    b = torch.randn(c_out, generator=g, dtype=dtype, requires_grad=True) if bias else None
    return x, w, b


def _relative_error(a, ref):
    return float((a - ref).detach().norm() / ref.detach().norm())


def _grads(fn, x, w, b, grad_out):
    out = fn(x, w, b)
    params = [x, w] + ([b] if b is not None else [])
    return out, torch.autograd.grad(out, params, grad_out)


@pytest.mark.parametrize("bias", [True, False])
def test_products_equal_the_conv_and_keep_channels_last(bias):
    x, w, b = _inputs(bias=bias)
    out = pointwise_conv(x, w, b)
    assert type(out.grad_fn).__name__ == "_ProductsBackward"  # the products ran
    assert out.is_contiguous(memory_format=torch.channels_last)
    grad_out = torch.randn_like(out)
    got, got_grads = _grads(pointwise_conv, x, w, b, grad_out)
    ref, ref_grads = _grads(F.conv2d, x, w, b, grad_out)
    torch.testing.assert_close(got, ref)
    for a, r in zip(got_grads, ref_grads):
        torch.testing.assert_close(a, r)
    assert got_grads[0].stride(1) == 1  # the input gradient is channels_last too


def test_products_pass_gradcheck():
    x, w, b = _inputs(c_in=3, c_out=2, size=2, batch=2, dtype=torch.float64)
    assert torch.autograd.gradcheck(pointwise_conv, (x, w, b))


def test_large_maps_nchw_no_grad_and_autocast_keep_the_conv():
    x, w, b = _inputs(size=pointwise.MAX_PIXELS)  # 64x64 pixels: far over the limit
    assert pointwise_conv(x, w, b).grad_fn.name() == "ConvolutionBackward0"
    x, w, b = _inputs()
    nchw = x.detach().contiguous().requires_grad_()
    assert pointwise_conv(nchw, w, b).grad_fn.name() == "ConvolutionBackward0"
    with torch.no_grad():
        assert torch.equal(pointwise_conv(x, w, b), F.conv2d(x, w, b))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert pointwise_conv(x, w, b).dtype == torch.bfloat16


def test_route_swaps_plain_stride_one_pointwise_convs_only():
    net = nn.Sequential(nn.Conv2d(4, 8, 1, bias=False), nn.Conv2d(8, 8, 3, padding=1),
                        nn.Conv2d(8, 8, 1, stride=2), nn.Conv2d(8, 4, 1, groups=2))
    state = {k: v.clone() for k, v in net.state_dict().items()}
    assert route_small_map_pointwise(net) == 2
    assert [type(m) for m in net] == [SmallMapPointwiseConv, nn.Conv2d, nn.Conv2d,
                                      SmallMapPointwiseConv]
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in state.items())
    x = torch.randn(2, 4, 4, 4).contiguous(memory_format=torch.channels_last)
    net[0](x).sum().backward()  # ungrouped: products
    assert net[0].weight.grad is not None
    out = net[3](torch.randn(2, 8, 4, 4).contiguous(memory_format=torch.channels_last))
    assert out.grad_fn.name() == "ConvolutionBackward0"  # grouped: the conv


def test_products_output_takes_an_in_place_relu():
    """The blocks apply ReLU in place right after their expansion conv."""
    x, w, b = _inputs()
    out = F.relu_(pointwise_conv(x, w, b))
    out.sum().backward()
    ref = F.relu(F.conv2d(x.detach().requires_grad_(), w.detach(), b.detach()))
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("bias", [True, False])
def test_bf16_products_agree_with_the_conv_to_bf16_rounding_in_fp32(bias):
    """Under bf16_products a 1x1 conv on any map trains as bfloat16 products; what goes in
    and comes out (outputs, every gradient) stays fp32 and channels_last."""
    x, w, b = _inputs(c_in=24, c_out=40, size=16, bias=bias)  # 256 pixels: fp32 keeps the conv
    with pointwise.bf16_products():
        out = pointwise_conv(x, w, b)
    assert type(out.grad_fn).__name__ == "_Bf16ProductsBackward"
    assert out.dtype == torch.float32 and out.is_contiguous(memory_format=torch.channels_last)
    grad_out = torch.randn_like(out)
    got_grads = torch.autograd.grad(out, [x, w] + ([b] if bias else []), grad_out)
    ref, ref_grads = _grads(F.conv2d, x, w, b, grad_out)
    # bf16 keeps 8 bits of mantissa: an error of about 2^-9 of each operand, relative
    assert 0 < _relative_error(out, ref) < 1e-2  # nonzero: the bf16 operands were used
    for a, r in zip(got_grads, ref_grads):
        assert a.dtype == torch.float32
        assert _relative_error(a, r) < 1e-2
    assert got_grads[0].is_contiguous(memory_format=torch.channels_last)


def test_bf16_products_end_with_their_context_and_leave_fp64_alone():
    x, w, b = _inputs()
    with pointwise.bf16_products():
        with pointwise.bf16_products(False):
            assert type(pointwise_conv(x, w, b).grad_fn).__name__ == "_ProductsBackward"
        assert type(pointwise_conv(x, w, b).grad_fn).__name__ == "_Bf16ProductsBackward"
        x64, w64, b64 = _inputs(dtype=torch.float64)
        assert type(pointwise_conv(x64, w64, b64).grad_fn).__name__ == "_ProductsBackward"
    assert type(pointwise_conv(x, w, b).grad_fn).__name__ == "_ProductsBackward"
