"""The stochastic supernet: mixed ops over all candidates, weighted by Gumbel-softmax samples.

One Gumbel draw per layer and batch (or per image) weights both the mixed outputs and the
expected cost, so the latency term and the accuracy term see the same architecture sample.
theta lives in each MixedOp as an ``nn.Parameter`` so that a DistributedDataParallel wrapper
averages its gradients like any other parameter.

Weight sharing only works if the candidates of a layer are interchangeable for the layers
after it. Two defaults make them so (without them a hard-mode search's training CE stays at
chance even when only 2 candidates per layer switch; docs/search.md, Supernet):

- ``zero_init_residual``: the last BN scale of every residual candidate starts at zero, so
  at initialisation every candidate of a residual layer is the identity. Otherwise each
  adds its own unrelated random features, and which ones differs from step to step.
- ``soft_transitions``: in hard mode the transition layers (stride 2 or a new width, where
  no candidate keeps the input) mix all candidates with the Gumbel-softmax weights, as in
  soft mode, instead of switching between unrelated representations every step; argmax
  evaluation weights them by softmax(theta). The other layers run one sampled candidate.
  With ``transition_paths`` K (1 < K < candidates) a transition layer mixes only the K
  candidates with the largest perturbed scores (theta + Gumbel noise, the Gumbel-top-K draw
  of K candidates without replacement from softmax(theta)), weighted by the Gumbel-softmax
  over those K: a weight step there then costs K candidates instead of all of them, as
  ProxylessNAS's two sampled paths do.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from fbnas.arch.depthwise import route_depthwise
from fbnas.arch.model import Head, Stem
from fbnas.arch.ops import build_op
from fbnas.arch.pointwise import route_small_map_pointwise
from fbnas.arch.space import Layer, SearchSpace
from fbnas.errors import FbnasError, brief
from fbnas.latency.lut import LUT
from fbnas.search.entangled import entangled_candidates, route_entangled
from fbnas.search.fused import FusedPlan, fused_forward, route_around_strided_pointwise

MODES = ("soft", "hard", "argmax", "softmax")
IMPLEMENTATIONS = ("loop", "fast")


def gumbel_noise(shape, like: torch.Tensor) -> torch.Tensor:
    """g = -log(-log U), U uniform on (0, 1), in ``like``'s dtype and device."""
    u = torch.rand(shape, device=like.device, dtype=like.dtype)
    tiny = torch.finfo(like.dtype).tiny
    return -torch.log(-torch.log(u.clamp(min=tiny, max=1.0 - 1e-7)))


def gumbel_softmax(theta: torch.Tensor, tau: float, hard: bool, samples: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Sample softmax((theta + g) / tau) with g = -log(-log U); straight-through if ``hard``.

    Returns the weights, shape (n,) or (samples, n), and for ``hard`` the chosen indices.
    """
    shape = theta.shape if samples is None else (samples, theta.numel())
    g = gumbel_noise(shape, theta)
    y = F.softmax((theta + g) / tau, dim=-1)
    if not hard:
        return y, None
    idx = y.argmax(dim=-1)
    one_hot = F.one_hot(idx, theta.numel()).to(y.dtype)
    return one_hot - y.detach() + y, idx


def gumbel_top_k(theta: torch.Tensor, tau: float, k: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """K candidates drawn without replacement from softmax(theta) (the K largest of theta + g)
    and their weights: the softmax of (theta + g) / tau over those K, zero elsewhere."""
    z = (theta + gumbel_noise(theta.shape, theta)) / tau
    chosen = torch.topk(z.detach(), k).indices
    mask = torch.zeros_like(z, dtype=torch.bool)
    mask[chosen] = True
    w = F.softmax(z.masked_fill(~mask, float("-inf")), dim=-1)
    return w, tuple(sorted(chosen.tolist()))


class MixedOp(nn.Module):
    """All candidates of one searchable layer, their theta and their costs."""

    def __init__(self, layer: Layer, costs: list[float], zero_init_residual: bool = False,
                 soft_transition: bool = False, shared_weights: bool = False,
                 transition_paths: int = 0):
        super().__init__()
        self.candidates = tuple(layer.candidates)
        if shared_weights:  # the blocks slice self.shared (see fbnas.search.entangled)
            self.ops, self.shared = entangled_candidates(
                list(self.candidates), layer.c_in, layer.c_out, layer.stride)
        else:
            self.ops = nn.ModuleList(build_op(op, layer.c_in, layer.c_out, layer.stride)
                                     for op in self.candidates)
        # A transition layer (new stride or width) has no identity path: every candidate
        # replaces the representation with one of its own, unrelated to the others' at init.
        self.transition = layer.transition
        self.soft_transition = soft_transition and self.transition
        # mix a sampled K of the candidates there instead of all (0: all)
        self.mix_k = transition_paths if 1 < transition_paths < len(self.candidates) else 0
        if zero_init_residual:
            for op in self.ops:
                init = getattr(op, "zero_init_residual", None)
                if init is not None:
                    init()
        self.theta = nn.Parameter(torch.zeros(len(self.candidates)))
        self.register_buffer("cost", torch.tensor(costs, dtype=torch.float32), persistent=False)

    def weights(self, mode: str, tau: float, samples: int | None):
        """(weights, chosen indices or None) for one forward pass in ``mode``: an index tensor
        picks one candidate (or one per image), a tuple of ints the candidates to mix."""
        if mode == "hard" and self.soft_transition and self.mix_k and samples is None:
            return gumbel_top_k(self.theta, tau, self.mix_k)
        if mode == "soft" or (mode == "hard" and self.soft_transition):
            return gumbel_softmax(self.theta, tau, hard=False, samples=samples)
        if mode == "hard":
            return gumbel_softmax(self.theta, tau, hard=True, samples=samples)
        if mode == "softmax" or (mode == "argmax" and self.soft_transition):
            return F.softmax(self.theta, dim=-1), None
        if mode == "argmax":
            idx = self.theta.argmax()
            return F.one_hot(idx, len(self.candidates)).to(self.theta.dtype), idx
        raise ValueError(f"unknown mode {mode!r}")

    def forward(self, x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor | None) -> torch.Tensor:
        if idx is None:  # every candidate runs, weighted
            if w.dim() == 1:
                return sum(w[i] * op(x) for i, op in enumerate(self.ops))
            return sum(w[:, i].view(-1, 1, 1, 1) * op(x) for i, op in enumerate(self.ops))
        if isinstance(idx, tuple):  # the sampled few of a transition layer, weighted
            return sum(w[i] * self.ops[i](x) for i in idx)
        if idx.dim() == 0:  # one candidate for the whole batch
            i = int(idx)
            return w[i] * self.ops[i](x)
        out = None  # one candidate per image: run each chosen op on its images
        for i in idx.unique().tolist():
            mask = idx == i
            y = w[mask, i].view(-1, 1, 1, 1) * self.ops[i](x[mask])
            if out is None:
                out = y.new_zeros((x.shape[0],) + y.shape[1:])
            out = out.index_put((mask.nonzero().squeeze(1),), y)
        return out


class FusedMixedOp(MixedOp):
    """A MixedOp whose all-candidates forward runs fused (see :mod:`fbnas.search.fused`).

    Same parameters, buffers and state_dict keys as MixedOp; only batch-level soft/softmax
    weighting takes the fused path, single-op and per-image forwards use the loop.
    """

    def __init__(self, layer: Layer, costs: list[float], **options):
        super().__init__(layer, costs, **options)
        self.plan = FusedPlan(self.ops, self.candidates)

    def forward(self, x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor | None) -> torch.Tensor:
        if idx is None and w.dim() == 1:
            return fused_forward(self.ops, self.plan, x, w)
        return super().forward(x, w, idx)


class Supernet(nn.Module):
    """Stem, one MixedOp per searchable layer, head; forward returns (logits, expected cost).

    ``impl`` picks how a soft step runs: ``loop`` (every candidate in turn, the reference) or
    ``fast`` (channels_last memory format and fused mixed ops; the same math, parameters and
    state_dict keys, so checkpoints load into either).
    """

    def __init__(self, space: SearchSpace, lut: LUT, cost: str = "latency", impl: str = "loop",
                 zero_init_residual: bool = True, soft_transitions: bool = True,
                 shared_weights: bool = False, transition_paths: int = 0):
        super().__init__()
        if impl not in IMPLEMENTATIONS:
            raise ValueError(f"unknown supernet implementation {impl!r}")
        lut.check_space(space)
        self.impl = impl
        self.space = space
        self.cost_metric = cost
        self.stem = Stem(space.in_channels, space.stem_channels, space.stem_kernel,
                         space.stem_stride)
        layers = []
        # the fused soft forward reads each candidate's own modules; shared weights loop
        mixed = FusedMixedOp if impl == "fast" and not shared_weights else MixedOp
        for layer, row in zip(space.layers, lut.data["layers"]):
            costs = [lut.cost(row["candidates"][op], cost) for op in layer.candidates]
            layers.append(mixed(layer, costs, zero_init_residual=zero_init_residual,
                                soft_transition=soft_transitions, shared_weights=shared_weights,
                                transition_paths=transition_paths))
        self.layers = nn.ModuleList(layers)
        self.head = Head(space.final_channels, space.head_channels, space.num_classes)
        self.fixed_cost = lut.fixed_cost(cost)
        cal = lut.calibration if cost == "latency" else None
        self.cal_a, self.cal_b = cal if cal else (1.0, 0.0)
        if impl == "fast":
            self.to(memory_format=torch.channels_last)
            route_around_strided_pointwise(self)  # a oneDNN defect (fbnas/search/fused.py)
            route_depthwise(self)  # another one (fbnas/arch/depthwise.py)
            route_small_map_pointwise(self)  # faster as matrix products (fbnas/arch/pointwise.py)
            route_entangled(self)  # both routes for shared-weight blocks' functional convs

    def forward(self, x: torch.Tensor, tau: float = 1.0, mode: str = "soft",
                per_sample: bool = False, all_candidates: bool = False,
                path: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``all_candidates`` (hard mode): run every candidate, weighted by the straight-through
        one-hot sample, so the output is still the sampled path's but d loss / d weight_k =
        <grad, op_k(x)> exists for every candidate k, as the Gumbel straight-through estimator
        defines it. Running only the sampled candidate leaves that one term; in a residual
        layer it is dominated by the identity part every candidate shares, and theta stays
        near uniform.

        ``path`` (one candidate index per layer) runs exactly that architecture, transition
        layers included, whatever ``mode`` says: the network ``fbnas sample`` would return,
        with the supernet's weights (the usual one-shot estimate of its accuracy)."""
        samples = x.shape[0] if per_sample and mode in ("soft", "hard") else None
        if path is not None and len(path) != len(self.layers):
            raise ValueError(f"path has {len(path)} entries for {len(self.layers)} layers")
        if self.impl == "fast":
            x = x.contiguous(memory_format=torch.channels_last)
        x = self.stem(x)
        dtype, weights = x.dtype, []
        for i, layer in enumerate(self.layers):
            if path is not None:
                idx = torch.tensor(path[i], device=x.device)
                w = F.one_hot(idx, len(layer.candidates)).to(layer.theta.dtype)
            else:
                w, idx = layer.weights(mode, tau, samples)
            x = layer(x, w, None if all_candidates else idx)
            weights.append(w)
        return self.head(x), self.weighted_cost(weights, dtype)

    def theta_parameters(self) -> list[nn.Parameter]:
        return [layer.theta for layer in self.layers]

    def weight_parameters(self) -> list[nn.Parameter]:
        theta = {id(p) for p in self.theta_parameters()}
        return [p for p in self.parameters() if id(p) not in theta]

    def probabilities(self) -> list[torch.Tensor]:
        return [F.softmax(layer.theta.detach(), dim=-1) for layer in self.layers]

    def argmax_ops(self) -> list[str]:
        return [layer.candidates[int(layer.theta.argmax())] for layer in self.layers]

    def path_of(self, ops: list[str]) -> list[int]:
        """Candidate indices of ``ops``, one per layer (for ``forward(path=...)``)."""
        return [layer.candidates.index(op) for layer, op in zip(self.layers, ops)]

    def weighted_cost(self, weights: list[torch.Tensor], dtype: torch.dtype | None = None
                      ) -> torch.Tensor:
        """The calibrated cost of the network that ``weights`` pick or mix: the fixed part
        (stem and head) plus, layer by layer, each candidate's cost times its weight, then
        the table's calibration. ``weights`` holds one tensor per layer, (candidates,) or one
        row per image; the sum starts in ``dtype`` (default: torch's), on the costs' device.

        The one place the cost term is summed: the forward pass, the cost of a named network,
        the expected cost and the benchmarks' cost-only control all use it."""
        total = torch.tensor(self.fixed_cost, dtype=dtype, device=self.layers[0].cost.device)
        for w, layer in zip(weights, self.layers):
            total = total + (w * layer.cost).sum(dim=-1)
        return self.cal_a * total + self.cal_b

    @torch.no_grad()
    def cost_of(self, ops: list[str]) -> float:
        weights = []
        for layer, op in zip(self.layers, ops):
            if op not in layer.candidates:
                raise FbnasError(f"op {brief(op)} is not a candidate of this layer")
            pick = torch.tensor(layer.candidates.index(op), device=layer.cost.device)
            weights.append(F.one_hot(pick, len(layer.candidates)).double())
        # in float64, one-hot: the table's float32 costs summed exactly as Python floats
        return float(self.weighted_cost(weights, torch.float64))

    @torch.no_grad()
    def expected_cost(self) -> float:
        """Expected cost under softmax(theta), without Gumbel noise."""
        return float(self.weighted_cost(self.probabilities(), torch.float64))

    def theta_state(self) -> list[torch.Tensor]:
        return [layer.theta.detach().cpu().clone() for layer in self.layers]


@contextmanager
def recalibrated_bn(net: nn.Module, batches: Iterable[torch.Tensor],
                    forward: Callable[[torch.Tensor], object]):
    """Evaluate with batch-norm statistics re-estimated for the path ``forward`` runs.

    A candidate's running statistics are averaged over every path it was trained in, but a
    deterministic evaluation runs one path whose inputs differ from that mix, so its running
    statistics are wrong for it (the supernet then scores near chance although its weights
    have learned). Inside this context the statistics are recomputed as a plain average over
    ``batches`` run through ``forward`` in training mode; on exit the trained statistics are
    put back, so training (and an exact resume) never sees the recalibrated ones.
    """
    bns = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
           and m.track_running_stats]
    saved = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone(),
              m.momentum) for m in bns]
    was_training = net.training
    try:
        for m in bns:
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration batches
        net.train()
        with torch.no_grad():
            for x in batches:
                forward(x)
        net.eval()
        yield
    finally:
        for m, (mean, var, count, momentum) in zip(bns, saved):
            m.running_mean.copy_(mean)
            m.running_var.copy_(var)
            m.num_batches_tracked.copy_(count)
            m.momentum = momentum
        net.train(was_training)
