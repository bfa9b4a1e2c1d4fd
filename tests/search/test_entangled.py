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
