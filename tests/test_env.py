"""Task environments: every registered id runs; reward, termination and command terms on hand-built states."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch
from conftest import TASK

from flashnerd.envs import mdp
from flashnerd.envs.core import AirTime
from flashnerd.envs.registry import registered_tasks
from flashnerd.utils.math import quat_from_euler_xyz


@pytest.mark.parametrize("task", registered_tasks())
def test_every_task_makes_resets_and_steps(task):
    """Steps under torch.inference_mode, as rsl_rl's rollouts and evaluations run, then a reset and a step outside it
    (a buffer a step replaced inside it would refuse the reset's in-place writes)."""
    env = gym.make(task, num_envs=3)
    obs, extras = env.reset(seed=0)
    assert set(obs) == set(env.unwrapped.single_observation_space.spaces)
    with torch.inference_mode():
        for _ in range(10):
            action = torch.as_tensor(env.action_space.sample())
            obs, rew, terminated, truncated, extras = env.step(action)
            for group, value in obs.items():
                assert value.shape == env.observation_space[group].shape
                assert torch.isfinite(value).all()
            assert rew.shape == (3,) and torch.isfinite(rew).all()
            assert terminated.dtype == torch.bool and truncated.shape == (3,)
    assert "time_outs" in extras and "log" in extras
    env.reset(seed=1)
    obs, rew, *_ = env.step(torch.as_tensor(env.action_space.sample()))
    assert torch.isfinite(rew).all()
    env.close()


@pytest.fixture
def env():
    e = gym.make(TASK, num_envs=4).unwrapped
    yield e
    e.close()


def _set_state(env, roll=0.0, pitch=0.0, yaw=0.0, lin_vel_w=(0, 0, 0), ang_vel_b=(0, 0, 0), height=0.6):
    """Write the same hand-built base state into every world and refresh the env's derived buffers."""
    n = env.num_envs
    qpos = torch.as_tensor(env.dyn.default_qpos(), dtype=torch.float32).repeat(n, 1)
    qpos[:, 2] = height
    qpos[:, 3:7] = quat_from_euler_xyz(torch.tensor(roll), torch.tensor(pitch), torch.tensor(yaw))
    qvel = torch.zeros(n, 18)
    qvel[:, 0:3] = torch.tensor(lin_vel_w, dtype=torch.float32)
    qvel[:, 3:6] = torch.tensor(ang_vel_b, dtype=torch.float32)
    env.dyn.reset(torch.arange(n), qpos, qvel)
    env._update_derived(joint_acc=False)


def test_velocity_tracking_rewards_in_the_base_frame(env):
    # Heading 90 degrees, moving along world +y at 0.5 m/s = base +x at 0.5 m/s.
    _set_state(env, yaw=math.pi / 2, lin_vel_w=(0.0, 0.5, 0.0), ang_vel_b=(0.0, 0.0, 0.2))
    env.command_manager.command[:] = torch.tensor([1.0, 0.0, 0.7])
    assert torch.allclose(env.root_lin_vel_b, torch.tensor([0.5, 0.0, 0.0]).expand(4, 3), atol=1e-6)
    lin = mdp.track_lin_vel_xy_exp(env, std=0.5)
    ang = mdp.track_ang_vel_z_exp(env, std=0.5)
    assert torch.allclose(lin, torch.full((4,), math.exp(-0.25 / 0.25)), atol=1e-6)
    assert torch.allclose(ang, torch.full((4,), math.exp(-0.25 / 0.25)), atol=1e-6)


def test_orientation_and_velocity_penalties(env):
    _set_state(env, roll=0.3, lin_vel_w=(0.0, 0.0, -0.4), ang_vel_b=(0.1, -0.2, 0.5))
    assert torch.allclose(mdp.flat_orientation_l2(env), torch.full((4,), math.sin(0.3) ** 2), atol=1e-6)
    assert torch.allclose(mdp.projected_gravity(env)[:, 2], torch.full((4,), -math.cos(0.3)), atol=1e-6)
    # lin_vel_z is in the base frame (as Isaac Lab): the world-vertical 0.4 m/s tilts with the 0.3 rad roll
    assert torch.allclose(mdp.lin_vel_z_l2(env), torch.full((4,), 0.16 * math.cos(0.3) ** 2), atol=1e-6)
    assert torch.allclose(mdp.ang_vel_xy_l2(env), torch.full((4,), 0.05), atol=1e-6)


def test_reward_is_the_weighted_sum_times_step_dt(env):
    env.step(torch.zeros(4, 12))
    total = env._compute_rewards()
    expected = {n: t.func(env, **t.params) * t.weight * env.step_dt for n, t in env.cfg.rewards.items()}
    for name, value in expected.items():
        assert torch.allclose(env.reward_terms[name], value)
    assert torch.allclose(total, sum(expected.values()))
    assert (total != 0).all()


def test_action_rate_and_torque_terms(env):
    env.prev_actions[:] = 0.0
    env.actions[:] = torch.tensor([1.0, -2.0] + [0.0] * 10)
    assert torch.allclose(mdp.action_rate_l2(env), torch.full((4,), 5.0))
    env.step(torch.zeros(4, 12))
    assert torch.allclose(mdp.joint_torques_l2(env), (env.state.joint_torque**2).sum(1))


def test_base_on_the_ground_terminates_and_time_out_truncates(env):
    _set_state(env, roll=math.pi, height=0.15)  # upside down: the lidar housing on the base hits the floor
    _, _, terminated, truncated, _ = env.step(torch.zeros(4, 12))
    assert terminated.all() and not truncated.any()
    assert (mdp.is_terminated(env) == 1).all() and (mdp.is_alive(env) == 0).all()

    env.reset()
    env.episode_length_buf[:] = env.max_episode_length - 1
    _, _, terminated, truncated, extras = env.step(torch.zeros(4, 12))
    assert truncated.all() and not terminated.any()
    assert (mdp.is_alive(env) == 1).all(), "a time-out is no termination: the world was alive"
    assert torch.equal(extras["time_outs"], truncated)
    assert (env.episode_length_buf == 0).all(), "ended worlds are reset"


def test_air_time_pays_at_touchdown():
    air = AirTime(1, 2, torch.device("cpu"))
    dt = 0.02
    pattern = [[1, 1]] + [[0, 1]] * 30 + [[1, 1]]  # foot 0 lifts for 30 steps (0.6 s) then lands
    for flags in pattern:
        air.update(torch.tensor([flags], dtype=torch.bool), dt)
    assert air.first_contact(dt).tolist() == [[1.0, 0.0]]
    assert air.last_air_time[0, 0].item() == pytest.approx(31 * dt)


def test_feet_air_time_reward_is_zero_for_standing_commands(env):
    env.air_time.last_air_time[:] = 0.8
    env.air_time.current_contact_time[:] = env.step_dt * 0.5  # every foot just touched down
    env.command_manager.command[:] = torch.tensor([0.05, 0.0, 0.0])
    assert (mdp.feet_air_time(env, threshold=0.5) == 0).all()
    env.command_manager.command[:] = torch.tensor([0.5, 0.0, 0.0])
    assert torch.allclose(mdp.feet_air_time(env, threshold=0.5), torch.full((4,), 4 * 0.3))


def test_heading_command_turns_toward_the_target(env):
    cm = env.command_manager
    cm.is_heading_env[:] = True
    cm.is_standing_env[:] = False
    cm.time_left[:] = 5.0
    cm.heading_target[:] = torch.tensor([0.4, -0.4, 3.0, -3.0])
    cm.update(env.step_dt, torch.zeros(4))
    assert torch.allclose(cm.command[:, 2], torch.tensor([0.2, -0.2, 1.0, -1.0]))


def test_bad_actions_are_one_line_errors(env):
    with pytest.raises(ValueError, match=r"actions have shape \(4, 11\), expected \(4, 12\)"):
        env.step(torch.zeros(4, 11))
    bad = torch.zeros(4, 12)
    bad[2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or Inf \(worlds \[2\]"):
        env.step(bad)


def test_unknown_task_and_backend_errors():
    from flashnerd.envs.registry import task_spec

    with pytest.raises(ValueError, match="unknown task 'FlashNeRD-Nope-v0'"):
        task_spec("FlashNeRD-Nope-v0")
    with pytest.raises(ValueError, match="unknown dynamics backend 'warp9'"):
        gym.make(TASK, num_envs=2, dynamics="warp9")


def test_seeded_envs_are_deterministic():
    rollouts = []
    for _ in range(2):
        e = gym.make(TASK, num_envs=3, seed=7).unwrapped
        gen = torch.Generator().manual_seed(1)
        for _ in range(15):
            obs, *_ = e.step(0.5 * torch.randn(3, 12, generator=gen))
        rollouts.append(obs["policy"].clone())
        e.close()
    assert torch.equal(rollouts[0], rollouts[1])


def test_a_term_in_both_groups_is_computed_once_and_each_group_adds_its_own_noise(env):
    """The policy and critic groups share the joint-velocity term's raw value (one call per step); only the policy
    group's copy carries its noise (half-width 1.5), the critic's is the term itself."""
    calls = []

    def counted_joint_vel(e):
        calls.append(1)
        return mdp.joint_vel_rel(e)

    for group in env.cfg.observations.values():
        group.terms["joint_vel"].func = counted_joint_vel
    _set_state(env)
    obs = env.compute_observations()
    assert len(calls) == 1
    cols = _term_columns(env, "joint_vel")
    raw = mdp.joint_vel_rel(env)  # (N, nj)
    assert torch.equal(obs["critic"][:, cols], raw)
    noise = obs["policy"][:, cols] - raw
    assert 0 < noise.abs().max() <= 1.5 + 1e-5


def _term_columns(env, name: str) -> slice:
    """The columns of term `name` in the policy group (the same in the critic's)."""
    start = 0
    for term_name, term in env.cfg.observations["policy"].terms.items():
        width = term.func(env, **term.params).shape[1]
        if term_name == name:
            return slice(start, start + width)
        start += width
    raise KeyError(name)


def test_observation_terms_share_by_function_and_parameter_values_of_their_own_type():
    """Lists (a YAML file's, an override's) and tuples of the same values are one term; 1 and 1.0 are not."""
    from flashnerd.envs import ObsTerm
    from flashnerd.envs.core import _term_key

    scan = lambda size: ObsTerm(mdp.joint_pos_rel, params={"size": size})  # noqa: E731
    assert _term_key(scan([1.6, 1.0])) == _term_key(scan((1.6, 1.0))) is not None
    assert _term_key(scan((1, 1))) != _term_key(scan((1.0, 1.0)))
    assert _term_key(ObsTerm(mdp.joint_pos_rel)) != _term_key(ObsTerm(mdp.joint_vel_rel))
