import pytest
import torch

from fbnas.arch.ops import build_op, parse_op
from fbnas.errors import FbnasError

PAPER_OPS = ["k3_e1", "k3_e1_g2", "k3_e3", "k3_e6", "k5_e1", "k5_e1_g2", "k5_e3", "k5_e6", "skip"]


def test_grammar_parses_paper_ops_and_extensions():
    assert parse_op("k5_e6").kernel == 5 and parse_op("k5_e6").expansion == 6
    assert parse_op("k3_e1_g2").groups == 2
    assert parse_op("k7_e4").groups == 1
    assert parse_op("skip").is_skip


@pytest.mark.parametrize("bad", ["k4_e6", "k3", "e6_k3", "k3_e0", "conv3x3", "k3_e6_g0", "", "K3_E6"])
def test_grammar_rejects_unknown_names(bad):
    with pytest.raises(FbnasError, match="op"):
        parse_op(bad)


def test_grouped_op_needs_divisible_channels():
    with pytest.raises(FbnasError, match="divisible"):
        build_op("k3_e1_g2", 15, 16, 1)


@pytest.mark.parametrize("name", PAPER_OPS + ["k7_e6", "k3_e4_g2"])
@pytest.mark.parametrize("c_in,c_out,stride", [(16, 16, 1), (16, 24, 1), (16, 24, 2), (24, 24, 2)])
def test_every_op_shape_finite_and_all_params_get_gradients(name, c_in, c_out, stride):
    op = build_op(name, c_in, c_out, stride).train()
    x = torch.randn(2, c_in, 8, 8, requires_grad=True)
    y = op(x)
    assert y.shape == (2, c_out, 8 // stride, 8 // stride)
    assert torch.isfinite(y).all()
    y.square().mean().backward()
    for pname, p in op.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
    assert x.grad is not None


def test_residual_only_when_shapes_match():
    assert build_op("k3_e6", 16, 16, 1).residual
    assert not build_op("k3_e6", 16, 24, 1).residual
    assert not build_op("k3_e6", 16, 16, 2).residual
    assert build_op("skip", 16, 16, 1).proj is None
    assert build_op("skip", 16, 24, 1).proj is not None


def test_grouped_block_shuffles_channels():
    from fbnas.arch.ops import ChannelShuffle

    x = torch.arange(4.0).view(1, 4, 1, 1)
    assert ChannelShuffle(2)(x).flatten().tolist() == [0.0, 2.0, 1.0, 3.0]


def test_channel_shuffle_keeps_channels_last_and_the_same_values():
    """A channels_last input is shuffled in place of layout: the same tensor values as the
    NCHW shuffle, still channels_last (no conversion before the next conv)."""
    from fbnas.arch.ops import ChannelShuffle

    x = torch.randn(2, 12, 5, 3)
    for groups in (2, 3, 4):
        plain = ChannelShuffle(groups)(x)
        nhwc = ChannelShuffle(groups)(x.contiguous(memory_format=torch.channels_last))
        assert torch.equal(plain, nhwc)
        assert nhwc.is_contiguous(memory_format=torch.channels_last) and plain.is_contiguous()
