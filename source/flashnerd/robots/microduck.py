"""Microduck: a small bipedal duck robot (25 cm, 0.83 kg, 14 XL330 position servos) on a floating base."""

from flashnerd.robots.spec import Probe, RobotSpec

# Standing pose: thigh 0.3 rad forward, knee bent 0.3 rad so the shin is vertical and the foot level (hip pitch + knee +
# ankle = 0 on each leg; the right leg's pitch axes are mirrored, hence its opposite signs), neck upright, beak level.
# The centre of mass is then 2 mm behind the ankle axis. The servos (kp 0.52) are softer than gravity and the pose
# is held by the joints' frictionloss (see the MJCF header); deeper crouches sag further and fall more easily.
_LEFT_LEG = (0.0, 0.0, 0.3, -0.3, 0.0)
_HEAD = (0.0, 0.0, 0.0, 0.0)
_RIGHT_LEG = (0.0, 0.0, -0.3, 0.3, 0.0)

# Foot-plate corners in the foot frame: heel 30 mm behind the ankle, toe 50 mm ahead, 22 mm to each side, on the sole
# plane z = -0.012 and on the plate's top face z = -0.004. The top corners matter: after a roll the duck often sits
# with its feet rolled past 90 degrees, touching the ground with the plate's upper edge (MuJoCo counts that as foot
# contact; with sole corners alone the learned backends missed it, the lowest sole corner sitting 2-6 mm up).
_SOLE = ((-0.03, 0.022), (-0.03, -0.022), (0.05, 0.022), (0.05, -0.022))
_PLATE_FACES = (-0.012, -0.004)

MICRODUCK = RobotSpec(
    name="microduck",
    mjcf="microduck.xml",
    joint_names=(
        *(f"left_{j}" for j in ("hip_yaw", "hip_roll", "hip_pitch", "knee", "ankle")),
        "neck_pitch", "head_pitch", "head_yaw", "head_roll",
        *(f"right_{j}" for j in ("hip_yaw", "hip_roll", "hip_pitch", "knee", "ankle")),
    ),
    default_joint_pos=(*_LEFT_LEG, *_HEAD, *_RIGHT_LEG),
    stiffness=0.52,  # XL330 position servos
    damping=0.05,
    effort_limit=0.91,
    init_base_height=0.134,  # soles on the floor at 0.131 in the default pose, plus 3 mm
    floating_base=True,
    sim_dt=0.002,
    decimation=10,  # 50 Hz control
    contact_bodies={
        "trunk": ("trunk_base",),
        "head": ("neck_link", "head_link"),
        "feet": ("left_foot_link", "right_foot_link"),
    },
    # 24 probes: the eight foot-plate corners per foot, the two knees (the thigh capsule's lower cap), the trunk box's
    # front and back edges (top and bottom, on the centre line), the head sphere and the beak tip; radii as the MJCF.
    probes=(
        *(Probe(f"{side}_foot_link", (x, y, z), 0.0) for side in ("left", "right") for z in _PLATE_FACES
          for x, y in _SOLE),
        Probe("left_shin_link", (0.0, 0.0, 0.0), 0.012),
        Probe("right_shin_link", (0.0, 0.0, 0.0), 0.012),
        *(Probe("trunk_base", (x, 0.0, z), 0.0) for x in (0.06, -0.06) for z in (0.025, -0.035)),
        Probe("head_link", (-0.008, 0.0, 0.02), 0.03),
        Probe("head_link", (0.07, 0.0, 0.016), 0.01),
    ),
    explore_amplitude=0.5,
    init_joint_noise=0.2,
    init_vel_noise=0.5,
    # Exploration starts in any orientation (a roll passes through all of them), dropped from up to 0.28 m so that an
    # upside-down spawn does not start inside the floor.
    init_height_range=(0.0, 0.15),
    init_tilt=3.14159,
)
