"""DIAL-MPC: the spline, convergence on a problem with a known optimum, and batched rollouts on a backend."""

from __future__ import annotations

import torch

from flashnerd.dynamics import make_dynamics
from flashnerd.planning import DialMPC, DialMPCConfig, rollout_returns, spline_matrix


def test_spline_interpolates_the_knots_reproduces_lines_and_stays_bounded():
    M = spline_matrix(num_knots=5, horizon=21)  # knots at steps 0, 5, 10, 15, 20
    assert M.shape == (21, 5)
    torch.testing.assert_close(M[[0, 5, 10, 15, 20]], torch.eye(5), atol=1e-5, rtol=0)
    line = torch.linspace(-1.0, 1.0, 5)
    torch.testing.assert_close(M @ line, torch.linspace(-1.0, 1.0, 21), atol=1e-5, rtol=0)
    wiggle = M @ torch.tensor([0.0, 1.0, -1.0, 1.0, 0.0])
    assert torch.all(wiggle[1:5] > 0) and wiggle.abs().max() < 2.0  # smooth, bounded between knots


def test_dial_mpc_finds_a_known_optimum_and_anneals():
    cfg = DialMPCConfig(num_samples=256, horizon=21, num_knots=5, first_iterations=12)
    target = spline_matrix(5, 21) @ torch.tensor([[0.5, -0.2], [-0.4, 0.3], [0.6, 0.0], [0.1, -0.5],
                                                            [-0.3, 0.4]])  # (H, A), reachable by the spline

    def evaluate(actions: torch.Tensor) -> torch.Tensor:  # (S, H, A) -> (S,)
        return -(actions - target).square().mean(dim=(1, 2))

    mpc = DialMPC(cfg, action_dim=2, evaluate=evaluate, seed=1)
    start_error = -evaluate(mpc.actions(mpc.mean)[None]).item()
    plan = mpc.optimize()
    error = (plan - target).square().mean().item()
    assert error < 0.05 * start_error, (error, start_error)  # measured: 0.022x
    assert mpc.knot_sigma[0] < mpc.knot_sigma[-1]  # less noise near the present
    first = mpc.step()  # a second call: warm start from the shifted plan, 2 iterations
    assert first.shape == (2,) and mpc.steps == 1


def test_rollout_returns_branch_every_sample_from_one_state(anymal):
    S, H = 6, 4
    dyn = make_dynamics("mujoco", anymal, S)
    qpos = torch.as_tensor(dyn.default_qpos(), dtype=torch.float32)
    qvel = torch.zeros(dyn.nv)
    default = torch.tensor(anymal.default_joint_pos)
    actions = torch.zeros(S, H, anymal.num_joints)
    actions[1] = actions[0]  # two identical sequences
    actions[2:] = torch.rand(S - 2, H, anymal.num_joints, generator=torch.Generator().manual_seed(0)) - 0.5
    height = lambda s: s.qpos[:, 2]  # noqa: E731
    to_ctrl = lambda a: default + 0.5 * a  # noqa: E731
    returns = rollout_returns(dyn, qpos, qvel, actions, height, to_ctrl)
    assert returns.shape == (S,) and returns[0] == returns[1]
    again = rollout_returns(dyn, qpos, qvel, actions, height, to_ctrl)  # starts over from the same state
    torch.testing.assert_close(again, returns, atol=1e-6, rtol=0)
    assert not torch.allclose(returns[2:], returns[:1].expand(S - 2), atol=1e-5)
    dyn.close()
