"""In-hand cube reorientation: goals, success counting, rewards on hand-built states, and every object backend."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch

import flashnerd_tasks  # noqa: F401  (registers the ids)
from flashnerd.envs import mdp
from flashnerd.utils.math import quat_from_euler_xyz, quat_rotation_angle

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
