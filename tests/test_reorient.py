"""In-hand cube reorientation: goals, success counting, rewards on hand-built states, and every object backend."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch

import flashnerd_tasks  # noqa: F401  (registers the ids)
from flashnerd.envs import mdp
from flashnerd.utils.math import (
    quat_apply,
    quat_conjugate,
    quat_from_euler_xyz,
    quat_mul,
    quat_rotation_angle,
)

TASK = "FlashNeRD-Reorient-Cube-Allegro-v0"


@pytest.mark.parametrize("dynamics", ["mujoco", "coupled", "oneway"])
def test_task_runs_on_every_object_backend(dynamics):
    kwargs = {"free_motion": "oracle"} if dynamics in ("coupled", "oneway") else {}
    env = gym.make(TASK, num_envs=3, dynamics=dynamics, **kwargs).unwrapped
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        obs, reward, terminated, truncated, _ = env.step(torch.zeros(3, 16))
    assert obs["policy"].shape == (3, 69) and torch.isfinite(obs["policy"]).all() and torch.isfinite(reward).all()
    assert not terminated.any()  # holding the hand still keeps the cube on the palm
    assert (env.object_pos[:, 2] > 0.5).all()
    env.close()


def test_robot_only_backends_refuse_the_task():
    with pytest.raises(ValueError, match="simulates the robot alone"):
        gym.make(TASK, num_envs=2, dynamics="flashnerd")


def _env():
    return gym.make(TASK, num_envs=4, dynamics="mujoco").unwrapped


def test_goal_reached_counts_a_success_and_draws_a_new_goal():
    env = _env()
    env.reset(seed=1)
    goal = quat_from_euler_xyz(torch.tensor([0.3]), torch.tensor([0.2]), torch.tensor([-1.0])).repeat(4, 1)
    env.goal.quat[:] = goal
    # world 0's cube at the goal, world 1's 0.05 rad away (inside the 0.1 tolerance), worlds 2-3 far from it
    near = quat_from_euler_xyz(torch.tensor([0.35]), torch.tensor([0.2]), torch.tensor([-1.0]))
    far = quat_from_euler_xyz(torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([0.0]))
    pose = torch.zeros(4, 7)
    pose[:, 0:3] = env.goal.position
    pose[:, 3:7] = torch.cat((goal[:1], near, far, far))
    env.dyn.reset_objects(torch.arange(4), pose, torch.zeros(4, 6))
    assert torch.allclose(mdp.success_bonus(env), torch.tensor([1.0, 1.0, 0.0, 0.0]))
    env.goal.update(env.object_quat)
    assert env.goal.successes.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert torch.equal(env.goal.quat[2:], goal[2:]) and not torch.equal(env.goal.quat[:2], goal[:2])
    env.close()


def test_yaw_goals_turn_the_cube_about_the_vertical_from_where_it_is():
    """The CPU-budget variant: the cube rests on a face at a random heading, and each goal (at reset and after a
    success) is the cube's orientation at that moment turned about world z by 0.4-0.8 rad, either way."""
    env = gym.make("FlashNeRD-Reorient-Cube-Yaw-Allegro-v0", num_envs=64, dynamics="mujoco").unwrapped
    env.reset(seed=3)
    up = torch.tensor([0.0, 0.0, 1.0]).expand(64, 3)
    assert torch.allclose(quat_apply(env.object_quat, up), up, atol=1e-5)  # resting on a face: yaw only
    for _ in range(2):
        start = env.object_quat.clone()
        turn = quat_mul(env.goal.quat, quat_conjugate(start))  # (64, 4) world-frame rotation from cube to goal
        angle = quat_rotation_angle(env.goal.quat, start)
        assert ((angle > 0.4 - 1e-4) & (angle < 0.8 + 1e-4)).all()
        assert torch.allclose(quat_apply(turn, up), up, atol=1e-5)  # about the vertical axis
        signs = torch.sign(turn[:, 0] * turn[:, 3])
        assert (signs > 0).any() and (signs < 0).any()  # both directions are asked for
        env.goal.quat[:] = env.object_quat  # every world at its goal: a success and a new relative goal
        env.goal.update(env.object_quat)
        assert (env.goal.successes == env.goal.successes[0]).all()
    env.close()


def test_orientation_reward_and_rotation_angle_on_hand_built_states():
    env = _env()
    env.reset(seed=2)
    env.goal.quat[:] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    angles = torch.tensor([0.0, 0.5, math.pi / 2, math.pi])
    quat = quat_from_euler_xyz(torch.zeros(4), torch.zeros(4), angles)  # yaw about z
    pose = torch.zeros(4, 7)
    pose[:, 0:3] = env.goal.position
    pose[:, 3:7] = quat
    env.dyn.reset_objects(torch.arange(4), pose, torch.zeros(4, 6))
    assert torch.allclose(quat_rotation_angle(env.object_quat, env.goal.quat), angles, atol=1e-5)
    assert torch.allclose(mdp.track_orientation_inv_l2(env, rot_eps=0.1), 1.0 / (angles + 0.1), atol=1e-4)
    assert torch.allclose(mdp.object_goal_distance(env), torch.zeros(4), atol=1e-6)
    env.close()


def test_dropped_cube_ends_the_episode():
    env = _env()
    env.reset(seed=3)
    pose = torch.zeros(2, 7)
    pose[:, 0:3] = torch.tensor([0.4, 0.0, 0.2])  # beside the hand, 0.5 m from the goal position
    pose[:, 3] = 1.0
    env.dyn.reset_objects(torch.tensor([0, 1]), pose, torch.zeros(2, 6))
    _, _, terminated, _, extras = env.step(torch.zeros(4, 16))
    assert terminated.tolist() == [True, True, False, False]
    assert "Metrics/goals_reached" in extras["log"]
    env.close()


def test_ema_actions_move_targets_towards_the_joint_range():
    env = _env()
    env.reset(seed=4)
    start = env.joint_targets.clone()
    env.step(torch.ones(4, 16))  # +1 = the top of every joint's range
    expected = torch.lerp(start, env._target_high.expand(4, -1), 0.95)
    assert torch.allclose(env.joint_targets, expected, atol=1e-6)
    env.close()


def test_ppo_comparison_reports_targets_per_training_backend(tmp_path):
    """`bench ppo` on the goal task: targets per episode at the top level of every backend, the targets-over-time
    curve of its MuJoCo evaluation (non-decreasing, ends at the mean count), and the results block renders."""
    import json

    from flashnerd.cli.main import main
    from flashnerd.viz.report import render_block

    out = tmp_path / "ppo"
    assert main(["bench", "ppo", "--task", TASK, "--dynamics", "mujoco,oneway", "--num_envs", "4",
                 "--max_iterations", "1", "--eval_episodes", "3", "--out_dir", str(out),
                 "--name", "cube_reorient_t"]) == 0
    data = json.loads((out / "cube_reorient_t.json").read_text())
    for backend in ("mujoco", "oneway"):
        r = data["backends"][backend]
        curve = r["eval_mujoco"]["targets_over_time"]
        assert r["targets_per_episode"] >= 0 and curve and abs(curve[-1] - r["targets_per_episode"]) < 1e-6
        assert all(b >= a for a, b in zip(curve, curve[1:]))
    assert (out / "cube_reorient_t_targets.png").read_bytes()[:4] == b"\x89PNG"
    text = render_block("cube_reorient_t", out)
    assert "| `oneway` |" in text and "targets per episode" in text


@pytest.mark.parametrize("dynamics", ["mujoco", "mjwarp", "coupled", "oneway"])
def test_the_heavy_task_builds_its_cube_on_every_backend(dynamics):
    from flashnerd_tasks.reorient.allegro import HEAVY_CUBE_MASS

    kwargs = {"free_motion": "oracle"} if dynamics in ("coupled", "oneway") else {}
    env = gym.make("FlashNeRD-Reorient-Cube-Heavy-Allegro-v0", num_envs=2, dynamics=dynamics, **kwargs).unwrapped
    # what is simulated: the batch's own copy of the model on the coupled backends
    cube = (env.dyn.sims.get_model(0) if dynamics in ("coupled", "oneway") else env.dyn.scene).body("cube")
    assert cube.mass[0] == pytest.approx(HEAVY_CUBE_MASS)
    env.close()


def test_object_mass_is_checked():
    from flashnerd_tasks.reorient.allegro import AllegroCubeYawEnvCfg

    cfg = AllegroCubeYawEnvCfg()
    cfg.object_mass, cfg.num_envs = -1.0, 2
    with pytest.raises(ValueError, match="object_mass must be a positive number"):
        gym.make("FlashNeRD-Reorient-Cube-Yaw-Allegro-v0", cfg=cfg)
    from flashnerd.envs.registry import task_cfgs

    flat, _ = task_cfgs("FlashNeRD-Velocity-Flat-Anymal-C-v0", num_envs=2)
    flat.object_mass = 0.5
    with pytest.raises(ValueError, match="this task has none"):
        gym.make("FlashNeRD-Velocity-Flat-Anymal-C-v0", cfg=flat)


def test_reaction_meter_replays_the_worlds_and_measures_the_cube_contacts(capsys):
    """The meter's replica follows each MuJoCo world (to the solver's tolerance); J^T f over the cube's contact rows
    equals the robot's whole constraint force when the cube's contacts are the robot's only constraints; a heavier
    cube pushes back harder under the same actions."""
    import json

    import mujoco
    import numpy as np

    from flashnerd.cli.main import main
    from flashnerd.sim.reaction import object_reaction

    env = gym.make("FlashNeRD-Reorient-Cube-Yaw-Allegro-v0", num_envs=1, dynamics="mujoco").unwrapped
    m = env.dyn.scene
    d = mujoco.MjData(m)
    d.qpos[:16] = env.dyn.default_qpos()[:16]
    d.qpos[16:19] = (0.0, 0.0, 0.545)
    mujoco.mj_forward(m, d)
    contact_rows = {int(mujoco.mjtConstraint.mjCNSTR_CONTACT_PYRAMIDAL),
                    int(mujoco.mjtConstraint.mjCNSTR_CONTACT_ELLIPTIC)}
    cube, checked = m.body("cube").id, 0
    default = np.asarray(env.robot.default_joint_pos)
    curl = np.array([0.0, 0.5, 0.6, 0.6] * 3 + [1.2, 0.9, 0.6, 0.6])  # fingers and thumb close over the cube
    for k in range(800):
        d.ctrl[:] = default + (0.5 - 0.5 * math.cos(2 * math.pi * k / 320)) * (curl - default)
        mujoco.mj_step(m, d)
        only_cube = all(cube in (m.geom_bodyid[c.geom1], m.geom_bodyid[c.geom2]) for c in d.contact[:d.ncon])
        if d.nefc and only_cube and all(int(t) in contact_rows for t in d.efc_type[:d.nefc]):
            reaction, _ = object_reaction(m, d, cube, 16)  # then every constraint force on the hand is the cube's
            np.testing.assert_allclose(reaction, d.qfrc_constraint[:16], rtol=1e-9, atol=1e-12)
            checked += np.abs(reaction).max() > 1e-3  # a finger pushes on the cube
    assert checked > 50, checked
    env.close()
    ratios = {}
    for task in ("FlashNeRD-Reorient-Cube-Yaw-Allegro-v0", "FlashNeRD-Reorient-Cube-Heavy-Allegro-v0"):
        assert main(["bench", "reaction", "--task", task, "--num_envs", "2", "--measured_worlds", "2",
                     "--steps", "30"]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert out["substeps"] == 2 * 30 * 8 and out["replica_error"] == 0.0  # the replica is its world
        ratios[task] = out["reaction_rms"]
    assert ratios["FlashNeRD-Reorient-Cube-Heavy-Allegro-v0"] > 1.1 * ratios["FlashNeRD-Reorient-Cube-Yaw-Allegro-v0"]
