"""Candidate ops, built by name from the grammar ``kK_eE[_gG]`` or ``skip``.

``kK_eE_gG`` is FBNet's inverted-residual block: a 1x1 conv (grouped when G > 1) expanding
C_in to E*C_in channels, BN, ReLU, a channel shuffle when G > 1, a KxK depthwise conv
carrying the block's stride, BN, ReLU, a 1x1 conv (grouped when G > 1) to C_out, BN, and an
identity residual when the stride is 1 and C_in == C_out. ``skip`` is the identity where
shapes match and a strided 1x1 conv + BN where they do not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

from fbnas.errors import FbnasError

_BLOCK_RE = re.compile(r"^k(\d+)_e(\d+)(?:_g(\d+))?$")
GRAMMAR = "'skip' or kK_eE[_gG] with odd K, e.g. k3_e6, k5_e1_g2, k7_e4"
SUPPORTED_STRIDES = (1, 2)


def out_size(size: int, stride: int) -> int:
    """Output side of a layer at ``stride`` (odd kernel K, padding K // 2): every op and stem."""
    return (size - 1) // stride + 1


@dataclass(frozen=True)
class OpSpec:
    """A parsed op name: ``kernel``/``expansion``/``groups`` are None for ``skip``."""

    name: str
    kernel: int | None = None
    expansion: int | None = None
    groups: int | None = None

    @property
    def is_skip(self) -> bool:
        return self.kernel is None


def parse_op(name: str) -> OpSpec:
    """Parse an op name or raise FbnasError naming the grammar."""
    if not isinstance(name, str):
        raise FbnasError(f"op name must be a string, got {name!r}; expected {GRAMMAR}")
    if name == "skip":
        return OpSpec(name)
    m = _BLOCK_RE.match(name)
    if not m:
        raise FbnasError(f"unknown op {name!r}: expected {GRAMMAR}")
    k, e = int(m.group(1)), int(m.group(2))
    g = int(m.group(3)) if m.group(3) else 1
    if k < 1 or k % 2 == 0:
        raise FbnasError(f"op {name!r}: kernel size must be odd and positive, got {k}")
    if e < 1:
        raise FbnasError(f"op {name!r}: expansion must be at least 1, got {e}")
    if g < 1:
        raise FbnasError(f"op {name!r}: groups must be at least 1, got {g}")
    return OpSpec(name, k, e, g)


def check_op_fits(name: str, c_in: int, c_out: int, stride: int) -> None:
    """Raise FbnasError if op ``name`` cannot map c_in -> c_out at ``stride``."""
    spec = parse_op(name)
    if stride not in SUPPORTED_STRIDES:
        raise FbnasError(f"stride {stride} is not supported; use one of {SUPPORTED_STRIDES}")
    if c_in < 1 or c_out < 1:
        raise FbnasError(f"op {name!r}: channels must be positive, got {c_in} -> {c_out}")
    if spec.is_skip or spec.groups == 1:
        return
    g = spec.groups
    if c_in % g or c_out % g:
        raise FbnasError(
            f"op {name!r} needs channels divisible by its {g} groups, got {c_in} -> {c_out}; "
            "change the stage's channels or drop the op"
        )


class ChannelShuffle(nn.Module):
    """Interleave the channels of ``groups`` groups so grouped convs mix information."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        return x.view(n, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(n, c, h, w)


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1,
            relu: bool = True) -> nn.Sequential:
    """Conv (no bias) + BN (+ ReLU)."""
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """The kK_eE[_gG] block."""

    def __init__(self, c_in: int, c_out: int, stride: int, kernel: int, expansion: int,
                 groups: int = 1):
        super().__init__()
        mid = c_in * expansion
        layers: list[nn.Module] = [conv_bn(c_in, mid, 1, groups=groups)]
        if groups > 1:
            layers.append(ChannelShuffle(groups))
        layers.append(conv_bn(mid, mid, kernel, stride, groups=mid))
        layers.append(conv_bn(mid, c_out, 1, groups=groups, relu=False))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class Skip(nn.Module):
    """Identity where shapes match, else a strided 1x1 projection."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.proj = None
        if stride != 1 or c_in != c_out:
            self.proj = conv_bn(c_in, c_out, 1, stride, relu=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.proj is None else self.proj(x)


def build_op(name: str, c_in: int, c_out: int, stride: int) -> nn.Module:
    """Build candidate op ``name`` mapping (N, c_in, H, W) -> (N, c_out, H/stride, W/stride)."""
    check_op_fits(name, c_in, c_out, stride)
    spec = parse_op(name)
    if spec.is_skip:
        return Skip(c_in, c_out, stride)
    return InvertedResidual(c_in, c_out, stride, spec.kernel, spec.expansion, spec.groups)
