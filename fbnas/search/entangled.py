"""Entangled candidates: the inverted-residual candidates of a layer slice one set of weights.

With independent weights each candidate of a layer trains only when a step samples it (1 in
9 steps on fbnet_cifar), and a residual candidate starts as the identity (its last BN scale
is zero, which the supernet needs to train at all). Measured on the CIFAR-10 subset after
the 3-epoch demo search: the last BN scales of the residual candidates were still 0.004 to
0.1, so those layers barely changed the supernet's output, theta's cross-entropy gradient
there was about a tenth of the transition layers' and smaller than the latency term's, and
the residual layers were chosen by latency (and noise) alone.

Here every ``kK_eE[_gG]`` candidate of a layer reads its convolutions from the layer's
:class:`SharedWeights`, as in single-path and once-for-all supernets: expansion E uses the
first ``c_in * E`` channels of the widest expansion, kernel K the centre K x K of the largest
depthwise kernel, and G groups the block-diagonal part of the 1x1 weights. Every step that
samples any block trains the shared weights, the BN scales included, and the candidates stay
related (a smaller one is a part of a larger one), so switching between them does not swap
unrelated features. Each candidate keeps its own BN running statistics, since a slice's
statistics depend on which candidate ran. Other ops (``skip``, registered families) keep
their own weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from fbnas.arch.depthwise import depthwise_conv
from fbnas.arch.folded_bn import bn_factor
from fbnas.arch.ops import ChannelShuffle, OpSpec, build_op, check_op_fits, parse_op
from fbnas.arch.pointwise import pointwise_conv

#: the op family whose candidates share weights
FAMILY = "inverted_residual"


class SharedWeights(nn.Module):
    """The widest expansion's and the largest kernel's convolutions and BN scales of a layer."""

    def __init__(self, c_in: int, c_out: int, specs: list[OpSpec]):
        super().__init__()
        self.kernel = max(s.kernel for s in specs)
        mid = c_in * max(s.expansion for s in specs)
        self.expand = nn.Parameter(torch.empty(mid, c_in, 1, 1))
        self.depthwise = nn.Parameter(torch.empty(mid, 1, self.kernel, self.kernel))
        self.project = nn.Parameter(torch.empty(c_out, mid, 1, 1))
        for w in (self.expand, self.depthwise, self.project):
            nn.init.kaiming_uniform_(w, a=math.sqrt(5))  # nn.Conv2d's default
        self.gamma = nn.ParameterList(nn.Parameter(torch.ones(n)) for n in (mid, mid, c_out))
        self.beta = nn.ParameterList(nn.Parameter(torch.zeros(n)) for n in (mid, mid, c_out))


def _block_diagonal(w: torch.Tensor, groups: int) -> torch.Tensor:
    """The grouped-conv weight (out, in / groups, 1, 1) of a dense 1x1 weight (out, in)."""
    if groups == 1:
        return w
    o, i = w.shape[0] // groups, w.shape[1] // groups
    return torch.cat([w[g * o:(g + 1) * o, g * i:(g + 1) * i] for g in range(groups)])


class EntangledBlock(nn.Module):
    """Candidate ``kK_eE[_gG]`` computed from a slice of the layer's :class:`SharedWeights`.

    The shared weights are not a submodule (they belong to the layer, once); this module
    holds only the candidate's BN running statistics.

    Routed (:func:`route_entangled`, as the fast supernet routes its modules), its convs take
    the CPU's faster forms where they were measured to pay: 5x5 depthwise weight gradients at
    stride 1 in forward form (:mod:`fbnas.arch.depthwise`), 1x1 convs on maps of 8x8 and less
    as matrix products (:mod:`fbnas.arch.pointwise`). The same numbers up to float rounding.
    """

    #: whether the convs take the routes above (set per block by :func:`route_entangled`)
    routed = False

    def __init__(self, shared: SharedWeights, spec: OpSpec, c_in: int, c_out: int,
                 stride: int):
        super().__init__()
        object.__setattr__(self, "shared", shared)
        self.kernel, self.groups, self.stride = spec.kernel, spec.groups, stride
        self.mid = c_in * spec.expansion
        self.stats = nn.ModuleList(nn.BatchNorm2d(n, affine=False)
                                   for n in (self.mid, self.mid, c_out))
        self.shuffle = ChannelShuffle(self.groups) if self.groups > 1 else None
        self.residual = stride == 1 and c_in == c_out

    def zero_init_residual(self) -> None:
        """Zero the shared last BN scale, so every residual candidate starts as the identity."""
        if self.residual:
            nn.init.zeros_(self.shared.gamma[2])

    def _bn(self, y: torch.Tensor, i: int) -> torch.Tensor:
        stats, n = self.stats[i], y.shape[1]
        factor = bn_factor(stats) if stats.training else 0.0
        return F.batch_norm(y, stats.running_mean, stats.running_var, self.shared.gamma[i][:n],
                            self.shared.beta[i][:n], stats.training, factor, stats.eps)

    def _pointwise(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        w = _block_diagonal(w, self.groups)
        return (pointwise_conv(x, w, None, self.groups) if self.routed
                else F.conv2d(x, w, groups=self.groups))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, m, k = self.shared, self.mid, self.kernel
        y = F.relu_(self._bn(self._pointwise(x, s.expand[:m]), 0))
        if self.shuffle is not None:
            y = self.shuffle(y)
        off = (s.kernel - k) // 2
        dw = s.depthwise[:m, :, off:off + k, off:off + k]
        stride, pad = (self.stride, self.stride), (k // 2, k // 2)
        y = (depthwise_conv(y, dw, stride, pad) if self.routed
             else F.conv2d(y, dw, stride=stride, padding=pad, groups=m))
        y = self._bn(self._pointwise(F.relu_(self._bn(y, 1)), s.project[:, :m]), 2)
        return x + y if self.residual else y


def entangled_candidates(names: list[str], c_in: int, c_out: int, stride: int
                         ) -> tuple[nn.ModuleList, SharedWeights | None]:
    """The candidate modules of one layer and the weights its blocks share (None if none)."""
    specs = [parse_op(n) for n in names]
    for n in names:
        check_op_fits(n, c_in, c_out, stride)
    blocks = [s for s in specs if s.family.name == FAMILY]
    shared = SharedWeights(c_in, c_out, blocks) if blocks else None
    ops = nn.ModuleList(
        EntangledBlock(shared, s, c_in, c_out, stride) if s.family.name == FAMILY
        else build_op(s.name, c_in, c_out, stride) for s in specs)
    return ops, shared


def route_entangled(module: nn.Module) -> int:
    """Route the convs of every :class:`EntangledBlock` in ``module`` (see its docstring);
    return how many blocks were routed."""
    blocks = [m for m in module.modules() if isinstance(m, EntangledBlock)]
    for b in blocks:
        b.routed = True
    return len(blocks)
