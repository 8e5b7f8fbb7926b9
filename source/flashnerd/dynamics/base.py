"""The one seam of the suite: a small batched interface that every dynamics backend implements.

Tasks read `RobotState` only, so one task definition serves every backend, and a policy trained on one backend
is evaluated on another by changing one argument.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from flashnerd.robots import RobotSpec


@dataclass
class RobotState:
    """Batched robot state on the backend's device. Tensors are views refreshed by `step()`; copy to keep them.

    qpos and qvel follow MuJoCo's conventions. Floating base: qpos = [pos_w(3), quat_w(4, wxyz), joints],
    qvel = [lin_vel_w(3), ang_vel_b(3), joint velocities]; fixed base: joints only (the root properties are then
    meaningless). Objects in the scene are not part of it (see the backend's `object_state()`).
    """

    qpos: torch.Tensor  # (N, nq)
    qvel: torch.Tensor  # (N, nv)
    joint_torque: torch.Tensor  # (N, nu) actuator torque applied during the last substep
    contact_force: torch.Tensor  # (N, nb) largest net contact force norm (N) on each contact body over the step
    floating_base: bool = True

    @property
    def root_pos_w(self) -> torch.Tensor:
        return self.qpos[:, 0:3]

    @property
    def root_quat_w(self) -> torch.Tensor:
        return self.qpos[:, 3:7]

    @property
    def joint_pos(self) -> torch.Tensor:
        return self.qpos[:, 7:] if self.floating_base else self.qpos

    @property
    def root_lin_vel_w(self) -> torch.Tensor:
        return self.qvel[:, 0:3]

    @property
    def root_ang_vel_b(self) -> torch.Tensor:
        return self.qvel[:, 3:6]

    @property
    def joint_vel(self) -> torch.Tensor:
        return self.qvel[:, 6:] if self.floating_base else self.qvel


@runtime_checkable
class Dynamics(Protocol):
    """Batched robot dynamics over `num_worlds` independent worlds.

    `step(ctrl)` advances every world by `control_dt` seconds under joint position targets `ctrl` (N, nu).
    `reset(world_ids, qpos, qvel)` writes those worlds' state and clears their history (learned backends keep one);
    `set_qvel(world_ids, qvel)` changes velocities without clearing history (pushes).
    """

    robot: RobotSpec
    num_worlds: int
    control_dt: float
    device: torch.device

    def reset(self, world_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None: ...

    def set_qvel(self, world_ids: torch.Tensor, qvel: torch.Tensor) -> None: ...

    def step(self, ctrl: torch.Tensor) -> None: ...

    def state(self) -> RobotState: ...


DynamicsFactory = Callable[..., Dynamics]
_BACKENDS: dict[str, DynamicsFactory] = {}
_OBJECT_BACKENDS: set[str] = set()


def register_backend(name: str, factory: DynamicsFactory, objects: bool = False) -> None:
    """Make a backend available to `make_dynamics(name, ...)` and to every task's `dynamics=` argument; `objects`
    says that it simulates scene objects (`objects=` argument, `object_state()`, `reset_objects()`)."""
    _BACKENDS[name] = factory
    if objects:
        _OBJECT_BACKENDS.add(name)


def simulates_objects(name: str) -> bool:
    """Whether backend `name` simulates scene objects next to the robot."""
    _register_builtin()
    return name in _OBJECT_BACKENDS


def available_backends() -> list[str]:
    """Names accepted by `make_dynamics` and by `gym.make(..., dynamics=NAME)`."""
    _register_builtin()
    return sorted(_BACKENDS)


def make_dynamics(name: str, robot: RobotSpec, num_worlds: int, device: str | torch.device = "cpu", **kwargs):
    """Build the backend `name` for `num_worlds` worlds of `robot`; raise a one-line error for an unknown name."""
    _register_builtin()
    if name not in _BACKENDS:
        raise ValueError(f"unknown dynamics backend '{name}'; choose one of: {', '.join(sorted(_BACKENDS))}")
    if num_worlds < 1:
        raise ValueError(f"num_worlds must be at least 1, got {num_worlds}")
    return _BACKENDS[name](robot=robot, num_worlds=num_worlds, device=device, **kwargs)


def _register_builtin() -> None:
    if "mujoco" not in _BACKENDS:
        from functools import partial

        from flashnerd.dynamics.learned import LearnedDynamics
        from flashnerd.sim.mujoco_backend import MujocoDynamics

        register_backend("mujoco", MujocoDynamics, objects=True)
        register_backend("flashnerd", partial(LearnedDynamics, kind="flashnerd"))
        register_backend("nerd", partial(LearnedDynamics, kind="nerd"))
        register_backend("rwm", partial(LearnedDynamics, kind="rwm"))
        register_backend("mjwarp", _make_mjwarp, objects=True)
        register_backend("coupled", partial(_make_coupled, mode="coupled"), objects=True)
        register_backend("oneway", partial(_make_coupled, mode="oneway"), objects=True)


def _make_coupled(**kwargs) -> Dynamics:
    """A learned robot (FlashNeRD by default) inside MuJoCo's solver next to a cube: two-way or one-way coupled."""
    from flashnerd.sim.coupled_backend import CoupledDynamics

    return CoupledDynamics(**kwargs)


def _make_mjwarp(**kwargs) -> Dynamics:
    """MuJoCo Warp is imported on first use: loading Warp costs a second that the other backends should not pay."""
    from flashnerd.sim.mjwarp_backend import MjwarpDynamics

    return MjwarpDynamics(**kwargs)
