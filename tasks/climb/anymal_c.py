"""ANYmal-C platform climbing: six platforms up to 0.181 m (the `platforms` terrain), one per lane.

`flashnerd plan` climbs them with DIAL-MPC (`AnymalCClimbPlanCfg`: the planner and its reward, the same for every
planning backend). The gym environment (`AnymalCClimbEnvCfg`) is the same scene as an RL task: every episode starts
at a random lane's start, facing its platform, with a constant forward command, for PPO users who want to learn it.
"""

from __future__ import annotations

import dataclasses

import torch

from flashnerd.envs import EnvCfg, EventTerm, VelocityCommandCfg
from flashnerd.planning.climb import ClimbPlanCfg
from flashnerd.sim.terrain import LANE_GAP, PLATFORM_HEIGHTS
from flashnerd_tasks.velocity.anymal_c import AnymalCFlatEnvCfg


def reset_to_lane_start(env, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
    """Put each world at the start of a random platform lane (default pose, facing +x)."""
    lane = torch.randint(0, len(PLATFORM_HEIGHTS), (len(env_ids),), device=env.device, generator=env.rng)
    qpos[:, 1] = lane.to(qpos) * LANE_GAP


def AnymalCClimbEnvCfg() -> EnvCfg:  # noqa: N802
    """The flat velocity task's observations, rewards and terminations on the platforms, walking forward at 0.5 m/s."""
    cfg = AnymalCFlatEnvCfg()
    cfg.terrain = "platforms"
    cfg.episode_length_s = 5.0
    cfg.commands = VelocityCommandCfg(resampling_time_range=(1e9, 1e9), rel_standing_envs=0.0, heading_command=True,
                                      rel_heading_envs=1.0, lin_vel_x=(0.5, 0.5), lin_vel_y=(0.0, 0.0),
                                      ang_vel_z=(0.0, 0.0), heading=(0.0, 0.0))
    cfg.events = {"reset_lane": EventTerm(reset_to_lane_start, mode="reset")}
    return cfg


def AnymalCClimbPlanCfg() -> ClimbPlanCfg:  # noqa: N802
    """DIAL-MPC settings of `flashnerd plan` (sized for a 2-core CPU; the published method samples 2048)."""
    return dataclasses.replace(ClimbPlanCfg(), robot="anymal_c")
