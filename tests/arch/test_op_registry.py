"""One register_op call makes a new op a candidate everywhere: names, spaces, tables, supernet."""

import pytest
import torch
import torch.nn.functional as F

from fbnas.arch import ops
from fbnas.arch.model import Network
from fbnas.arch.ops import build_op, conv_bn, parse_op, register_op
from fbnas.arch.space import SearchSpace
from fbnas.errors import FbnasError
from fbnas.latency.lut import LUT, profile_space
from fbnas.search.supernet import Supernet

SPACE = {
    "name": "with_conv", "input": {"channels": 3, "resolution": 16},
    "stem": {"channels": 8, "kernel": 3, "stride": 1},
    "stages": [{"channels": 8, "blocks": 1, "stride": 1},
               {"channels": 16, "blocks": 1, "stride": 2}],
    "candidates": ["conv_k3", "k3_e1", "skip"],
    "head": {"channels": 32, "classes": 10},
}


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry for the test to extend; the real one is put back afterwards."""
    monkeypatch.setattr(ops, "OPS", dict(ops.OPS))


def register_conv():
    """A plain KxK conv + BN + ReLU candidate named conv_kK, with odd K from 1 to 7."""
    register_op("conv", r"conv_k(?P<kernel>[1357])",
                lambda c_in, c_out, stride, kernel: conv_bn(c_in, c_out, kernel, stride),
                grammar="conv_kK with K in 1, 3, 5, 7")


def test_an_unregistered_name_is_refused_with_the_grammar(registry):
    with pytest.raises(FbnasError, match="unknown op 'conv_k3'"):
        parse_op("conv_k3")
    with pytest.raises(FbnasError, match="unknown op"):
        SearchSpace.from_dict(SPACE)
    register_conv()
    with pytest.raises(FbnasError, match="conv_kK with K in 1, 3, 5, 7"):
        parse_op("conv_k4")
    with pytest.raises(ValueError, match="already registered"):
        register_conv()


def test_a_registered_op_builds_and_fits_shapes(registry):
    register_conv()
    assert parse_op("conv_k5").params == {"kernel": 5}
    op = build_op("conv_k5", 8, 16, 2)
    assert op(torch.randn(2, 8, 9, 9)).shape == (2, 16, 5, 5)
    with pytest.raises(FbnasError, match="stride 3"):
        build_op("conv_k3", 8, 8, 3)


@pytest.mark.parametrize("mode", ["soft", "hard"])
def test_a_registered_op_is_a_searchable_candidate(registry, mode):
    register_conv()
    space = SearchSpace.from_dict(SPACE)
    assert all("conv_k3" in layer.candidates for layer in space.layers)
    lut = LUT(profile_space(space, rounds=1, extra_rounds=0, block_time=0.0002))
    assert lut.raw_sum(["conv_k3"] * len(space.layers), "params") > 0
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    nets = {}
    for impl in ("loop", "fast"):
        torch.manual_seed(0)
        net = Supernet(space, lut, impl=impl)
        torch.manual_seed(1)  # the same Gumbel noise for both implementations
        logits, cost = net(x, tau=2.0, mode=mode)
        assert logits.shape == (4, 10) and torch.isfinite(logits).all()
        (F.cross_entropy(logits, y) + cost.log()).backward()
        for theta in net.theta_parameters():
            assert theta.grad is not None and torch.isfinite(theta.grad).all()
        nets[impl] = logits.detach()
    # the fused forward runs the new op as it is, so it computes what the loop computes
    torch.testing.assert_close(nets["fast"], nets["loop"], rtol=1e-4, atol=1e-5)
    # a sampled architecture that uses it builds as a fixed network
    net = Network(space.definition(["conv_k3"] * len(space.layers), "conv_only")).eval()
    with torch.inference_mode():
        assert net(torch.randn(1, 3, 16, 16)).shape == (1, 10)
