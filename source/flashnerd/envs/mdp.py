"""Observation, reward, termination and event terms. Each reads the env's batched buffers; none loops over worlds."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from flashnerd.utils.math import quat_from_euler_xyz, quat_mul

if TYPE_CHECKING:
    from flashnerd.envs.core import FlashNeRDEnv

# --- observations: (N, d) ----------------------------------------------------------------------------------------


def base_lin_vel(env: FlashNeRDEnv) -> torch.Tensor:
    """Base linear velocity in the base frame (N, 3)."""
    return env.root_lin_vel_b


def base_ang_vel(env: FlashNeRDEnv) -> torch.Tensor:
    """Base angular velocity in the base frame (N, 3)."""
    return env.root_ang_vel_b


def projected_gravity(env: FlashNeRDEnv) -> torch.Tensor:
    """Unit gravity direction in the base frame (N, 3)."""
    return env.projected_gravity_b


def velocity_commands(env: FlashNeRDEnv) -> torch.Tensor:
    """The current (vx, vy, wz) command (N, 3)."""
    return env.command_manager.command


def joint_pos_rel(env: FlashNeRDEnv) -> torch.Tensor:
    """Joint positions relative to the default pose (N, nj)."""
    return env.state.joint_pos - env.default_joint_pos


def joint_vel_rel(env: FlashNeRDEnv) -> torch.Tensor:
    """Joint velocities (N, nj) (the default velocity is zero)."""
    return env.state.joint_vel


def last_action(env: FlashNeRDEnv) -> torch.Tensor:
    """The action applied in the last step (N, na)."""
    return env.actions


# --- rewards: (N,) -----------------------------------------------------------------------------------------------


def track_lin_vel_xy_exp(env: FlashNeRDEnv, std: float) -> torch.Tensor:
    """exp(-|v_xy,cmd - v_xy|^2 / std^2), base frame."""
    err = torch.sum(torch.square(env.command_manager.command[:, :2] - env.root_lin_vel_b[:, :2]), dim=1)
    return torch.exp(-err / std**2)


def track_ang_vel_z_exp(env: FlashNeRDEnv, std: float) -> torch.Tensor:
    """exp(-(wz_cmd - wz)^2 / std^2)."""
    err = torch.square(env.command_manager.command[:, 2] - env.root_ang_vel_b[:, 2])
    return torch.exp(-err / std**2)


def lin_vel_z_l2(env: FlashNeRDEnv) -> torch.Tensor:
    """Squared vertical base velocity."""
    return torch.square(env.root_lin_vel_b[:, 2])


def ang_vel_xy_l2(env: FlashNeRDEnv) -> torch.Tensor:
    """Squared roll and pitch rates."""
    return torch.sum(torch.square(env.root_ang_vel_b[:, :2]), dim=1)


def joint_torques_l2(env: FlashNeRDEnv) -> torch.Tensor:
    """Sum of squared applied joint torques."""
    return torch.sum(torch.square(env.state.joint_torque), dim=1)


def joint_acc_l2(env: FlashNeRDEnv) -> torch.Tensor:
    """Sum of squared joint accelerations (finite difference over one control step)."""
    return torch.sum(torch.square(env.joint_acc), dim=1)


def action_rate_l2(env: FlashNeRDEnv) -> torch.Tensor:
    """Sum of squared action changes."""
    return torch.sum(torch.square(env.actions - env.prev_actions), dim=1)


def flat_orientation_l2(env: FlashNeRDEnv) -> torch.Tensor:
    """Squared horizontal components of gravity in the base frame (zero when level)."""
    return torch.sum(torch.square(env.projected_gravity_b[:, :2]), dim=1)


def feet_air_time(env: FlashNeRDEnv, threshold: float, command_threshold: float = 0.1) -> torch.Tensor:
    """Reward steps longer than `threshold` seconds, paid at touchdown; zero for near-zero commands."""
    air = env.air_time
    reward = torch.sum((air.last_air_time - threshold) * air.first_contact(env.step_dt), dim=1)
    return reward * (torch.norm(env.command_manager.command[:, :2], dim=1) > command_threshold)


def is_terminated(env: FlashNeRDEnv) -> torch.Tensor:
    """1 for worlds whose episode ended by a termination other than a time-out this step."""
    return env.terminated.float()


def undesired_contacts(env: FlashNeRDEnv, group: str, threshold: float) -> torch.Tensor:
    """Number of bodies of `group` whose contact force exceeds `threshold` newtons."""
    return torch.sum(env.contact_force(group) > threshold, dim=1).float()


# --- terminations: (N,) bool -------------------------------------------------------------------------------------


def time_out(env: FlashNeRDEnv) -> torch.Tensor:
    """The episode reached its length."""
    return env.episode_length_buf >= env.max_episode_length


def illegal_contact(env: FlashNeRDEnv, group: str, threshold: float) -> torch.Tensor:
    """Any body of `group` touches something with more than `threshold` newtons."""
    return torch.any(env.contact_force(group) > threshold, dim=1)


def non_finite_state(env: FlashNeRDEnv) -> torch.Tensor:
    """The world's state holds NaN or Inf (a diverged world is ended alone)."""
    return ~torch.isfinite(env.state.qpos).all(dim=1) | ~torch.isfinite(env.state.qvel).all(dim=1)


# --- events ------------------------------------------------------------------------------------------------------
# Reset events edit the staged state (qpos (k, nq), qvel (k, nv)) of the worlds being reset; interval events act on
# the live state through the dynamics backend.


def _uniform(env: FlashNeRDEnv, shape: tuple[int, ...], bounds: torch.Tensor) -> torch.Tensor:
    lo, hi = bounds[:, 0], bounds[:, 1]
    return lo + (hi - lo) * torch.rand(shape, device=env.device, generator=env.rng)


def reset_root_state_uniform(
    env: FlashNeRDEnv, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor,
    pose_range: dict[str, tuple[float, float]], velocity_range: dict[str, tuple[float, float]],
) -> None:
    """Offset the default base pose and set base velocities uniformly within the given ranges."""
    keys = ("x", "y", "z", "roll", "pitch", "yaw")
    pose_b = torch.tensor([pose_range.get(k, (0.0, 0.0)) for k in keys], device=env.device)  # (6, 2)
    vel_b = torch.tensor([velocity_range.get(k, (0.0, 0.0)) for k in keys], device=env.device)  # (6, 2)
    k = len(env_ids)
    d_pose = _uniform(env, (k, 6), pose_b)  # (k, 6)
    qpos[:, 0:3] += d_pose[:, 0:3]
    dq = quat_from_euler_xyz(d_pose[:, 3], d_pose[:, 4], d_pose[:, 5])  # (k, 4)
    qpos[:, 3:7] = quat_mul(qpos[:, 3:7], dq)
    qvel[:, 0:6] = _uniform(env, (k, 6), vel_b)


def reset_joints_by_scale(
    env: FlashNeRDEnv, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor,
    position_range: tuple[float, float], velocity_range: tuple[float, float],
) -> None:
    """Scale the default joint positions and velocities by uniform factors."""
    nj = env.robot.num_joints
    k = len(env_ids)
    scale = _uniform(env, (k, nj), torch.tensor([position_range] * nj, device=env.device))  # (k, nj)
    qpos[:, -nj:] = env.default_joint_pos * scale
    vscale = _uniform(env, (k, nj), torch.tensor([velocity_range] * nj, device=env.device))  # (k, nj)
    qvel[:, -nj:] *= vscale


def push_by_setting_velocity(
    env: FlashNeRDEnv, env_ids: torch.Tensor, velocity_range: dict[str, tuple[float, float]]
) -> None:
    """Add a random base velocity (a push) to `env_ids`."""
    keys = ("x", "y", "z", "roll", "pitch", "yaw")
    bounds = torch.tensor([velocity_range.get(k, (0.0, 0.0)) for k in keys], device=env.device)  # (6, 2)
    qvel = env.state.qvel[env_ids].clone()  # (k, nv)
    qvel[:, 0:6] += _uniform(env, (len(env_ids), 6), bounds)
    env.dyn.set_qvel(env_ids, qvel)
