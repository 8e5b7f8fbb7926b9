"""Observation, reward, termination and event terms. Each reads the env's batched buffers; none loops over worlds."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import torch

from flashnerd.utils.math import quat_conjugate, quat_from_euler_xyz, quat_mul, quat_rotation_angle, random_quat

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


def joint_pos_limit_normalized(env: FlashNeRDEnv) -> torch.Tensor:
    """Actuated joint positions scaled to [-1, 1] over their ranges (N, nj)."""
    q = env.state.qpos[:, env._actuated_qpos]  # (N, nj)
    lo, hi = env._target_low, env._target_high
    return 2.0 * (q - lo) / (hi - lo) - 1.0


def object_pos_rel(env: FlashNeRDEnv) -> torch.Tensor:
    """Object position relative to its goal position (N, 3), world frame."""
    return env.object_pos - env.goal.position


def object_quat(env: FlashNeRDEnv) -> torch.Tensor:
    """Object orientation (N, 4), wxyz with w >= 0 (q and -q are one rotation)."""
    q = env.object_quat
    return torch.where(q[:, :1] < 0, -q, q)


def object_lin_vel(env: FlashNeRDEnv) -> torch.Tensor:
    """Object linear velocity (N, 3), world frame."""
    return env.dyn.object_state()[:, 7:10]


def object_ang_vel(env: FlashNeRDEnv) -> torch.Tensor:
    """Object angular velocity (N, 3), its own frame (MuJoCo's free-joint convention)."""
    return env.dyn.object_state()[:, 10:13]


def goal_quat(env: FlashNeRDEnv) -> torch.Tensor:
    """The goal orientation (N, 4)."""
    return env.goal.quat


def goal_quat_diff(env: FlashNeRDEnv) -> torch.Tensor:
    """Rotation from the goal to the object, q_obj * q_goal^-1 (N, 4), w >= 0."""
    q = quat_mul(env.object_quat, quat_conjugate(env.goal.quat))
    return torch.where(q[:, :1] < 0, -q, q)


# --- rewards: (N,) -----------------------------------------------------------------------------------------------


def track_orientation_inv_l2(env: FlashNeRDEnv, rot_eps: float = 0.1) -> torch.Tensor:
    """1 / (rotation angle to the goal + rot_eps)."""
    return 1.0 / (quat_rotation_angle(env.object_quat, env.goal.quat) + rot_eps)


def object_goal_distance(env: FlashNeRDEnv) -> torch.Tensor:
    """Distance (m) of the object from its goal position."""
    return torch.linalg.norm(env.object_pos - env.goal.position, dim=1)


def success_bonus(env: FlashNeRDEnv) -> torch.Tensor:
    """1 where the object reached its goal orientation this step (the goal is then replaced)."""
    return env.goal.reached(env.object_quat).float()


def action_l2(env: FlashNeRDEnv) -> torch.Tensor:
    """Sum of squared actions."""
    return torch.sum(torch.square(env.actions), dim=1)


def joint_vel_l2(env: FlashNeRDEnv) -> torch.Tensor:
    """Sum of squared joint velocities."""
    return torch.sum(torch.square(env.state.joint_vel), dim=1)


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


def is_alive(env: FlashNeRDEnv) -> torch.Tensor:
    """1 for worlds whose episode did not end by a termination other than a time-out this step (Isaac Lab's)."""
    return (~env.terminated).float()


def is_terminated(env: FlashNeRDEnv) -> torch.Tensor:
    """1 for worlds whose episode ended by a termination other than a time-out this step."""
    return env.terminated.float()


def model_disagreement(env: FlashNeRDEnv) -> torch.Tensor:
    """The learned ensemble's disagreement on the last step (N,) (`RobotState.disagreement`)."""
    return env.state.disagreement


def model_disagreement_above(env: FlashNeRDEnv, threshold: float) -> torch.Tensor:
    """Worlds whose ensemble disagreement on the last step exceeds `threshold` (N,) bool."""
    return env.state.disagreement > threshold


def undesired_contacts(env: FlashNeRDEnv, threshold: float, group: str | None = None) -> torch.Tensor:
    """Number of bodies of `group` (None: every group of the robot's `undesired_contacts`, none for a robot that names
    none) whose contact force exceeds `threshold` newtons."""
    groups = (group,) if group is not None else env.robot.undesired_contacts
    count = torch.zeros(env.num_envs, device=env.device)  # (N,)
    for g in groups:
        count += torch.sum(env.contact_force(g) > threshold, dim=1)
    return count


# --- terminations: (N,) bool -------------------------------------------------------------------------------------


def object_away_from_goal(env: FlashNeRDEnv, threshold: float) -> torch.Tensor:
    """The object fell: it is farther than `threshold` (m) from its goal position."""
    return object_goal_distance(env) > threshold


def time_out(env: FlashNeRDEnv) -> torch.Tensor:
    """The episode reached its length."""
    return env.episode_length_buf >= env.max_episode_length


def illegal_contact(env: FlashNeRDEnv, group: str, threshold: float) -> torch.Tensor:
    """Any body of `group` touches something with more than `threshold` newtons."""
    return torch.any(env.contact_force(group) > threshold, dim=1)


# No robot here moves a body or a joint this fast; a learned model's world that does has diverged (a weak model's
# worlds drift to 1e6 m and beyond while staying finite, and their rewards would swamp a batch's returns)
MAX_STATE_SPEED = 1e3  # m/s, rad/s


def diverged(env: FlashNeRDEnv) -> torch.Tensor:
    """(N,) bool: the world's state holds NaN or Inf, or a speed beyond `MAX_STATE_SPEED`."""
    qvel = env.state.qvel  # (N, nv)
    return ~torch.isfinite(env.state.qpos).all(dim=1) | ~(qvel.abs() <= MAX_STATE_SPEED).all(dim=1)


def non_finite_state(env: FlashNeRDEnv) -> torch.Tensor:
    """The world has diverged (`diverged`: NaN, Inf or an impossible speed); it is ended alone."""
    return diverged(env)


# --- events ------------------------------------------------------------------------------------------------------
# Reset events edit the staged state (qpos (k, nq), qvel (k, nv)) of the worlds being reset; interval events act on
# the live state through the dynamics backend.


def _bounds(env: FlashNeRDEnv, ranges) -> torch.Tensor:
    """(R, 2) tensor of (low, high) ranges on the env's device, made once per distinct ranges and device: events run
    at every reset, where a tensor built from Python numbers would be a host-to-device copy each time."""
    return _bounds_on(tuple((float(lo), float(hi)) for lo, hi in ranges), str(env.device))


@functools.lru_cache(maxsize=256)
def _bounds_on(ranges: tuple[tuple[float, float], ...], device: str) -> torch.Tensor:
    with torch.inference_mode(False):  # a normal tensor, whatever mode the first call ran in
        return torch.tensor(ranges, device=device)  # read only: shared by every call with these ranges


def _uniform(env: FlashNeRDEnv, shape: tuple[int, ...], bounds: torch.Tensor) -> torch.Tensor:
    lo, hi = bounds[:, 0], bounds[:, 1]
    return lo + (hi - lo) * torch.rand(shape, device=env.device, generator=env.rng)


def reset_root_state_uniform(
    env: FlashNeRDEnv, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor,
    pose_range: dict[str, tuple[float, float]], velocity_range: dict[str, tuple[float, float]],
) -> None:
    """Offset the default base pose and set base velocities uniformly within the given ranges."""
    keys = ("x", "y", "z", "roll", "pitch", "yaw")
    pose_b = _bounds(env, [pose_range.get(k, (0.0, 0.0)) for k in keys])  # (6, 2)
    vel_b = _bounds(env, [velocity_range.get(k, (0.0, 0.0)) for k in keys])  # (6, 2)
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
    """Scale the default positions and the velocities of the actuated joints by uniform factors, positions kept within
    the joints' ranges as Isaac Lab's event keeps them (passive joints keep their values)."""
    nj = env.robot.num_joints
    k = len(env_ids)
    scale = _uniform(env, (k, nj), _bounds(env, [position_range] * nj))  # (k, nj)
    qpos[:, env._actuated_qpos] = torch.clamp(env.default_joint_pos * scale, env._joint_low, env._joint_high)
    vscale = _uniform(env, (k, nj), _bounds(env, [velocity_range] * nj))  # (k, nj)
    qvel[:, env._actuated_qvel] *= vscale


def push_by_setting_velocity(
    env: FlashNeRDEnv, env_ids: torch.Tensor, velocity_range: dict[str, tuple[float, float]]
) -> None:
    """Add a random base velocity (a push) to `env_ids`."""
    keys = ("x", "y", "z", "roll", "pitch", "yaw")
    bounds = _bounds(env, [velocity_range.get(k, (0.0, 0.0)) for k in keys])  # (6, 2)
    qvel = env.state.qvel[env_ids].clone()  # (k, nv)
    qvel[:, 0:6] += _uniform(env, (len(env_ids), 6), bounds)
    env.dyn.set_qvel(env_ids, qvel)


def reset_object_pose_uniform(
    env: FlashNeRDEnv, env_ids: torch.Tensor, position_range: tuple[float, float], orientation: str = "random",
) -> None:
    """Place the object at its goal position plus a uniform offset per axis, at rest (a "reset_object" event), in a
    uniformly random orientation ("random"), turned by a random angle about the vertical ("yaw": resting on a face),
    or in its spawn orientation ("spawn")."""
    if orientation not in ("random", "yaw", "spawn"):
        raise ValueError(f"unknown object orientation '{orientation}'; choose random, yaw or spawn")
    k = len(env_ids)
    bounds = _bounds(env, [position_range] * 3)  # (3, 2)
    pose = torch.zeros(k, 7, device=env.device)
    pose[:, 0:3] = env.goal.position[env_ids] + _uniform(env, (k, 3), bounds)
    pose[:, 3] = 1.0
    if orientation == "random":
        pose[:, 3:7] = random_quat(k, env.rng, env.device)
    elif orientation == "yaw":
        yaw = (2.0 * torch.rand(k, device=env.device, generator=env.rng) - 1.0) * math.pi  # (k,)
        zeros = torch.zeros_like(yaw)
        pose[:, 3:7] = quat_from_euler_xyz(zeros, zeros, yaw)
    env.dyn.reset_objects(env_ids, pose, torch.zeros(k, 6, device=env.device))


def reset_joints_uniform(
    env: FlashNeRDEnv, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor,
    position_range: tuple[float, float],
) -> None:
    """Offset the actuated joints from their default positions uniformly, within their ranges (a "reset" event)."""
    k, cols = len(env_ids), env._actuated_qpos
    offset = _uniform(env, (k, len(cols)), _bounds(env, [position_range] * len(cols)))
    qpos[:, cols] = torch.maximum(torch.minimum(env.default_joint_pos + offset, env._target_high), env._target_low)
