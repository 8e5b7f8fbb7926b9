"""Microduck forward roll: roll over the head and land back on the feet (after the upstream "Roulade" task).

A roll is tracked per world as the accumulated forward pitch (the integral of the base pitch rate, positive when the
beak goes down). Rewards pay pitch rate while the roll is incomplete, then standing upright on both feet once it is
complete; energy and action-rate penalties keep it smooth. Some episodes start mid-roll (airborne, pitched, pitching
forward) so that PPO sees the landing early. Success: the roll completed (accumulated pitch >= 2 pi - 0.3) and then
0.5 s upright (gravity within 25 deg of the body's down axis) on both feet. Control 50 Hz (sim dt 0.002, decimation 10).
"""

from __future__ import annotations

import math

import torch

from flashnerd.envs import DoneTerm, EnvCfg, EventTerm, ObsGroup, ObsTerm, RewTerm, mdp
from flashnerd.utils.math import quat_from_euler_xyz

FULL_ROLL = 2 * math.pi - 0.3  # rad of accumulated pitch that count as a full roll
UPRIGHT_COS = math.cos(math.radians(25.0))
SETTLE_S = 0.5


class RollTracker:
    """Accumulated forward pitch (N,), time upright on both feet since the roll completed (N,), success flags (N,)."""

    def __init__(self, env) -> None:
        self.env = env
        n, dev = env.num_envs, env.device
        self.progress = torch.zeros(n, device=dev)  # rad, integral of the base pitch rate
        self.settled = torch.zeros(n, device=dev)  # s upright on both feet after completing the roll
        self.success = torch.zeros(n, dtype=torch.bool, device=dev)
        self.new_success = torch.zeros(n, dtype=torch.bool, device=dev)  # succeeded at the last step
        self.episode_success = torch.zeros(n, dtype=torch.bool, device=dev)  # outcome of the last finished episode

    @property
    def completed(self) -> torch.Tensor:
        return self.progress >= FULL_ROLL

    def upright(self) -> torch.Tensor:
        """Worlds (N,) whose body up axis is within 25 degrees of vertical."""
        return -self.env.projected_gravity_b[:, 2] >= UPRIGHT_COS

    def on_feet(self) -> torch.Tensor:
        """Worlds (N,) with both feet touching the ground (> 1 N)."""
        return (self.env.contact_force("feet") > 1.0).all(dim=1)

    def update(self) -> None:
        env = self.env
        self.progress += env.root_ang_vel_b[:, 1] * env.step_dt
        landed = self.completed & self.upright() & self.on_feet()
        # written in place, as every tracker buffer: one replaced under torch.inference_mode (rsl_rl's rollouts
        # step so) could not take a reset's write outside it
        self.settled.copy_(torch.where(landed, self.settled + env.step_dt, torch.zeros_like(self.settled)))
        succeeded = self.settled >= SETTLE_S - 1e-6
        self.new_success.copy_(succeeded & ~self.success)
        self.success |= succeeded

    def reset(self, env_ids: torch.Tensor) -> None:
        self.episode_success[env_ids] = self.success[env_ids]
        for buf in (self.progress, self.settled):
            buf[env_ids] = 0.0
        self.success[env_ids] = False
        self.new_success[env_ids] = False

    def log(self, env_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"Metrics/roll_success": self.success[env_ids].float().mean(),
                "Metrics/roll_progress": self.progress[env_ids].mean()}


# --- terms -------------------------------------------------------------------------------------------------------


def roll_progress(env) -> torch.Tensor:
    """The roll as a fraction of a full turn (N, 1), for the policy."""
    return (env.trackers["roll"].progress / (2 * math.pi))[:, None]


def pitch_rate_while_rolling(env, max_rate: float = 6.0) -> torch.Tensor:
    """Forward pitch rate (rad/s, clipped to [0, max_rate]) until the roll is complete."""
    tracker = env.trackers["roll"]
    return env.root_ang_vel_b[:, 1].clamp(0.0, max_rate) * (~tracker.completed).float()


def landed_upright(env) -> torch.Tensor:
    """1 while the roll is complete and the body stands upright on both feet."""
    t = env.trackers["roll"]
    return (t.completed & t.upright() & t.on_feet()).float()


def roll_success(env) -> torch.Tensor:
    """1 at the step a world's roll becomes a success."""
    return env.trackers["roll"].new_success.float()


def joint_energy(env) -> torch.Tensor:
    """Mechanical power of the servos, sum |tau * qdot| (W)."""
    return torch.sum(torch.abs(env.state.joint_torque * env.state.joint_vel), dim=1)


def reset_mid_roll(env, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, fraction: float,
                   pitch_range: tuple[float, float], pitch_rate: tuple[float, float], height: float) -> None:
    """Start `fraction` of the reset worlds mid-roll: pitched forward by a uniform angle, airborne at `height`,
    pitching forward; their accumulated pitch starts at that angle (a "reset" event)."""
    k = len(env_ids)
    pick = torch.rand(k, device=env.device, generator=env.rng) < fraction  # (k,)
    m = int(pick.sum())
    if m == 0:
        return
    u = torch.rand(m, 2, device=env.device, generator=env.rng)
    pitch = pitch_range[0] + (pitch_range[1] - pitch_range[0]) * u[:, 0]  # (m,)
    zeros = torch.zeros(m, device=env.device)
    qpos[pick, 2] = height
    qpos[pick, 3:7] = quat_from_euler_xyz(zeros, pitch, zeros)
    qvel[pick, 0:6] = 0.0
    qvel[pick, 4] = pitch_rate[0] + (pitch_rate[1] - pitch_rate[0]) * u[:, 1]
    env.trackers["roll"].progress[env_ids[pick]] = pitch


def _policy_terms() -> dict[str, ObsTerm]:
    return {
        "base_ang_vel": ObsTerm(mdp.base_ang_vel, noise=0.2),
        "projected_gravity": ObsTerm(mdp.projected_gravity, noise=0.05),
        "roll_progress": ObsTerm(roll_progress),
        "joint_pos": ObsTerm(mdp.joint_pos_rel, noise=0.01),
        "joint_vel": ObsTerm(mdp.joint_vel_rel, noise=0.5, scale=0.1),
        "actions": ObsTerm(mdp.last_action),
    }


def MicroduckRollEnvCfg() -> EnvCfg:  # noqa: N802
    """Training configuration: 512 envs, 4 s episodes, 30% mid-roll starts."""
    return EnvCfg(
        robot="microduck",
        num_envs=512,
        episode_length_s=4.0,
        action_scale=1.0,
        trackers={"roll": RollTracker},
        observations={
            "policy": ObsGroup(_policy_terms(), enable_corruption=True),
            "critic": ObsGroup(_policy_terms(), enable_corruption=False),
        },
        rewards={
            "pitch_rate_while_rolling": RewTerm(pitch_rate_while_rolling, weight=1.0, params={"max_rate": 6.0}),
            "landed_upright": RewTerm(landed_upright, weight=5.0),
            "roll_success": RewTerm(roll_success, weight=500.0),
            "joint_energy": RewTerm(joint_energy, weight=-0.05),
            "action_rate_l2": RewTerm(mdp.action_rate_l2, weight=-0.01),
        },
        terminations={
            "time_out": DoneTerm(mdp.time_out, time_out=True),
            "non_finite_state": DoneTerm(mdp.non_finite_state),
        },
        events={
            "reset_robot_joints": EventTerm(mdp.reset_joints_by_scale, mode="reset",
                                            params={"position_range": (0.8, 1.2), "velocity_range": (0.0, 0.0)}),
            "reset_mid_roll": EventTerm(reset_mid_roll, mode="reset", params={
                "fraction": 0.3, "pitch_range": (1.0, 5.0), "pitch_rate": (3.5, 5.5), "height": 0.2}),
        },
    )


def MicroduckRollEnvCfg_PLAY() -> EnvCfg:  # noqa: N802
    """Play configuration: 16 worlds, no noise, every episode starts standing."""
    cfg = MicroduckRollEnvCfg()
    cfg.num_envs = 16
    cfg.observations["policy"].enable_corruption = False
    cfg.events.pop("reset_mid_roll")
    return cfg
