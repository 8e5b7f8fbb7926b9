"""Robot models authored by this project, looked up by name."""

from flashnerd.robots.allegro import ALLEGRO
from flashnerd.robots.anymal_c import ANYMAL_C
from flashnerd.robots.cartpole import CARTPOLE
from flashnerd.robots.franka import FRANKA
from flashnerd.robots.g1 import G1
from flashnerd.robots.microduck import MICRODUCK
from flashnerd.robots.spec import Probe, RobotSpec

ROBOTS: dict[str, RobotSpec] = {r.name: r for r in (ALLEGRO, ANYMAL_C, CARTPOLE, FRANKA, G1, MICRODUCK)}


def get_robot(name: str) -> RobotSpec:
    """Return the `RobotSpec` registered under `name`, or raise a one-line error listing the known robots."""
    if name not in ROBOTS:
        raise ValueError(f"unknown robot '{name}'; choose one of: {', '.join(sorted(ROBOTS))}")
    return ROBOTS[name]


__all__ = ["ROBOTS", "Probe", "RobotSpec", "get_robot"]
