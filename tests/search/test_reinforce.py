"""REINFORCE theta steps (fbnas/search/reinforce.py): the estimate's sign and its baselines."""

import pytest
import torch

from fbnas.search.reinforce import leave_one_out, log_probability, surrogate


def _grad(reward: torch.Tensor, paths: torch.Tensor, baseline) -> torch.Tensor:
    theta = [torch.zeros(3, requires_grad=True) for _ in range(2)]
    surrogate(log_probability(theta, paths), reward, baseline).backward()
    return torch.cat([t.grad for t in theta])


def test_leave_one_out_is_the_mean_of_the_other_paths():
    assert leave_one_out(torch.tensor([1.0, 2.0, 6.0])).tolist() == [4.0, 3.5, 1.5]
    with pytest.raises(ValueError, match="at least 2 paths"):
        leave_one_out(torch.tensor([1.0]))


def test_leave_one_out_ignores_how_hard_the_batch_is():
    """A constant added to every path's reward (an easy batch lowers every network's loss
    alike) leaves the step unchanged; the better network's probability goes up."""
    paths = torch.tensor([[0, 1], [2, 1]])
    reward = torch.tensor([-1.0, -2.0])
    g = _grad(reward, paths, leave_one_out(reward))
    assert torch.allclose(g, _grad(reward + 5.0, paths, leave_one_out(reward + 5.0)))
    # gradient descent raises theta where the gradient is negative: network 0's first op
    assert g[0] < 0 < g[2]
    # the layer both networks share gets no push either way
    assert torch.allclose(g[3:], torch.zeros(3))
    # a moving average from an earlier, harder batch pushes both networks up instead
    g_avg = _grad(reward + 5.0, paths, 0.0)
    assert g_avg[0] < 0 and g_avg[2] < 0


def test_equal_rewards_leave_theta_where_it_is():
    paths = torch.tensor([[0, 1], [0, 1]])
    reward = torch.tensor([-1.5, -1.5])
    assert torch.equal(_grad(reward, paths, leave_one_out(reward)), torch.zeros(6))
