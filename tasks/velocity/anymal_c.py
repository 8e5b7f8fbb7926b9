"""ANYmal-C velocity tracking on flat ground and on rough terrain, matching Isaac Lab's
`Isaac-Velocity-Flat-Anymal-C-v0` and `Isaac-Velocity-Rough-Anymal-C-v0`.

Control 50 Hz (sim dt 0.005, decimation 4), 20 s episodes, joint position targets = default + 0.5 * action.
Sized for a CPU: 1024 envs (Isaac Lab: 4096; pass --num_envs 4096 or more on a GPU).
"""

from __future__ import annotations

import math

from flashnerd.envs import DoneTerm, EnvCfg, EventTerm, ObsGroup, ObsTerm, RewTerm, VelocityCommandCfg, mdp, terrain


def _policy_terms() -> dict[str, ObsTerm]:
    return {
        "base_lin_vel": ObsTerm(mdp.base_lin_vel, noise=0.1),
        "base_ang_vel": ObsTerm(mdp.base_ang_vel, noise=0.2),
        "projected_gravity": ObsTerm(mdp.projected_gravity, noise=0.05),
        "velocity_commands": ObsTerm(mdp.velocity_commands),
        "joint_pos": ObsTerm(mdp.joint_pos_rel, noise=0.01),
        "joint_vel": ObsTerm(mdp.joint_vel_rel, noise=1.5),
        "actions": ObsTerm(mdp.last_action),
    }


def AnymalCFlatEnvCfg() -> EnvCfg:  # noqa: N802  (named like the Isaac Lab config class it mirrors)
    """Training configuration: noisy policy observations, a noise-free critic group, pushes."""
    return EnvCfg(
        robot="anymal_c",
        any_robot=True,  # --robot / robot= runs the task on any legged robot with `base` and `feet` contact groups
        terrain="flat",
        num_envs=1024,
        episode_length_s=20.0,
        action_scale=0.5,
        observations={
            "policy": ObsGroup(_policy_terms(), enable_corruption=True),
            "critic": ObsGroup(_policy_terms(), enable_corruption=False),
        },
        commands=VelocityCommandCfg(
            resampling_time_range=(10.0, 10.0), rel_standing_envs=0.02, heading_command=True,
            rel_heading_envs=1.0, heading_control_stiffness=0.5,
            lin_vel_x=(-1.0, 1.0), lin_vel_y=(-1.0, 1.0), ang_vel_z=(-1.0, 1.0), heading=(-math.pi, math.pi),
        ),
        rewards={
            "track_lin_vel_xy_exp": RewTerm(mdp.track_lin_vel_xy_exp, weight=1.0, params={"std": math.sqrt(0.25)}),
            "track_ang_vel_z_exp": RewTerm(mdp.track_ang_vel_z_exp, weight=0.5, params={"std": math.sqrt(0.25)}),
            "lin_vel_z_l2": RewTerm(mdp.lin_vel_z_l2, weight=-2.0),
            "ang_vel_xy_l2": RewTerm(mdp.ang_vel_xy_l2, weight=-0.05),
            "dof_torques_l2": RewTerm(mdp.joint_torques_l2, weight=-2.5e-5),
            "dof_acc_l2": RewTerm(mdp.joint_acc_l2, weight=-2.5e-7),
            "action_rate_l2": RewTerm(mdp.action_rate_l2, weight=-0.01),
            "feet_air_time": RewTerm(mdp.feet_air_time, weight=0.5, params={"threshold": 0.5}),
            # the robot's `undesired_contacts` groups (ANYmal-C: the thighs, as in Isaac Lab)
            "undesired_contacts": RewTerm(mdp.undesired_contacts, weight=-1.0, params={"threshold": 1.0}),
            "flat_orientation_l2": RewTerm(mdp.flat_orientation_l2, weight=-5.0),
            # Not in Isaac Lab's flat ANYmal-C task (its humanoid tasks use the same term): with MuJoCo's ideal PD
            # actuator an early policy pays more in penalties than it earns in tracking, and without this term PPO
            # learned to drop the base within 0.3 s to stop paying (measured).
            "termination_penalty": RewTerm(mdp.is_terminated, weight=-200.0),
        },
        terminations={
            "time_out": DoneTerm(mdp.time_out, time_out=True),
            "base_contact": DoneTerm(mdp.illegal_contact, params={"group": "base", "threshold": 1.0}),
            "non_finite_state": DoneTerm(mdp.non_finite_state),
        },
        events={
            "reset_base": EventTerm(
                mdp.reset_root_state_uniform, mode="reset",
                params={
                    "pose_range": {"x": (-0.5, 0.5), "y": (-0.5, 0.5), "yaw": (-math.pi, math.pi)},
                    "velocity_range": {k: (-0.5, 0.5) for k in ("x", "y", "z", "roll", "pitch", "yaw")},
                },
            ),
            "reset_robot_joints": EventTerm(
                mdp.reset_joints_by_scale, mode="reset",
                params={"position_range": (0.5, 1.5), "velocity_range": (0.0, 0.0)},
            ),
            "push_robot": EventTerm(
                mdp.push_by_setting_velocity, mode="interval", interval_range_s=(10.0, 15.0),
                params={"velocity_range": {"x": (-0.5, 0.5), "y": (-0.5, 0.5)}},
            ),
        },
    )


def AnymalCFlatEnvCfg_PLAY() -> EnvCfg:  # noqa: N802
    """Play configuration: 50 worlds, no observation noise, no pushes."""
    cfg = AnymalCFlatEnvCfg()
    cfg.num_envs = 50
    cfg.observations["policy"].enable_corruption = False
    cfg.events.pop("push_robot")
    return cfg


def AnymalCRoughEnvCfg() -> EnvCfg:  # noqa: N802  (named like the Isaac Lab config class it mirrors)
    """Rough-terrain velocity tracking, as Isaac Lab's `Isaac-Velocity-Rough-Anymal-C-v0`: the `rough` heightfield
    (stairs, boxes, noise, slopes in rows of difficulty), a height scan in both observation groups, the terrain-level
    curriculum, and the rough task's reward weights (feet air time 0.125, torques -1e-5, no flat-orientation term)."""
    cfg = AnymalCFlatEnvCfg()
    cfg.terrain = "rough"
    for group in cfg.observations.values():
        group.terms["height_scan"] = ObsTerm(terrain.height_scan, noise=0.1, clip=(-1.0, 1.0))
    cfg.rewards["feet_air_time"].weight = 0.125
    cfg.rewards["dof_torques_l2"].weight = -1.0e-5
    cfg.rewards.pop("flat_orientation_l2")
    cfg.trackers = {"terrain": terrain.TerrainLevels}
    events = dict(cfg.events)
    cfg.events = {"reset_base": events.pop("reset_base"),
                  "place_on_terrain": EventTerm(terrain.place_on_terrain, mode="reset"), **events}
    return cfg


def _levels_without_curriculum(env) -> terrain.TerrainLevels:
    """Every level from the start and no level changes (the play configuration)."""
    return terrain.TerrainLevels(env, curriculum=False)


def AnymalCRoughEnvCfg_PLAY() -> EnvCfg:  # noqa: N802
    """Play configuration: 50 worlds on every level, no curriculum, no observation noise, no pushes."""
    cfg = AnymalCRoughEnvCfg()
    cfg.num_envs = 50
    cfg.observations["policy"].enable_corruption = False
    cfg.events.pop("push_robot")
    cfg.trackers = {"terrain": _levels_without_curriculum}
    return cfg
