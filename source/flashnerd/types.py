"""The seam every dynamics backend implements, in a leaf module that every layer may import.

Tasks, recording, planning and evaluation read `RobotState` and call the `Dynamics` methods only, so one task
definition serves every backend, and a policy trained on one backend is evaluated on another by changing one
argument. Scenes with objects next to the robot (a cube in a hand) add the `ObjectDynamics` methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import mujoco
import numpy as np
import torch

from flashnerd.robots.spec import RobotSpec


@dataclass
class RobotState:
    """Batched robot state on the backend's device. Tensors are views refreshed by `step()`; copy to keep them.

    qpos and qvel follow MuJoCo's conventions. Floating base: qpos = [pos_w(3), quat_w(4, wxyz), joints],
    qvel = [lin_vel_w(3), ang_vel_b(3), joint velocities]; fixed base: joints only (the root properties are then
    meaningless). Objects in the scene are not part of it (see `ObjectDynamics.object_state()`).

    `joint_pos`, `joint_vel` and `joint_torque` are the actuated joints in actuator order (the action order): the
    trailing qpos/qvel columns when the MJCF lists its actuators in tree order and has no passive joints, else the
    columns `joint_qpos_ids` / `joint_qvel_ids` (built by `actuated_columns`) name.
    """

    qpos: torch.Tensor  # (N, nq)
    qvel: torch.Tensor  # (N, nv)
    joint_torque: torch.Tensor  # (N, nu) actuator torque applied during the last substep
    contact_force: torch.Tensor  # (N, nb) largest net contact force norm (N) on each contact body over the step
    floating_base: bool = True
    # (N,) spread of a learned ensemble's predictions of the last step, in units of the increments' std (0: the
    # members agree); None where the backend has no ensemble (analytical physics, a single learned model)
    disagreement: torch.Tensor | None = None
    joint_qpos_ids: torch.Tensor | None = None  # (nu,) qpos column of each actuated joint; None: the trailing ones
    joint_qvel_ids: torch.Tensor | None = None  # (nu,) qvel column of each actuated joint; None: the trailing ones

    @property
    def root_pos_w(self) -> torch.Tensor:
        return self.qpos[:, 0:3]

    @property
    def root_quat_w(self) -> torch.Tensor:
        return self.qpos[:, 3:7]

    @property
    def joint_pos(self) -> torch.Tensor:
        """(N, nu) positions of the actuated joints in actuator order (a view when they are the trailing columns)."""
        if self.joint_qpos_ids is not None:
            return self.qpos[:, self.joint_qpos_ids]
        return self.qpos[:, 7:] if self.floating_base else self.qpos

    @property
    def root_lin_vel_w(self) -> torch.Tensor:
        return self.qvel[:, 0:3]

    @property
    def root_ang_vel_b(self) -> torch.Tensor:
        return self.qvel[:, 3:6]

    @property
    def joint_vel(self) -> torch.Tensor:
        """(N, nu) velocities of the actuated joints in actuator order (a view when they are the trailing columns)."""
        if self.joint_qvel_ids is not None:
            return self.qvel[:, self.joint_qvel_ids]
        return self.qvel[:, 6:] if self.floating_base else self.qvel


def actuator_joint_columns(model: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray]:
    """(qpos columns (nu,), qvel columns (nu,)) of the joint each actuator drives, in actuator order."""
    joints = model.actuator_trnid[:, 0]  # (nu,) joint of each actuator
    return model.jnt_qposadr[joints].astype(int), model.jnt_dofadr[joints].astype(int)


def actuated_columns(model: mujoco.MjModel, floating_base: bool, nq: int, nv: int,
                     device: torch.device | str) -> dict[str, torch.Tensor | None]:
    """`RobotState`'s joint_qpos_ids / joint_qvel_ids for a robot of `nq` / `nv` leading columns compiled into `model`:
    each actuated joint's qpos and qvel column in actuator order, or None where those are exactly the columns after
    the root in order (most robots; the properties then return views)."""
    qpos_ids, qvel_ids = actuator_joint_columns(model)
    q0, v0 = (7, 6) if floating_base else (0, 0)
    trailing = lambda ids, start, end: np.array_equal(ids, np.arange(start, end))  # noqa: E731
    return {"joint_qpos_ids": None if trailing(qpos_ids, q0, nq) else torch.as_tensor(qpos_ids, device=device),
            "joint_qvel_ids": None if trailing(qvel_ids, v0, nv) else torch.as_tensor(qvel_ids, device=device)}


@runtime_checkable
class Dynamics(Protocol):
    """Batched robot dynamics over `num_worlds` independent worlds: the whole contract callers may rely on.

    `step(ctrl)` advances every world by `control_dt` seconds under joint position targets `ctrl` (N, nu).
    `reset(world_ids, qpos, qvel)` writes those worlds' state and clears their history (learned backends keep one);
    `set_qvel(world_ids, qvel)` changes velocities without clearing history (pushes). `scene` is the compiled MuJoCo
    scene the worlds live in (robot, terrain and objects; a learned backend detects its contacts against it), and
    `nq`, `nv`, `nu` are its sizes (with objects, `state()` reports the robot's leading columns only).
    """

    robot: RobotSpec
    num_worlds: int
    control_dt: float
    device: torch.device
    scene: mujoco.MjModel
    nq: int
    nv: int
    nu: int

    def default_qpos(self) -> np.ndarray:
        """The robot's standing configuration (nq_robot,): what a world starts from."""
        ...

    def reset(self, world_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None: ...

    def set_qvel(self, world_ids: torch.Tensor, qvel: torch.Tensor) -> None: ...

    def step(self, ctrl: torch.Tensor) -> None: ...

    def state(self) -> RobotState: ...

    def close(self) -> None:
        """Release threads, graphs and other resources; the backend is not used afterwards."""
        ...


@runtime_checkable
class ObjectDynamics(Dynamics, Protocol):
    """A backend that simulates objects next to the robot (its registry entry says `objects=True`)."""

    def object_state(self) -> torch.Tensor:
        """The first object's pose and velocity (N, 13): position, quaternion wxyz, linear and angular velocity."""
        ...

    def reset_objects(self, world_ids: torch.Tensor, pose: torch.Tensor, vel: torch.Tensor) -> None:
        """Place the first object of `world_ids` (k,) at pose (k, 7) with velocity (k, 6)."""
        ...
