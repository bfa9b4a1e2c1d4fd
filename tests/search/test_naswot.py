"""The training-free NASWOT score (fbnas/search/naswot.py)."""

import torch
from torch import nn

from fbnas.arch.space import load_space
from fbnas.search.naswot import naswot, score_architectures


def codes_kernel_by_hand(net: nn.Module, x: torch.Tensor) -> float:
    """log|K| the paper's way: every ReLU's binary codes concatenated, K = C C^T +
    (1 - C)(1 - C)^T, all at once."""
    codes = []
    hooks = [m.register_forward_hook(lambda m, i, o: codes.append((o.flatten(1) > 0).double()))
             for m in net.modules() if isinstance(m, nn.ReLU)]
    net.train()
    with torch.no_grad():
        net(x)
    for h in hooks:
        h.remove()
    c = torch.cat(codes, dim=1)
    return float(torch.linalg.slogdet(c @ c.t() + (1 - c) @ (1 - c).t())[1])


def small_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def test_the_layer_by_layer_kernel_is_the_papers_kernel():
    torch.manual_seed(0)
    net, x = small_net(), torch.randn(16, 3, 8, 8)
    assert abs(naswot(net, x) - codes_kernel_by_hand(net, x)) < 1e-6


def test_scoring_leaves_the_network_as_it_was():
    torch.manual_seed(0)
    net, x = small_net().eval(), torch.randn(16, 3, 8, 8)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    naswot(net, x)
    assert not net.training
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert all(not m._forward_hooks for m in net.modules())


def test_a_network_that_cannot_tell_images_apart_scores_lower():
    """Units that fire the same way for every image (here: a huge bias) make K near-singular."""
    torch.manual_seed(0)
    x = torch.randn(16, 3, 8, 8)
    blind = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
    with torch.no_grad():
        blind[0].bias.fill_(100.0)
    seeing = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
    assert naswot(seeing, x) > naswot(blind, x)


def test_scores_are_a_function_of_the_architecture_and_leave_the_random_state_alone():
    space = load_space("tiny")
    ops = [[layer.candidates[0] for layer in space.layers],
           [layer.candidates[-1] for layer in space.layers]]
    x = torch.randn(8, 3, space.resolution, space.resolution)
    state = torch.get_rng_state()
    first = score_architectures(space, ops, x)
    assert torch.equal(state, torch.get_rng_state())
    assert score_architectures(space, ops, x) == first
    assert first[0] != first[1]



def test_channels_last_codes_give_the_same_kernel():
    """The same ReLU outputs held channels_last score exactly as held NCHW: the codes are
    read in another unit order, never mixed across images."""
    torch.manual_seed(0)
    x = torch.randn(16, 6, 5, 7)
    relu = nn.Sequential(nn.ReLU())
    assert naswot(relu, x.contiguous(memory_format=torch.channels_last)) == naswot(relu, x)


def test_a_network_scores_alike_in_either_memory_format():
    """score_architectures runs its networks channels_last; BN's rounding may tip a unit at
    zero, nothing more."""
    torch.manual_seed(0)
    net, x = small_net(), torch.randn(16, 3, 8, 8)
    nchw = naswot(net, x)
    net.to(memory_format=torch.channels_last)
    assert abs(naswot(net, x.contiguous(memory_format=torch.channels_last)) - nchw) < 1e-4
