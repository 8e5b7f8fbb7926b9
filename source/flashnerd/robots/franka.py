"""Franka Emika Panda: a fixed-base 7-joint arm (no gripper fingers, no collisions) for free articulated dynamics."""

from flashnerd.robots.spec import RobotSpec

FRANKA = RobotSpec(
    name="franka",
    mjcf="franka.xml",
    joint_names=tuple(f"joint{i}" for i in range(1, 8)),
    # The Menagerie Panda "home" keyframe: upper arm vertical, elbow bent 90 deg, flange pointing down.
    default_joint_pos=(0.0, 0.0, 0.0, -1.57079, 0.0, 1.57079, -0.7853),
    stiffness=800.0,  # joint2; the others 600 (1, 3, 4), 250, 150, 50 (5-7)
    damping=100.0,  # joint2; the others 70, 60, 55, 12, 10, 4
    effort_limit=87.0,  # joints 1-4; joints 5-7 12
    init_base_height=0.0,
    floating_base=False,
    sim_dt=0.005,
    decimation=4,
    explore_amplitude=1.2,
    init_joint_noise=0.5,
    init_vel_noise=0.5,
)
