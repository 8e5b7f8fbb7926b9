"""Allegro-style right hand: 16 position-servoed joints, palm welded to the world facing up (in-hand manipulation)."""

from flashnerd.robots.spec import RobotSpec

ALLEGRO = RobotSpec(
    name="allegro",
    mjcf="allegro.xml",
    # Fingers in the order index (ff), middle (mf), ring (rf), thumb (th); joints 0-3 from the palm outwards.
    joint_names=tuple(f"{finger}j{i}" for finger in ("ff", "mf", "rf", "th") for i in range(4)),
    # A cupped rest pose: the proximal phalanges nearly level with the palm face, the medial and distal ones
    # curled up into a wall ahead of it, the thumb lifted out of the palm plane (thj0) and bent over behind, so a
    # 65 mm cube laid on the front of the palm rests flat there, caged ahead and behind.
    default_joint_pos=(
        0.0, 0.1, 0.6, 0.4,  # ff
        0.0, 0.1, 0.6, 0.4,  # mf
        0.0, 0.1, 0.6, 0.4,  # rf
        1.2, 0.4, 0.4, 0.4,  # th
    ),
    stiffness=3.0,  # every joint
    damping=0.1,  # every joint (actuator kv; the joints also carry 0.02 passive damping)
    effort_limit=0.7,  # every joint
    init_base_height=0.0,
    floating_base=False,
    sim_dt=0.0025,
    decimation=8,  # 0.02 s control step (50 Hz)
    # A cube (65 mm) dropped here settles flat on the front of the palm face (z 0.5111) at (-0.0005, 0, 0.5437).
    object_spawn=(0.0, 0.0, 0.545),
    # Exploration targets reach every joint limit from the default pose (the largest span is ffj1's 1.51 rad): the
    # reorientation policy's EMA targets sweep whole joint ranges, and the free-motion model must have seen them
    # (a 0.5 rad exploration left a coupled-trained policy exploiting the model outside its data).
    explore_amplitude=1.6,
    init_joint_noise=0.5,
    init_vel_noise=0.5,
)
