"""A fixed network's blocks folding their expansion BN into the 1x1 conv while training
(fbnas/arch/folded_bn.py): the same function, gradients and running statistics."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fbnas.arch.folded_bn import fold_pays
from fbnas.arch.model import Network
from fbnas.arch.space import load_space


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_folded_training_step_matches_batch_norm(memory_format):
    torch.manual_seed(0)
    # every candidate kind of the tiny space: plain, grouped (with a shuffle), k5, skip
    ops = ["k3_e3", "k3_e1_g2", "k5_e1", "skip"]
    plain = Network(load_space("tiny").definition(ops, name="t"))
    for p in plain.parameters():  # away from the initial unit scales and zero shifts
        p.data.add_(0.1 * torch.randn_like(p))
    folded = copy.deepcopy(plain)
    # every block (skip has no expansion), including those where it does not pay
    assert folded.fold_batch_norm(everywhere=True) == 3
    x = torch.randn(16, 3, 32, 32).contiguous(memory_format=memory_format)
    y = torch.randint(10, (16,))
    calls = []
    folded.blocks[0].body[0][1].register_forward_hook(lambda *a: calls.append(1))
    for net in (plain, folded):
        net.to(memory_format=memory_format).train()
        F.cross_entropy(net(x), y).backward()
    assert not calls  # the expansion BN module never ran: its statistics came from x
    with torch.no_grad():
        assert torch.allclose(plain(x), folded(x), rtol=1e-4, atol=1e-4)
    for (name, a), b in zip(plain.named_parameters(), folded.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-5), name
    for (name, a), b in zip(plain.named_buffers(), folded.buffers()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-6), name
    # evaluation is BN with the running statistics, whichever way they were gathered
    plain.eval(), folded.eval()
    with torch.no_grad():
        assert torch.allclose(plain(x), folded(x), rtol=1e-4, atol=1e-5)
    assert calls


def test_fold_goes_where_it_pays_can_be_turned_off_and_saves_nothing():
    net = Network(load_space("tiny").definition(["k3_e3", "k3_e1", "k3_e3", "k3_e1_g2"],
                                                 name="t"))
    keys = set(net.state_dict())
    # expansion 1 has no wider tensor to save passes over
    assert net.fold_batch_norm() == 2
    assert [getattr(b, "fold_bn", None) for b in net.blocks] == [True, False, True, False]
    assert set(net.state_dict()) == keys
    assert net.fold_batch_norm(False) == 0
    assert not any(getattr(m, "fold_bn", False) for m in net.modules())


@pytest.mark.parametrize("c_in,expansion,pays", [
    (24, 6, True), (112, 6, True), (32, 3, True), (112, 3, False), (16, 1, False)])
def test_fold_pays_where_the_wide_tensor_outweighs_the_covariance(c_in, expansion, pays):
    assert fold_pays(c_in, expansion) is pays


@pytest.mark.parametrize("device,precision,key,folds", [
    ("cpu", "fp32", True, True), ("cpu", "bf16", True, False),
    ("cuda", "fp32", True, False), ("cpu", "fp32", False, False)])
def test_retrain_folds_fp32_cpu_steps_only(device, precision, key, folds):
    from types import SimpleNamespace

    from fbnas.config import load_config
    from fbnas.runs.retrain import Retrain

    cfg = load_config(None, [f"run.precision={precision}", f"retrain.fold_bn={str(key).lower()}"])
    me = SimpleNamespace(cfg=cfg, device=torch.device(device))
    assert Retrain.folds_batch_norm(me) is folds


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_strided_pointwise_input_gradient_keeps_the_input_format(memory_format):
    """A strided 1x1 conv's input, subsampled: the values and gradient of slicing, the
    gradient in the input's format (a channels_last layer input stays channels_last)."""
    from fbnas.arch.folded_bn import pointwise_input

    x = torch.randn(2, 5, 7, 6).contiguous(memory_format=memory_format)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = pointwise_input(a, (2, 2)), b[:, :, ::2, ::2]
    assert torch.equal(ya, yb)
    g = torch.randn_like(yb)
    ya.backward(g)
    yb.backward(g)
    assert torch.equal(a.grad, b.grad)
    assert a.grad.is_contiguous(memory_format=memory_format)
