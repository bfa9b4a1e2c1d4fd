"""The fast supernet computes what the per-candidate loop computes: outputs, gradients, buffers."""

import pytest
import torch
import torch.nn.functional as F

from fbnas.arch.space import load_space
from fbnas.config import load_config
from fbnas.errors import UsageError
from fbnas.latency.lut import LUT
from fbnas.search.supernet import FusedMixedOp, MixedOp, Supernet


def _close(fast, loop, what, rel=5e-5, scale=None):
    """Equal up to float32 rounding, on the scale of the reference (or of ``scale``)."""
    scale = loop.abs().max().item() if scale is None else scale
    err = (fast - loop).abs().max().item()
    assert err <= rel * max(scale, 1e-6), f"{what}: max error {err:.3g}, scale {scale:.3g}"


def _grads_close(fast, loop, rel=2e-4):
    """Every parameter's gradient equal on the scale of the largest weight gradient."""
    ref = dict(loop.named_parameters())
    grads = {n: p.grad for n, p in fast.named_parameters()}
    assert all((grads[n] is None) == (ref[n].grad is None) for n in ref)
    scale = max(p.grad.abs().max().item() for n, p in ref.items()
                if p.grad is not None and not n.endswith("theta"))
    for name, g in grads.items():
        if g is not None and not name.endswith("theta"):
            _close(g, ref[name].grad, name, rel, scale)


def _states_close(fast, loop, rel=2e-5):
    """Weights and BN buffers equal (batch counters exactly), on the scale of the largest."""
    ref = loop.state_dict()
    state = fast.state_dict()
    assert list(state) == list(ref)
    scale = max(t.abs().max().item() for t in ref.values() if t.is_floating_point())
    for name, t in state.items():
        if t.is_floating_point():
            _close(t, ref[name], name, rel, scale)
        else:
            assert torch.equal(t, ref[name]), name


def _pair(space, lut_data):
    lut = LUT(lut_data)
    torch.manual_seed(0)
    loop = Supernet(space, lut, impl="loop")
    torch.manual_seed(0)
    fast = Supernet(space, lut, impl="fast")
    return loop, fast


def _step(net, x, y, mode, seed):
    torch.manual_seed(seed)  # the same Gumbel noise for both implementations
    net.zero_grad(set_to_none=True)
    logits, cost = net(x, tau=2.0, mode=mode)
    (F.cross_entropy(logits, y) * cost.log()).backward()
    return logits.detach(), cost.detach()


@pytest.mark.parametrize("mode", ["soft", "hard"])
def test_tiny_supernet_outputs_grads_and_buffers_match(tiny_lut_data, mode):
    space = load_space("tiny")
    loop, fast = _pair(space, tiny_lut_data)
    assert list(loop.state_dict()) == list(fast.state_dict())
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
    for seed in (3, 4):  # two steps: the second starts from updated running statistics
        lo, co = _step(loop, x, y, mode, seed)
        lf, cf = _step(fast, x, y, mode, seed)
        _close(lf, lo, "logits")
        _close(cf, co, "expected cost")
    _grads_close(fast, loop)
    for a, b in zip(fast.theta_parameters(), loop.theta_parameters()):
        assert a.grad is not None and a.grad.abs().sum() > 0
        _close(a.grad, b.grad, "theta", rel=1e-3)
    _states_close(fast, loop)


def test_eval_modes_match_after_training_step(tiny_lut_data):
    space = load_space("tiny")
    loop, fast = _pair(space, tiny_lut_data)
    x = torch.randn(8, 3, 32, 32)
    y = torch.randint(0, 10, (8,))
    _step(loop, x, y, "soft", 0)
    _step(fast, x, y, "soft", 0)
    loop.eval()
    fast.eval()
    with torch.no_grad():
        for mode in ("softmax", "argmax"):
            _close(fast(x, mode=mode)[0], loop(x, mode=mode)[0], mode)


def test_checkpoints_load_across_implementations(tiny_lut_data):
    space = load_space("tiny")
    loop, fast = _pair(space, tiny_lut_data)
    x = torch.randn(4, 3, 32, 32)
    _step(fast, x, torch.arange(4), "soft", 0)
    loop.load_state_dict(fast.state_dict())  # strict: same keys and shapes
    loop.eval()
    fast.eval()
    with torch.no_grad():
        _close(loop(x, mode="softmax")[0], fast(x, mode="softmax")[0], "reloaded")
    assert fast.argmax_ops() == loop.argmax_ops()


def _slice_layers(space, indices):
    torch.manual_seed(0)
    loop = [MixedOp(space.layers[i], [1.0] * len(space.layers[i].candidates)) for i in indices]
    torch.manual_seed(0)
    fast = [FusedMixedOp(space.layers[i], [1.0] * len(space.layers[i].candidates))
            .to(memory_format=torch.channels_last) for i in indices]
    return loop, fast


def test_fbnet_cifar_two_layer_slice_matches():
    """A stride-2 layer with a projecting skip, then a residual layer with an identity skip."""
    space = load_space("fbnet_cifar")
    first, second = space.layers[9], space.layers[10]  # 32 -> 64 at 16x16 s2, 64 -> 64 at 8x8
    assert first.stride == 2 and second.stride == 1 and second.c_in == second.c_out
    loop, fast = _slice_layers(space, [9, 10])
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, first.c_in, first.h, first.w, generator=g)
    theta = [torch.randn(len(first.candidates), generator=g).requires_grad_()
             for _ in range(2)]
    target = torch.randn(4, second.c_out, 8, 8, generator=g)

    def run(layers, x):
        x = x.clone().requires_grad_()
        h = x
        for layer, t in zip(layers, theta):
            t.grad = None
            w = F.softmax(t / 2.0, dim=-1)
            h = layer(h, w, None)
        F.mse_loss(h, target).backward()
        return h.detach(), x.grad, [t.grad.clone() for t in theta]

    out_l, gx_l, gt_l = run(loop, x)
    out_f, gx_f, gt_f = run(fast, x.contiguous(memory_format=torch.channels_last))
    _close(out_f, out_l, "output")
    _close(gx_f, gx_l, "input gradient", rel=1e-3)
    for a, b in zip(gt_f, gt_l):
        _close(a, b, "theta gradient", rel=1e-3)
    for lf, ll in zip(fast, loop):
        _grads_close(lf, ll)
        _states_close(lf, ll)


def test_config_switch(tiny_lut_data):
    assert load_config(None, ["search.supernet=loop"]).search.supernet == "loop"
    assert load_config(None, []).search.supernet == "fast"
    with pytest.raises(UsageError, match="search.supernet must be one of loop, fast"):
        load_config(None, ["search.supernet=vectorised"])
    space = load_space("tiny")
    loop, fast = _pair(space, tiny_lut_data)
    assert not any(isinstance(m, FusedMixedOp) for m in loop.layers)
    assert all(isinstance(m, FusedMixedOp) for m in fast.layers)


CRASH_SPACE = """name: narrow_224
input: {channels: 3, resolution: 224}
stem: {channels: 8, kernel: 3, stride: 2}
stages:
  - {channels: 8, blocks: 1, stride: 2}
  - {channels: 16, blocks: 1, stride: 2}
candidates: [CAND, skip]
head: {channels: 32, classes: 10}
"""

CRASH_STEP = """
import sys, torch
from tests.latency.test_lut import load_lut_from_space
from fbnas.arch.space import load_space
from fbnas.search.supernet import Supernet
torch.set_num_threads(1)
torch.manual_seed(0)
net = Supernet(load_space(sys.argv[1]), load_lut_from_space(sys.argv[1]), impl="fast")
x = torch.randn(2, 3, 224, 224)
for mode in ("soft", "hard", "soft"):
    logits, cost = net(x, tau=1.0, mode=mode)
    logits.sum().backward()
print("survived")
"""


@pytest.mark.slow
@pytest.mark.parametrize("candidate", ["k3_e1", "k5_e1"])
def test_narrow_strided_skip_at_224_does_not_crash_the_fast_supernet(tmp_path, candidate):
    """An 8-channel layer at 112x112 mixing a block with a strided skip: oneDNN's weight
    gradient of the skip's strided 1x1 conv on channels_last input killed the process
    (SIGSEGV in soft mode, heap corruption and abort in hard mode). Run in a child process,
    so that a crash fails this test instead of the suite."""
    import subprocess
    import sys
    from pathlib import Path

    space = tmp_path / "narrow.yaml"
    space.write_text(CRASH_SPACE.replace("CAND", candidate))
    res = subprocess.run([sys.executable, "-c", CRASH_STEP, str(space)], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert res.returncode == 0 and "survived" in res.stdout, (res.returncode, res.stderr[-800:])


def test_strided_pointwise_conv_is_the_same_conv_on_the_subsampled_input():
    """The form the fast supernet runs strided 1x1 convs in gives the numbers nn.Conv2d
    gives, gradients included, with the same parameters and state_dict."""
    from torch import nn

    from fbnas.search.fused import route_around_strided_pointwise

    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.Conv2d(16, 16, 3, 2, 1))
    net = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.Conv2d(16, 16, 3, 2, 1))
    net.load_state_dict(ref.state_dict())
    assert route_around_strided_pointwise(net) == 1  # the 3x3 conv is left alone
    assert list(net.state_dict()) == list(ref.state_dict())
    x = torch.randn(2, 8, 15, 15)
    for m in (ref, net):
        m(x).square().sum().backward()
    assert torch.allclose(net(x), ref(x), rtol=1e-6, atol=1e-6)
    for a, b in zip(net.parameters(), ref.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6)
