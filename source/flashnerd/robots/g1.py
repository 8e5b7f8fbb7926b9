"""Unitree G1: a 29-joint humanoid (6 per leg, 3 waist, 7 per arm) on a floating base."""

from flashnerd.robots.spec import Probe, RobotSpec

_LEG = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
_WAIST = ("waist_yaw", "waist_roll", "waist_pitch")
_ARM = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll", "wrist_pitch", "wrist_yaw")

# Standing pose: knees bent with the foot kept level (hip pitch + knee + ankle pitch = 0), which puts the centre of
# mass 2 cm ahead of the ankles, inside the sole (heel -5 cm, toe +12 cm); arms hanging a little out from the body
# with the forearms pointing forward-down. (Unitree's -0.1 / 0.3 / -0.2 leaves the centre of mass 4.5 cm ahead of
# the ankles, and under fixed PD targets the robot then tips forward.)
_LEG_POSE = (-0.2, 0.0, 0.0, 0.4, -0.2, 0.0)
_ARM_POSE = {"left": (0.0, 0.2, 0.0, 1.0, 0.0, 0.0, 0.0), "right": (0.0, -0.2, 0.0, 1.0, 0.0, 0.0, 0.0)}

# Sole corners in the ankle-roll frame: heel 5 cm behind the ankle, toe 12 cm ahead, on the sole plane z = -0.035.
_SOLE = ((-0.05, 0.025), (-0.05, -0.025), (0.12, 0.03), (0.12, -0.03))

G1 = RobotSpec(
    name="g1",
    mjcf="g1.xml",
    joint_names=(
        *(f"left_{j}_joint" for j in _LEG),
        *(f"right_{j}_joint" for j in _LEG),
        *(f"{j}_joint" for j in _WAIST),
        *(f"left_{j}_joint" for j in _ARM),
        *(f"right_{j}_joint" for j in _ARM),
    ),
    default_joint_pos=(*_LEG_POSE, *_LEG_POSE, 0.0, 0.0, 0.0, *_ARM_POSE["left"], *_ARM_POSE["right"]),
    # Leg (hip, knee, ankle) and waist servos; arms use kp 40 / kv 2 and wrists kp 20 / kv 1 (see the MJCF).
    stiffness=200.0,
    damping=5.0,
    effort_limit=139.0,  # hip roll and knee motors; the others are limited lower by their MJCF forcerange
    init_base_height=0.784,  # sole on the floor at 0.779 in the default pose, plus 5 mm
    contact_bodies={
        "pelvis": ("pelvis",),
        "torso": ("torso_link",),
        "knees": ("left_knee_link", "right_knee_link"),
        "hands": ("left_wrist_yaw_link", "right_wrist_yaw_link"),
        "feet": ("left_ankle_roll_link", "right_ankle_roll_link"),
    },
    # 16 probes: four sole corners per foot, the two kneecaps, the pelvis, chest and back, the head and both hands;
    # the radii match the collision spheres and capsule caps of the MJCF.
    probes=(
        *(Probe(f"{side}_ankle_roll_link", (x, y, -0.035), 0.0) for side in ("left", "right") for x, y in _SOLE),
        Probe("left_knee_link", (0.005, 0.0, 0.0), 0.045),
        Probe("right_knee_link", (0.005, 0.0, 0.0), 0.045),
        Probe("pelvis", (0.0, 0.0, -0.075), 0.06),
        Probe("torso_link", (0.07, 0.0, 0.165), 0.0),
        Probe("torso_link", (-0.07, 0.0, 0.165), 0.0),
        Probe("torso_link", (0.005, 0.0, 0.405), 0.075),
        Probe("left_wrist_yaw_link", (0.11, 0.0, 0.0), 0.03),
        Probe("right_wrist_yaw_link", (0.11, 0.0, 0.0), 0.03),
    ),
    explore_amplitude=0.5,
    init_joint_noise=0.2,
    init_vel_noise=0.5,
    init_height_range=(-0.03, 0.05),  # lower spawns would start with the soles inside the floor
)
