"""Options of the analytical backends, as typed configs (light: the registry reads them without loading Warp)."""

from __future__ import annotations

from dataclasses import dataclass

from flashnerd.sim.scene import CUBE_MASS


@dataclass(frozen=True)
class MujocoConfig:
    """Options of the `mujoco` backend (`make_dynamics("mujoco", ..., nthread=1)`)."""

    nthread: int | None = None  # rollout threads (default: one per core, at most one per world)
    objects: tuple[str, ...] = ()  # objects next to the robot, see sim/scene.py
    cube_mass: float = CUBE_MASS  # kg, when the objects hold a cube


@dataclass(frozen=True)
class MjwarpConfig:
    """Options of the `mjwarp` backend."""

    nconmax: int | None = None  # contacts per world (default: 48; 128 on a heightfield, whose prisms add contacts)
    njmax: int | None = None  # constraint rows per world (default: 4 per contact + 2 per DOF)
    graph: bool | None = None  # capture a control step as a CUDA graph (default: on CUDA)
    objects: tuple[str, ...] = ()  # objects next to the robot, see sim/scene.py
    cube_mass: float = CUBE_MASS  # kg, when the objects hold a cube
