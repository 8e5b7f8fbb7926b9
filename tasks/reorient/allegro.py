"""In-hand cube reorientation with an Allegro-style hand, after Isaac Lab's `Isaac-Repose-Cube-Allegro-v0`.

The palm faces up with a 65 mm cube on it; each episode asks for random goal orientations one after another. A goal
counts as reached when the cube's rotation angle to it is at most 0.1 rad: +250 (times dt), a new goal, one success.
The episode ends when the cube falls (farther than 0.24 m from its goal position) or after 20 s. Actions are EMA
joint targets rescaled to the joint limits. Control 50 Hz here (sim dt 0.0025, decimation 8; Isaac Lab: 1/120 s,
decimation 4). Runs on `mujoco`, `mjwarp`, `coupled` and `oneway` (the robot-only learned backends have no cube).
"""

from __future__ import annotations

from flashnerd.envs import DoneTerm, EnvCfg, EventTerm, ObsGroup, ObsTerm, RewTerm, mdp
from flashnerd.envs.config import OrientationGoalCfg
from flashnerd.robots import get_robot


def _policy_terms() -> dict[str, ObsTerm]:
    return {
        "joint_pos": ObsTerm(mdp.joint_pos_limit_normalized, noise=0.005),
        "joint_vel": ObsTerm(mdp.joint_vel_rel, noise=0.01, scale=0.2),
        "object_pos": ObsTerm(mdp.object_pos_rel, noise=0.002),
        "object_quat": ObsTerm(mdp.object_quat),
        "object_lin_vel": ObsTerm(mdp.object_lin_vel, noise=0.002),
        "object_ang_vel": ObsTerm(mdp.object_ang_vel, noise=0.002, scale=0.2),
        "goal_quat": ObsTerm(mdp.goal_quat),
        "goal_quat_diff": ObsTerm(mdp.goal_quat_diff),
        "actions": ObsTerm(mdp.last_action),
    }


def AllegroCubeEnvCfg() -> EnvCfg:  # noqa: N802  (named like the Isaac Lab config class it mirrors)
    """Training configuration: 256 envs on a CPU (Isaac Lab: 8192 on a GPU)."""
    hand = get_robot("allegro")
    return EnvCfg(
        robot="allegro",
        objects=("cube",),
        num_envs=256,
        episode_length_s=20.0,
        action_mode="ema_limits",
        action_ema_alpha=0.95,
        goal=OrientationGoalCfg(success_tolerance=0.1, position=hand.object_spawn),
        observations={
            "policy": ObsGroup(_policy_terms(), enable_corruption=True),
            "critic": ObsGroup(_policy_terms(), enable_corruption=False),
        },
        rewards={
            "track_orientation_inv_l2": RewTerm(mdp.track_orientation_inv_l2, weight=1.0, params={"rot_eps": 0.1}),
            "object_goal_distance": RewTerm(mdp.object_goal_distance, weight=-10.0),
            "success_bonus": RewTerm(mdp.success_bonus, weight=250.0),
            "joint_vel_l2": RewTerm(mdp.joint_vel_l2, weight=-2.5e-5),
            "action_l2": RewTerm(mdp.action_l2, weight=-1.0e-4),
            "action_rate_l2": RewTerm(mdp.action_rate_l2, weight=-0.01),
        },
        terminations={
            "time_out": DoneTerm(mdp.time_out, time_out=True),
            "object_dropped": DoneTerm(mdp.object_away_from_goal, params={"threshold": 0.24}),
            "non_finite_state": DoneTerm(mdp.non_finite_state),
        },
        events={
            "reset_robot_joints": EventTerm(mdp.reset_joints_uniform, mode="reset",
                                            params={"position_range": (-0.1, 0.1)}),
            "reset_object": EventTerm(mdp.reset_object_pose_uniform, mode="reset_object",
                                      params={"position_range": (-0.005, 0.005), "orientation": "random"}),
        },
    )


def AllegroCubeYawEnvCfg() -> EnvCfg:  # noqa: N802
    """The same hand, cube, observations and rewards with goals a CPU budget can learn: the cube starts resting on a
    face at a random heading, and each goal turns it about the vertical by 0.4-0.8 rad from where it is when the goal
    is drawn (tolerance 0.2 rad; Isaac Lab uses 0.1-0.2). 10 s episodes."""
    cfg = AllegroCubeEnvCfg()
    cfg.episode_length_s = 10.0
    cfg.goal = OrientationGoalCfg(success_tolerance=0.2, position=cfg.goal.position, yaw_range=(0.4, 0.8))
    cfg.events["reset_object"].params["orientation"] = "yaw"
    return cfg


HEAVY_CUBE_MASS = 0.3  # kg, three times the default cube


def AllegroCubeHeavyEnvCfg() -> EnvCfg:  # noqa: N802
    """The yaw task with a 0.3 kg cube: turning it against the palm's friction (about 3 N) takes a good share of what
    the fingertips can push (the joints' 0.7 N m), three times the light cube's, so one-way coupling, which moves the
    fingers as if the cube were not there, has more to get wrong (the seed's Fig. 8; `flashnerd bench reaction`
    measures the cube's push-back along a policy's motion)."""
    cfg = AllegroCubeYawEnvCfg()
    cfg.object_mass = HEAVY_CUBE_MASS
    return cfg


def AllegroCubeEnvCfg_PLAY() -> EnvCfg:  # noqa: N802
    """Play configuration: 16 worlds, no observation noise."""
    cfg = AllegroCubeEnvCfg()
    cfg.num_envs = 16
    cfg.observations["policy"].enable_corruption = False
    return cfg
