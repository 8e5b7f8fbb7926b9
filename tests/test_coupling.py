"""Two-way coupling of a robot's free-motion model with MuJoCo's solver (Allegro hand and a cube)."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

from flashnerd.dynamics import make_dynamics
from flashnerd.dynamics.coupled import CoupledDynamics, OracleFreeMotion
from flashnerd.robots import get_robot

HAND = get_robot("allegro")
CURL = torch.tensor([0.0, 0.5, 0.6, 0.6] * 3 + [1.2, 0.9, 0.6, 0.6])  # fingers and thumb close over the cube


def _targets(steps: int, num_worlds: int) -> torch.Tensor:
    """Control-step targets (T, N, 16) that open and close the hand around the cube, differently per world."""
    t = torch.arange(steps, dtype=torch.float32)[:, None, None]  # (T, 1, 1)
    phase = torch.arange(num_worlds, dtype=torch.float32)[None, :, None]  # (1, N, 1)
    default = torch.tensor(HAND.default_joint_pos)
    blend = 0.5 - 0.5 * torch.cos(2 * math.pi * t / 40 + phase)  # (T, N, 1) in [0, 1]
    return default + blend * (CURL - default)  # (T, N, 16)


def _plain_mujoco(model: mujoco.MjModel, qpos0: np.ndarray, targets: torch.Tensor) -> np.ndarray:
    """The plain analytical simulation: the same scene with the robot's actuators on; qpos after each control step."""
    out = []
    for w in range(targets.shape[1]):
        d = mujoco.MjData(model)
        d.qpos[:] = qpos0
        mujoco.mj_forward(model, d)
        trace = []
        for ctrl in targets[:, w]:
            d.ctrl[:] = ctrl.numpy()
            for _ in range(HAND.decimation):
                mujoco.mj_step(model, d)
            trace.append(d.qpos.copy())
        out.append(trace)
    return np.asarray(out).transpose(1, 0, 2)  # (T, N, nq)


def test_oracle_coupling_reproduces_the_analytical_simulator():
    """With the robot's exact free acceleration as the 'model', two-way coupling is MuJoCo itself (Euler).

    Both runs let the constraint solver run all its iterations (tolerance 0): with MuJoCo's default early exit at
    1e-8, rounding-level differences change where the solver stops, and the runs part by ~6e-6 over 1000 steps.
    """
    num_worlds, control_steps = 2, 125  # 125 x 8 = 1000 physics steps
    coupled = make_dynamics("coupled", HAND, num_worlds, free_motion=OracleFreeMotion(HAND, num_worlds), nthread=2,
                            full_solve=True)
    assert coupled.scene.opt.integrator == mujoco.mjtIntegrator.mjINT_EULER
    plain_model = CoupledDynamics._build_model(HAND, "euler")  # same scene, actuators enabled
    plain_model.opt.tolerance = 0.0
    targets = _targets(control_steps, num_worlds)
    truth = _plain_mujoco(plain_model, coupled.qpos0, targets)  # (T, N, nq)
    got = []
    for ctrl in targets:
        coupled.step(ctrl)
        got.append(coupled.scene_qpos().copy())
    coupled.close()
    got = np.asarray(got)
    cube_moved = np.linalg.norm(truth[:, :, 16:19] - truth[0, :, 16:19], axis=-1).max()
    assert cube_moved > 0.005, f"the hand must push the cube (moved {cube_moved:.4f} m)"
    assert np.abs(got - truth).max() < 1e-9


def test_writes_between_steps_keep_the_oracle_coupling_on_mujoco():
    """Resets, velocity writes and cube placements between steps (the batch must recompute the stages of the worlds
    written, and only theirs) leave oracle coupling equal to plain MuJoCo making the same writes."""
    num_worlds, steps = 3, 40
    coupled = make_dynamics("coupled", HAND, num_worlds, free_motion=OracleFreeMotion(HAND, num_worlds), nthread=2,
                            full_solve=True)
    model = CoupledDynamics._build_model(HAND, "euler")
    model.opt.tolerance = 0.0
    datas = [mujoco.MjData(model) for _ in range(num_worlds)]
    for d in datas:
        d.qpos[:] = coupled.qpos0
        mujoco.mj_forward(model, d)
    targets = _targets(steps, num_worlds)
    pose = torch.tensor([[0.01, -0.01, 0.56, 1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    spin = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 2.0]], dtype=torch.float64)
    for t in range(steps):
        if t == 10:  # world 2 back to rest (robot at the default pose, cube at its spawn)
            coupled.reset(torch.tensor([2]), torch.tensor([HAND.default_joint_pos]), torch.zeros(1, 16))
            mujoco.mj_resetData(model, datas[2])
            datas[2].qpos[:] = coupled.qpos0
            mujoco.mj_forward(model, datas[2])
        if t == 20:  # world 0's fingers pushed
            coupled.set_qvel(torch.tensor([0]), torch.full((1, 16), 0.5))
            datas[0].qvel[:16] = 0.5
        if t == 30:  # world 1's cube placed and spun
            coupled.reset_objects(torch.tensor([1]), pose, spin)
            datas[1].qpos[16:23], datas[1].qvel[16:22] = pose[0].numpy(), spin[0].numpy()
            mujoco.mj_forward(model, datas[1])
        coupled.step(targets[t])
        for w, d in enumerate(datas):
            d.ctrl[:] = targets[t, w].numpy()
            for _ in range(HAND.decimation):
                mujoco.mj_step(model, d)
    truth = np.stack([d.qpos for d in datas])
    assert np.abs(coupled.scene_qpos() - truth).max() < 1e-9
    coupled.close()
    with pytest.raises(RuntimeError, match="closed"):
        coupled.step(targets[0])


def test_mass_matrix_product_equals_mujocos():
    """The batched M a from the sparse mass matrix equals mj_mulM on each world's own MjData."""
    dyn = make_dynamics("coupled", HAND, 3, free_motion=OracleFreeMotion(HAND, 3), nthread=1)
    for t in range(5):  # three differently posed hands
        dyn.step(_targets(5, 3)[t])
    acc = np.random.default_rng(0).normal(size=(3, 16))
    got = dyn._robot_mass_times(acc).copy()
    for w in range(3):
        d = dyn.sims.get_data(w)
        full = np.zeros(dyn.scene.nv)
        mujoco.mj_mulM(dyn.scene, d, full, np.concatenate((acc[w], np.zeros(dyn.scene.nv - 16))))
        np.testing.assert_allclose(got[w], full[:16], rtol=1e-12, atol=1e-15)
    assert np.abs(got).max() > 1e-3  # the product is not trivially zero
    dyn.close()


def _press(mode: str) -> float:
    """Curl the middle finger into a heavy cube lying over it; returns the finger's final flexion (joints 1-3)."""
    dyn = make_dynamics(mode, HAND, 1, free_motion=OracleFreeMotion(HAND, 1), nthread=1, cube_mass=20.0)
    target = torch.tensor(HAND.default_joint_pos)[None].clone()
    target[0, 5:8] = torch.tensor([1.6, 1.7, 1.6])  # the middle finger curls up into the cube's underside
    for _ in range(50):
        dyn.step(target)
    flexion = dyn.state().qpos[0, 5:8].sum().item()
    dyn.close()
    return flexion


def test_two_way_coupling_stops_the_finger_one_way_does_not():
    coupled, oneway = _press("coupled"), _press("oneway")
    # two-way: the 20 kg cube blocks the finger (measured 1.9 rad less flexion); one-way: it passes through
    assert oneway - coupled > 1.0, f"one-way flexion {oneway:.3f} vs two-way {coupled:.3f}"


def test_worlds_are_independent():
    steps = 20
    targets = _targets(steps, 3)
    runs = []
    for reset_world_0 in (False, True):
        dyn = make_dynamics("coupled", HAND, 3, free_motion=OracleFreeMotion(HAND, 3), nthread=2)
        for t in range(steps):
            if reset_world_0 and t == 10:
                dyn.reset(torch.tensor([0]), torch.zeros(1, 16), torch.zeros(1, 16))
            dyn.step(targets[t])
        runs.append((dyn.state().qpos.clone(), dyn.object_state().clone()))
        dyn.close()
    (q_a, o_a), (q_b, o_b) = runs
    assert torch.equal(q_a[1:], q_b[1:]) and torch.equal(o_a[1:], o_b[1:])  # worlds 1, 2 untouched
    assert not torch.equal(q_a[0], q_b[0])


def test_coupled_refuses_nan_targets_and_floating_robots():
    dyn = make_dynamics("coupled", HAND, 1, free_motion=OracleFreeMotion(HAND, 1), nthread=1)
    with pytest.raises(ValueError, match="NaN"):
        dyn.step(torch.full((1, 16), float("nan")))
    dyn.close()
    with pytest.raises(ValueError, match="fixed-base"):
        make_dynamics("coupled", get_robot("anymal_c"), 1, free_motion=OracleFreeMotion(HAND, 1))


def test_bench_coupled_prints_all_three_backends(capsys):
    import json

    from flashnerd.cli.main import main

    assert main(["bench", "coupled", "--free_motion", "oracle", "--num_worlds", "2", "--steps", "2",
                 "--nthread", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("coupled_env_steps_per_s", "oneway_env_steps_per_s", "mujoco_env_steps_per_s"):
        assert out[key] > 0
