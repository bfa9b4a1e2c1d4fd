"""Depthwise convs whose kernel is wider than their input, or 5x5 at stride 1, compute the
weight gradient as a forward conv (fbnas/arch/depthwise.py): the same outputs and gradients
as nn.Conv2d."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fbnas.arch.depthwise import (RoutedDepthwiseConv, _DepthwiseConv,
                                  route_depthwise)
from fbnas.arch.model import Network
from fbnas.arch.space import load_space


@pytest.mark.parametrize("channels,height,width,kernel,stride", [
    (8, 4, 4, 5, 1),   # the last stage of fbnet_cifar and nasbench_macro
    (8, 2, 3, 3, 1),   # non-square, 3x3 on 2x3
    (6, 4, 4, 5, 2),   # strided
    (6, 3, 5, 5, 2),   # only the height is under the kernel
    (6, 8, 8, 5, 1),   # 5x5 at stride 1 on a larger map
    (4, 9, 7, 7, 1),   # 7x7 at stride 1, odd sides
])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_routed_gradients_match_conv2d(channels, height, width, kernel, stride,
                                            memory_format):
    torch.manual_seed(0)
    plain = nn.Conv2d(channels, channels, kernel, stride, kernel // 2, groups=channels,
                      bias=False)
    routed = copy.deepcopy(plain)
    assert route_depthwise(routed) == 1
    assert type(routed) is RoutedDepthwiseConv
    x = torch.randn(3, channels, height, width).contiguous(memory_format=memory_format)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1, y2 = plain(x1), routed(x2)
    assert type(y2.grad_fn).__name__ == "_DepthwiseConvBackward"  # the new path ran
    g = torch.randn_like(y1)
    y1.backward(g)
    y2.backward(g)
    assert torch.equal(y1, y2)
    assert torch.allclose(x1.grad, x2.grad, atol=1e-6)
    assert torch.allclose(plain.weight.grad, routed.weight.grad, rtol=1e-5, atol=1e-5)


def test_weight_gradient_passes_gradcheck():
    x = torch.randn(2, 3, 3, 4, dtype=torch.double, requires_grad=True)
    w = torch.randn(3, 1, 5, 5, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: _DepthwiseConv.apply(a, b, (2, 1), (2, 2)),
                                    (x, w))


def test_large_inputs_and_other_convs_keep_onednn():
    convs = nn.Sequential(nn.Conv2d(4, 4, 5, 2, 2, groups=4, bias=False),  # depthwise
                          nn.Conv2d(4, 8, 1, bias=False),  # pointwise
                          nn.Conv2d(8, 8, 3, 1, 1, groups=2, bias=False),  # grouped
                          nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=True),  # with a bias
                          nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False))  # depthwise 3x3
    assert route_depthwise(convs) == 2
    assert [type(m) for m in convs] == [RoutedDepthwiseConv, nn.Conv2d, nn.Conv2d,
                                        nn.Conv2d, RoutedDepthwiseConv]
    # strided 5x5 on an input wider than the kernel, and 3x3: oneDNN was as fast or faster
    y = convs[0](torch.randn(2, 4, 8, 8, requires_grad=True))
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0"
    y = convs[4](torch.randn(2, 8, 8, 8, requires_grad=True))
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0"
    with torch.no_grad():  # evaluation: no gradient to speed up
        assert convs[0](torch.randn(2, 4, 4, 4)).grad_fn is None
    x = torch.randn(2, 4, 4, 4, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # run.precision: bf16
        y = convs[0](x)
    assert y.dtype == torch.bfloat16 and type(y.grad_fn).__name__ == "ConvolutionBackward0"
    y.float().sum().backward()
    assert convs[0].weight.grad is not None


def test_network_with_5x5_blocks_on_4x4_maps_trains_the_same():
    """A NAS-Bench-Macro network with k5_e6 in its 4x4 stage: one SGD step routed and
    plain ends on the same weights up to float rounding."""
    torch.manual_seed(0)
    plain = Network(load_space("nasbench_macro").definition(
        ["k3_e3", "skip", "k3_e3", "skip", "skip", "k5_e6", "k5_e6", "k5_e6"], name="m"))
    routed = copy.deepcopy(plain)
    assert route_depthwise(routed) == 5  # every block has one depthwise conv
    x, y = torch.randn(4, 3, 32, 32), torch.randint(10, (4,))
    for net in (plain, routed):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        F.cross_entropy(net(x), y).backward()
        opt.step()
    for (name, a), b in zip(plain.state_dict().items(), routed.state_dict().values()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), name


def test_fast_supernet_routes_its_depthwise_convs():
    from fbnas.latency.lut import load_lut
    from fbnas.search.supernet import Supernet

    space = load_space("nasbench_macro")
    lut = load_lut(Path(__file__).resolve().parents[2] / "lookup_tables" /
                   "nasbench_macro_ort.json", space)
    fast, loop = (Supernet(space, lut, impl=impl) for impl in ("fast", "loop"))
    routed = [m for m in fast.modules() if type(m) is RoutedDepthwiseConv]
    assert len(routed) == 2 * len(space.layers)  # k3_e3 and k5_e6 of every layer
    assert not any(type(m) is RoutedDepthwiseConv for m in loop.modules())
