"""Process-group helpers that act in a single process too (fbnas/runs/dist.py)."""

from __future__ import annotations

import torch
from torch import nn

from fbnas.arch.pointwise import route_small_map_pointwise
from fbnas.runs.dist import align_grad_strides


def _channels_last_pointwise(c_in=6, c_out=5):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
    net.to(memory_format=torch.channels_last)
    route_small_map_pointwise(net)  # on 4x4 maps it trains as products of a flattened weight
    x = torch.randn(3, c_in, 4, 4).contiguous(memory_format=torch.channels_last)
    return net, x


def test_gradients_take_their_parameters_strides_as_ddp_buckets_expect():
    net, x = _channels_last_pointwise()
    weight = net[0].weight
    assert weight.stride() == (6, 1, 6, 6)
    net(x).square().sum().backward()
    assert weight.grad.stride() == (6, 1, 1, 1)  # what DDP warned about and copied
    expected = weight.grad.clone()

    weight.grad = None
    assert align_grad_strides(net) == 1  # the 1x1 weight; BN's are 1-D
    net(x).square().sum().backward()
    assert weight.grad.stride() == weight.stride()
    assert torch.equal(weight.grad, expected)  # the same values, only restrided
