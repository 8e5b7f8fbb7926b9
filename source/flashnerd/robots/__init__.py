"""Robot models authored by this project, looked up by name."""

from flashnerd.robots.anymal_c import ANYMAL_C
from flashnerd.robots.spec import Probe, RobotSpec

ROBOTS: dict[str, RobotSpec] = {ANYMAL_C.name: ANYMAL_C}


def get_robot(name: str) -> RobotSpec:
    """Return the `RobotSpec` registered under `name`, or raise a one-line error listing the known robots."""
    if name not in ROBOTS:
        raise ValueError(f"unknown robot '{name}'; choose one of: {', '.join(sorted(ROBOTS))}")
    return ROBOTS[name]


__all__ = ["ROBOTS", "Probe", "RobotSpec", "get_robot"]
