"""Candidate ops and the registry that turns an op name into a module.

Every op name in a space, a lookup table or a model definition is looked up in :data:`OPS`:
one :class:`OpFamily` per kind of op, owning the names that fully match its pattern. Parsing
(:func:`parse_op`), shape checks (:func:`check_op_fits`), building (:func:`build_op`) and the
fused supernet forward (:mod:`fbnas.search.fused`, through :attr:`OpFamily.fused`) all read the
registry, so adding a candidate op is one :func:`register_op` call (see "Adding a candidate
op" in docs/spaces.md). Two families ship:

- ``kK_eE[_gG]``, FBNet's inverted-residual block: a 1x1 conv (grouped when G > 1) expanding
  C_in to E*C_in channels, BN, ReLU, a channel shuffle when G > 1, a KxK depthwise conv
  carrying the block's stride, BN, ReLU, a 1x1 conv (grouped when G > 1) to C_out, BN, and an
  identity residual when the stride is 1 and C_in == C_out.
- ``skip``: the identity where shapes match and a strided 1x1 conv + BN where they do not.

A built op maps (N, C_in, H, W) to (N, C_out, :func:`out_size` (H), :func:`out_size` (W)).
An op whose body is added to an identity residual may offer ``zero_init_residual()``; the
supernet calls it so that residual candidates start as the identity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from fbnas.arch.folded_bn import InputStats, folded_conv_bn
from fbnas.arch.limits import MAX_CHANNELS, MAX_KERNEL, check_weights
from fbnas.errors import FbnasError, brief

SUPPORTED_STRIDES = (1, 2)
#: the module structures :mod:`fbnas.search.fused` folds; any other op runs as is in a fused forward
FUSED_KINDS = ("inverted_residual", "skip")


def out_size(size: int, stride: int) -> int:
    """Output side of a layer at ``stride`` (odd kernel K, padding K // 2): every op and stem."""
    return (size - 1) // stride + 1


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class OpFamily:
    """One kind of candidate op: the names it owns and how to build them.

    ``build(c_in, c_out, stride, **params)`` returns the module; ``params(name, match)``
    turns a name into those keyword parameters (raising FbnasError for bad values);
    ``fits(spec, c_in, c_out, stride)`` raises FbnasError where the op cannot map c_in to
    c_out; ``fused`` is one of :data:`FUSED_KINDS` when the fused forward may fold it.
    """

    name: str
    pattern: re.Pattern
    grammar: str
    build: Callable[..., nn.Module]
    params: Callable[[str, re.Match], dict]
    fits: Callable[["OpSpec", int, int, int], None] | None = None
    fused: str | None = None


#: family name -> family; the first family (in registration order) whose pattern matches wins
OPS: dict[str, OpFamily] = {}


def _numeric_groups(name: str, match: re.Match) -> dict:
    """Default ``params``: the pattern's named groups, digits as ints, absent ones left out."""
    return {k: int(v) if v.isdigit() else v for k, v in match.groupdict().items()
            if v is not None}


def register_op(name: str, pattern: str, build: Callable[..., nn.Module], *, grammar: str,
                params: Callable[[str, re.Match], dict] | None = None,
                fits: Callable[["OpSpec", int, int, int], None] | None = None,
                fused: str | None = None) -> OpFamily:
    """Make op names fully matching ``pattern`` candidates everywhere; return the family.

    ``pattern``'s named groups become ``build``'s keyword arguments (digits as ints) unless
    ``params`` parses them; ``grammar`` describes the names in errors (e.g. "'pool_kK'").
    """
    if name in OPS:
        raise ValueError(f"op family {name!r} is already registered")
    if fused is not None and fused not in FUSED_KINDS:
        raise ValueError(f"fused must be None or one of {FUSED_KINDS}, got {fused!r}")
    family = OpFamily(name, re.compile(pattern), grammar, build, params or _numeric_groups,
                      fits, fused)
    OPS[name] = family
    return family


def grammar() -> str:
    """How op names look, every registered family's description joined."""
    return " or ".join(f.grammar for f in OPS.values())


@dataclass(frozen=True)
class OpSpec:
    """A parsed op name: its family and the parameters its builder takes."""

    name: str
    family: OpFamily
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def is_skip(self) -> bool:
        return self.family.name == "skip"

    @property
    def kernel(self) -> int | None:
        return self.params.get("kernel")

    @property
    def expansion(self) -> int | None:
        return self.params.get("expansion")

    @property
    def groups(self) -> int | None:
        return self.params.get("groups")


def parse_op(name: str) -> OpSpec:
    """Parse an op name or raise FbnasError naming the grammar."""
    if not isinstance(name, str):
        raise FbnasError(f"op name must be a string, got {brief(name)}; expected {grammar()}")
    for family in OPS.values():
        m = family.pattern.fullmatch(name)
        if m:
            try:
                return OpSpec(name, family, family.params(name, m))
            except ValueError:  # a number too long for int()
                raise FbnasError(f"op {name[:40]!r}...: a number in it is too long") from None
    raise FbnasError(f"unknown op {brief(name)}: expected {grammar()}")


def check_op_fits(name: str, c_in: int, c_out: int, stride: int) -> None:
    """Raise FbnasError if op ``name`` cannot map c_in -> c_out at ``stride``."""
    spec = parse_op(name)
    if stride not in SUPPORTED_STRIDES:
        raise FbnasError(f"stride {stride} is not supported; use one of {SUPPORTED_STRIDES}")
    if c_in < 1 or c_out < 1:
        raise FbnasError(f"op {brief(name)}: channels must be positive, got {c_in} -> {c_out}")
    if max(c_in, c_out) > MAX_CHANNELS:
        raise FbnasError(f"op {brief(name)}: {c_in} -> {c_out} channels is above fbnas's limit of "
                         f"{MAX_CHANNELS}")
    if spec.family.fits is not None:
        spec.family.fits(spec, c_in, c_out, stride)


def op_width(name: str, c_in: int, c_out: int) -> int:
    """The widest feature map inside op ``name``, in channels (an expansion widens it)."""
    return max(c_in, c_out, c_in * (parse_op(name).expansion or 1))


def build_op(name: str, c_in: int, c_out: int, stride: int) -> nn.Module:
    """Build candidate op ``name`` mapping (N, c_in, H, W) -> (N, c_out, H/stride, W/stride)."""
    check_op_fits(name, c_in, c_out, stride)
    spec = parse_op(name)
    return spec.family.build(c_in, c_out, stride, **spec.params)


# --------------------------------------------------------------------------- the modules


class ChannelShuffle(nn.Module):
    """Interleave the channels of ``groups`` groups so grouped convs mix information."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        g = self.groups
        if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) \
                and not x.is_contiguous():
            # shuffle within each pixel's channel vector, so the result stays channels_last
            # (the NCHW reshape below would return NCHW, and the next conv convert it back)
            nhwc = x.permute(0, 2, 3, 1).reshape(n, h, w, g, c // g).transpose(3, 4)
            return nhwc.reshape(n, h, w, c).permute(0, 3, 1, 2)
        return x.view(n, g, c // g, h, w).transpose(1, 2).reshape(n, c, h, w)


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
        # training steps compute the expansion BN's statistics from the input's instead of
        # reading the wide output again (fbnas/arch/folded_bn.py); set by
        # Network.fold_batch_norm, not saved: the parameters and outputs are the same
        self.fold_bn = False

    def zero_init_residual(self) -> None:
        """Zero the last BN scale, so a residual block starts as the identity."""
        if self.residual:
            nn.init.zeros_(self.body[-1][1].weight)

    def expansion_shape(self) -> tuple[int, int]:
        """(input channels, expansion) of the block's 1x1 expansion."""
        conv = self.body[0][0]
        return conv.in_channels, conv.out_channels // conv.in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fold_bn and self.training:
            expand, *rest = self.body
            y = F.relu_(folded_conv_bn(x, InputStats(x), expand[0], expand[1]))
            for module in rest:
                y = module(y)
        else:
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


# --------------------------------------------------------------------------- the built-in ops


def _block_params(name: str, m: re.Match) -> dict:
    k, e = int(m["kernel"]), int(m["expansion"])
    g = int(m["groups"]) if m["groups"] else 1
    if k < 1 or k % 2 == 0:
        raise FbnasError(f"op {brief(name)}: kernel size must be odd and positive, got {k}")
    if k > MAX_KERNEL:
        raise FbnasError(f"op {brief(name)}: kernel size {k} is above fbnas's limit of "
                         f"{MAX_KERNEL}")
    if e < 1:
        raise FbnasError(f"op {brief(name)}: expansion must be at least 1, got {e}")
    if g < 1:
        raise FbnasError(f"op {brief(name)}: groups must be at least 1, got {g}")
    return {"kernel": k, "expansion": e, "groups": g}


def _block_fits(spec: OpSpec, c_in: int, c_out: int, stride: int) -> None:
    g, mid = spec.groups, c_in * spec.expansion
    if mid > MAX_CHANNELS:
        raise FbnasError(f"op {brief(spec.name)} expands {c_in} channels to {mid}, above fbnas's "
                         f"limit of {MAX_CHANNELS}; use a smaller expansion")
    check_weights(mid * (c_in // g + spec.kernel ** 2 + c_out // g), f"op {brief(spec.name)}")
    if g > 1 and (c_in % g or c_out % g):
        raise FbnasError(
            f"op {brief(spec.name)} needs channels divisible by its {g} groups, got {c_in} -> "
            f"{c_out}; change the stage's channels or drop the op"
        )


register_op("skip", r"skip", Skip, grammar="'skip'", fused="skip")
register_op("inverted_residual", r"k(?P<kernel>\d+)_e(?P<expansion>\d+)(?:_g(?P<groups>\d+))?",
            InvertedResidual, grammar="kK_eE[_gG] with odd K, e.g. k3_e6, k5_e1_g2, k7_e4",
            params=_block_params, fits=_block_fits, fused="inverted_residual")
