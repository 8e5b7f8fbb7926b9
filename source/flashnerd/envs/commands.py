"""Velocity commands: uniform (vx, vy, wz) targets with heading control, resampled on a timer per world."""

from __future__ import annotations

import torch

from flashnerd.envs.config import VelocityCommandCfg
from flashnerd.utils.math import quat_from_euler_xyz, quat_mul, quat_rotation_angle, random_quat, wrap_to_pi


class VelocityCommand:
    """Holds the (N, 3) base-velocity command in the base's yaw frame, as Isaac Lab's `UniformVelocityCommand`."""

    def __init__(self, cfg: VelocityCommandCfg, num_envs: int, device: torch.device, rng: torch.Generator) -> None:
        self.cfg = cfg
        self.rng = rng
        self.command = torch.zeros(num_envs, 3, device=device)  # (N, 3) vx, vy, wz
        self.heading_target = torch.zeros(num_envs, device=device)  # (N,)
        self.is_heading_env = torch.zeros(num_envs, dtype=torch.bool, device=device)  # (N,)
        self.is_standing_env = torch.zeros(num_envs, dtype=torch.bool, device=device)  # (N,)
        self.time_left = torch.zeros(num_envs, device=device)  # (N,) seconds until the next resample

    def _uniform(self, n: int, bounds: tuple[float, float]) -> torch.Tensor:
        lo, hi = bounds
        return lo + (hi - lo) * torch.rand(n, device=self.command.device, generator=self.rng)

    def resample(self, env_ids: torch.Tensor) -> None:
        """Draw new commands for `env_ids` (k,) and restart their timers."""
        n = len(env_ids)
        if n == 0:
            return
        c = self.cfg
        self.command[env_ids, 0] = self._uniform(n, c.lin_vel_x)
        self.command[env_ids, 1] = self._uniform(n, c.lin_vel_y)
        self.command[env_ids, 2] = self._uniform(n, c.ang_vel_z)
        if c.heading_command:
            self.heading_target[env_ids] = self._uniform(n, c.heading)
            self.is_heading_env[env_ids] = self._uniform(n, (0.0, 1.0)) <= c.rel_heading_envs
        self.is_standing_env[env_ids] = self._uniform(n, (0.0, 1.0)) <= c.rel_standing_envs
        self.time_left[env_ids] = self._uniform(n, c.resampling_time_range)

    def update(self, dt: float, heading: torch.Tensor) -> None:
        """Advance timers by dt, resample expired worlds, and turn heading targets into yaw-rate commands."""
        self.time_left -= dt
        self.resample(torch.nonzero(self.time_left <= 0.0).flatten())
        if self.cfg.heading_command:  # over every world, kept where it has a heading target (no host sync)
            err = wrap_to_pi(self.heading_target - heading)  # (N,)
            lo, hi = self.cfg.ang_vel_z
            yaw_rate = torch.clamp(self.cfg.heading_control_stiffness * err, lo, hi)  # (N,)
            self.command[:, 2] = torch.where(self.is_heading_env, yaw_rate, self.command[:, 2])
        self.command[self.is_standing_env] = 0.0


class OrientationGoal:
    """Holds a goal orientation (N, 4) per world; worlds whose object reaches it get a new one and count a success."""

    def __init__(self, cfg, num_envs: int, device: torch.device, rng: torch.Generator) -> None:
        self.cfg, self.rng = cfg, rng
        self.quat = torch.zeros(num_envs, 4, device=device)  # (N, 4) goal orientation, wxyz
        self.quat[:, 0] = 1.0
        self.position = torch.tensor(cfg.position, device=device).expand(num_envs, 3)  # (N, 3) goal position
        self.successes = torch.zeros(num_envs, device=device)  # (N,) goals reached this episode
        self.reached_now = torch.zeros(num_envs, dtype=torch.bool, device=device)  # (N,) reached at the last step

    def resample(self, env_ids: torch.Tensor, object_quat: torch.Tensor) -> None:
        """Draw new goal orientations for `env_ids` (k,); relative goals start from `object_quat` (N, 4)."""
        k = len(env_ids)
        if k == 0:
            return
        if self.cfg.yaw_range is None:
            self.quat[env_ids] = random_quat(k, self.rng, self.quat.device)
            return
        lo, hi = self.cfg.yaw_range
        u = torch.rand(k, 2, device=self.quat.device, generator=self.rng)  # (k, 2)
        yaw = (lo + (hi - lo) * u[:, 0]) * torch.where(u[:, 1] < 0.5, -1.0, 1.0)  # (k,) signed turn
        zeros = torch.zeros_like(yaw)
        turn = quat_from_euler_xyz(zeros, zeros, yaw)  # (k, 4) about the world z axis
        self.quat[env_ids] = quat_mul(turn, object_quat[env_ids])  # world-frame turn applied after the object's

    def reached(self, object_quat: torch.Tensor) -> torch.Tensor:
        """Worlds (N,) whose object orientation (N, 4) is within the success tolerance of the goal."""
        return quat_rotation_angle(object_quat, self.quat) <= self.cfg.success_tolerance

    def update(self, object_quat: torch.Tensor) -> None:
        """Count the successes of this step and give those worlds a new goal."""
        self.reached_now = self.reached(object_quat)  # (N,)
        self.successes += self.reached_now.float()
        self.resample(torch.nonzero(self.reached_now).flatten(), object_quat)
