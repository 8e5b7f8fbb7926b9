"""ANYmal-C: the quadruped of Isaac Lab's velocity-tracking reference task."""

from flashnerd.robots.spec import Probe, RobotSpec

_LEGS = ("LF", "RF", "LH", "RH")

ANYMAL_C = RobotSpec(
    name="anymal_c",
    mjcf="anymal_c.xml",
    joint_names=tuple(f"{leg}_{j}" for leg in _LEGS for j in ("HAA", "HFE", "KFE")),
    # Isaac Lab's default pose: HAA 0, front HFE 0.4 / KFE -0.8, hind HFE -0.4 / KFE 0.8.
    default_joint_pos=(0.0, 0.4, -0.8, 0.0, 0.4, -0.8, 0.0, -0.4, 0.8, 0.0, -0.4, 0.8),
    stiffness=200.0,
    damping=4.0,
    effort_limit=80.0,
    init_base_height=0.6,
    contact_bodies={
        "base": ("base",),
        "thighs": tuple(f"{leg}_THIGH" for leg in _LEGS),
        "shanks": tuple(f"{leg}_SHANK" for leg in _LEGS),
        "feet": tuple(f"{leg}_FOOT" for leg in _LEGS),
    },
    undesired_contacts=("thighs",),
    # 14 probes as in NeRD: four feet, four knees (the shank's knee cylinder), four base-box bottom corners and the
    # bottoms of the front and rear bumpers.
    probes=(
        *(Probe(f"{leg}_FOOT", (0.0, 0.0, 0.0), 0.03) for leg in _LEGS),
        *(Probe(f"{leg}_SHANK", (0.0, 0.0, 0.0), 0.06) for leg in _LEGS),
        *(Probe("base", (sx * 0.29, sy * 0.07, -0.09)) for sx in (1, -1) for sy in (1, -1)),
        Probe("base", (0.4695, 0.0, -0.09)),
        Probe("base", (-0.4695, 0.0, -0.09)),
    ),
)
