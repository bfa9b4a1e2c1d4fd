"""Shared (entangled) candidate weights: each block is a slice of the layer's weights."""

import pytest
import torch
import torch.nn.functional as F

from fbnas.arch.ops import InvertedResidual, build_op
from fbnas.arch.space import load_space
from fbnas.latency.lut import LUT
from fbnas.search.entangled import EntangledBlock, entangled_candidates
from fbnas.search.supernet import Supernet

NAMES = ["k3_e1", "k3_e1_g2", "k3_e3", "k5_e1", "k5_e6_g2", "skip"]


def _copy_slices(block: EntangledBlock, plain: InvertedResidual) -> None:
    """Give a stand-alone block the weights ``block`` slices out of the shared ones."""
    s, m, g, k = block.shared, block.mid, block.groups, block.kernel
    expand, *middle, project = plain.body
    depthwise = middle[-1]

    def grouped(w):
        o, i = w.shape[0] // g, w.shape[1] // g
        return torch.cat([w[j * o:(j + 1) * o, j * i:(j + 1) * i] for j in range(g)])

    off = (s.kernel - k) // 2
    with torch.no_grad():
        expand[0].weight.copy_(grouped(s.expand[:m]))
        depthwise[0].weight.copy_(s.depthwise[:m, :, off:off + k, off:off + k])
        project[0].weight.copy_(grouped(s.project[:, :m]))
        for i, seq in enumerate((expand, depthwise, project)):
            n = seq[1].num_features
            seq[1].weight.copy_(s.gamma[i][:n])
            seq[1].bias.copy_(s.beta[i][:n])


@pytest.mark.parametrize("stride,c_out", [(1, 8), (2, 12)])
def test_each_candidate_is_the_block_its_slice_defines(stride, c_out):
    """A shared candidate computes exactly what a stand-alone block with the sliced weights
    computes, in training and evaluation mode (running statistics included)."""
    torch.manual_seed(0)
    ops, shared = entangled_candidates(NAMES, 8, c_out, stride)
    with torch.no_grad():
        for p in shared.parameters():
            p.add_(0.1 * torch.randn_like(p))  # gammas and betas away from 1 and 0
    x = torch.randn(4, 8, 16, 16)
    for name, op in zip(NAMES, ops):
        plain = build_op(name, 8, c_out, stride)
        if name == "skip":
            assert not isinstance(op, EntangledBlock)
            continue
        _copy_slices(op, plain)
        for train in (True, False):
            op.train(train)
            plain.train(train)
            assert torch.allclose(op(x), plain(x), atol=1e-5), (name, train)


def test_candidates_share_and_train_one_set_of_weights(tiny_lut_data):
    torch.manual_seed(0)
    space, lut = load_space("tiny"), LUT(tiny_lut_data)
    shared = Supernet(space, lut, shared_weights=True)
    independent = Supernet(space, lut, shared_weights=False)
    n = sum(p.numel() for p in shared.weight_parameters())
    assert n < sum(p.numel() for p in independent.weight_parameters())
    # zero-initialised: every residual candidate starts as the identity
    layer = next(m for m in shared.layers if not m.transition)
    x = torch.randn(2, 8, 16, 16)
    for op, name in zip(layer.ops, layer.candidates):
        assert torch.equal(op.eval()(x), x), name
    # training one candidate moves the weights the others read (once the zero-initialised
    # last BN scale lets gradients through)
    with torch.no_grad():
        layer.shared.gamma[2].fill_(0.5)
    shared.train()
    big = layer.candidates.index("k3_e3")
    before = layer.ops[big].shared.depthwise.detach().clone()
    small = layer.candidates.index("k3_e1")
    out = layer(x, F.one_hot(torch.tensor(small), len(layer.candidates)).float(),
                torch.tensor(small))
    out.square().mean().backward()
    torch.optim.SGD(shared.weight_parameters(), lr=1.0).step()
    after = layer.ops[big].shared.depthwise.detach()
    assert not torch.equal(before[:8], after[:8])  # k3_e1's slice of k3_e3's weights moved
    assert torch.equal(before[8:], after[8:])  # the channels only e3 uses did not


def test_shared_supernet_theta_gradient_reaches_every_candidate(tiny_lut_data):
    torch.manual_seed(0)
    net = Supernet(load_space("tiny"), LUT(tiny_lut_data), shared_weights=True)
    with torch.no_grad():  # trained residual bodies: their last BN scales away from zero
        for layer in net.layers:
            layer.shared.gamma[2].fill_(0.5)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    logits, _ = net(x, tau=5.0, mode="hard", all_candidates=True)
    F.cross_entropy(logits, y).backward()
    for layer in net.layers:
        assert bool((layer.theta.grad != 0).all()), layer.candidates


def _graph_names(t: torch.Tensor) -> set[str]:
    names, todo, seen = set(), [t.grad_fn], set()
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        todo.extend(f for f, _ in fn.next_functions)
    return names


def test_routed_blocks_take_the_fast_forms_and_compute_the_same():
    """On a 4x4 map (where the fast supernet routes them) a shared 5x5 block trains its
    depthwise weight gradient in forward form and its 1x1 convs as matrix products, with the
    outputs and gradients of the plain convs up to float rounding."""
    torch.manual_seed(0)
    ops, shared = entangled_candidates(["k3_e3", "k5_e6"], 8, 8, 1)
    shared.to(memory_format=torch.channels_last)
    with torch.no_grad():
        for p in shared.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x0 = torch.randn(4, 8, 4, 4).contiguous(memory_format=torch.channels_last)
    block = ops[1]
    results = []
    for routed in (False, True):
        block.routed = routed
        shared.zero_grad()
        x = x0.clone().requires_grad_()
        out = block(x)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append((out.detach(), x.grad, [p.grad.clone() for p in shared.parameters()]))
        taken = _graph_names(out)
        assert ("_DepthwiseConvBackward" in taken) == routed, taken
        assert ("_ProductsBackward" in taken) == routed, taken
    (a, ga, pa), (b, gb, pb) = results
    assert torch.allclose(a, b, atol=1e-5)
    assert torch.allclose(ga, gb, atol=1e-5)
    for u, v in zip(pa, pb):
        assert torch.allclose(u, v, atol=1e-4, rtol=1e-4)


def test_the_fast_supernet_routes_its_shared_blocks(tiny_lut_data):
    space, lut = load_space("tiny"), LUT(tiny_lut_data)
    for impl, routed in (("loop", False), ("fast", True)):
        net = Supernet(space, lut, impl=impl, shared_weights=True)
        blocks = [m for m in net.modules() if isinstance(m, EntangledBlock)]
        assert blocks and all(b.routed == routed for b in blocks)
