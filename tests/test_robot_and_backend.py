"""The authored ANYmal-C model and the `mujoco` backend: figures, physics sanity, state writes, determinism."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from conftest import default_ctrl

from flashnerd.dynamics import Dynamics, make_dynamics
from flashnerd.robots import get_robot
from flashnerd.sim.scene import build_scene


def test_model_figures_match_the_public_description(anymal):
    m = build_scene(anymal)
    assert m.nq == 19 and m.nv == 18 and m.nu == 12
    # Total mass of the public ANYmal-C description (base 19.2035 + 4 x (2.781 + 3.071 + 0.58842)).
    assert m.body_subtreemass[m.body("base").id] == pytest.approx(44.96518, abs=1e-4)
    assert tuple(m.actuator(i).name for i in range(m.nu)) == anymal.joint_names
    assert np.allclose(m.actuator_forcerange, [[-anymal.effort_limit, anymal.effort_limit]] * 12)
    assert m.actuator_gainprm[0, 0] == anymal.stiffness
    for leg in ("LF", "RF", "LH", "RH"):
        assert m.geom(f"{leg}_foot").size[0] == pytest.approx(0.03)
        assert np.allclose(m.jnt_axis[m.joint(f"{leg}_HAA").id], [1, 0, 0])
        assert np.allclose(m.jnt_axis[m.joint(f"{leg}_KFE").id], [0, 1, 0])
    assert len(anymal.model_hash()) == 16


def test_backend_satisfies_the_dynamics_protocol(mujoco_dyn):
    assert isinstance(mujoco_dyn, Dynamics)
    assert mujoco_dyn.control_dt == pytest.approx(0.02)


def test_stands_under_default_pd_targets_for_two_seconds(anymal, mujoco_dyn):
    ctrl = default_ctrl(anymal, 4)
    heights = []
    for _ in range(100):  # 100 x 0.02 s = 2 s
        mujoco_dyn.step(ctrl)
        heights.append(mujoco_dyn.state().root_pos_w[:, 2].clone())
    heights = torch.stack(heights)  # (T, N)
    assert heights[25:].min() > 0.40 and heights.max() < 0.65
    s = mujoco_dyn.state()
    feet = s.contact_force[:, -4:]
    assert (feet > 50.0).all(), "all four feet should carry load"
    assert (s.contact_force[:, 0] == 0).all(), "the base must not touch the ground"


def test_collapses_without_actuation(anymal):
    dyn = make_dynamics("mujoco", anymal, num_worlds=2)
    dyn.scene.actuator_gainprm[:, 0] = 0.0
    dyn.scene.actuator_biasprm[:, :3] = 0.0
    for _ in range(100):
        dyn.step(default_ctrl(anymal, 2))
    assert dyn.state().root_pos_w[:, 2].max() < 0.3
    assert dyn.state().joint_torque.abs().max() == 0.0
    dyn.close()


def test_reset_writes_only_the_chosen_worlds(anymal, mujoco_dyn):
    ctrl = default_ctrl(anymal, 4)
    for _ in range(5):
        mujoco_dyn.step(ctrl)
    before = mujoco_dyn.state().qpos.clone()
    qpos = before[1:2].clone()
    qpos[:, 0:3] = torch.tensor([1.0, 2.0, 0.7])
    qvel = torch.zeros(1, 18)
    qvel[:, 0] = 0.3
    mujoco_dyn.reset(torch.tensor([1]), qpos, qvel)
    after = mujoco_dyn.state()
    assert torch.allclose(after.qpos[1, 0:3], torch.tensor([1.0, 2.0, 0.7]))
    assert after.qvel[1, 0] == pytest.approx(0.3)
    assert torch.equal(after.qpos[[0, 2, 3]], before[[0, 2, 3]])


def test_one_and_two_threads_give_identical_trajectories(anymal):
    gen = torch.Generator().manual_seed(0)
    ctrls = [default_ctrl(anymal, 6) + 0.3 * torch.randn(6, 12, generator=gen) for _ in range(20)]
    finals = []
    for nthread in (1, 2):
        dyn = make_dynamics("mujoco", anymal, num_worlds=6, nthread=nthread)
        for c in ctrls:
            dyn.step(c)
        finals.append(dyn.state().qpos.clone())
        dyn.close()
    assert torch.equal(finals[0], finals[1])


def test_backend_matches_plain_mj_step(anymal):
    """The threaded rollout path equals MuJoCo's own mj_step loop with the same controls."""
    dyn = make_dynamics("mujoco", anymal, num_worlds=1)
    m = build_scene(anymal)
    d = mujoco.MjData(m)
    d.qpos[:] = dyn.default_qpos()
    ctrl = default_ctrl(anymal, 1) + 0.2
    for _ in range(10):
        dyn.step(ctrl)
        d.ctrl[:] = ctrl[0].numpy()
        for _ in range(anymal.decimation):
            mujoco.mj_step(m, d)
    assert np.allclose(dyn.state().qpos[0].numpy(), d.qpos, atol=1e-5)
    dyn.close()


def test_unknown_backend_and_robot_are_one_line_errors(anymal):
    with pytest.raises(ValueError, match="unknown dynamics backend 'nope'.*mujoco"):
        make_dynamics("nope", anymal, 2)
    with pytest.raises(ValueError, match="unknown robot 'spot'"):
        get_robot("spot")
    with pytest.raises(ValueError, match="num_worlds must be at least 1"):
        make_dynamics("mujoco", anymal, 0)


@pytest.mark.parametrize("backend", ["mujoco", "flashnerd"])
def test_targets_beyond_the_ctrlrange_act_as_the_range_limit_on_every_backend(backend):
    """MuJoCo clamps each target to its actuator's ctrlrange; the learned model must see the same target, or a policy
    on the model gets responses (and torques) the robot cannot give (cart-pole: a cart target range of +-1.5 m)."""
    from flashnerd.sim.scene import actuator_ctrl_limits

    robot = get_robot("cartpole")
    states = []
    for beyond in (False, True):
        dyn = make_dynamics(backend, robot, num_worlds=2)
        high = float(actuator_ctrl_limits(dyn.scene)[0, 1])
        ctrl = torch.full((2, 1), high + (5.0 if beyond else 0.0))
        for _ in range(5):
            dyn.step(ctrl)
        states.append((dyn.state().qpos.clone(), dyn.state().joint_torque.clone()))
        dyn.close()
    assert high == pytest.approx(1.5)
    assert torch.equal(states[0][0], states[1][0]) and torch.equal(states[0][1], states[1][1])
