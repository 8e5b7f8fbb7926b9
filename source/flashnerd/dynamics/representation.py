"""The state representation every learned model shares: robot-centric inputs and increment targets.

Inputs of a frame (floating base; a fixed base keeps the joint terms only): base height, gravity direction in the
base frame, base linear and angular velocity in the base frame, joint positions and velocities, the control as
joint-target error (target - q), and the fixed-probe contact features. Nothing depends on the base's horizontal
position or heading, so one model serves the whole plane.

Targets are increments over one control step, expressed in the current base frame: position delta, orientation delta
as a rotation vector (composed onto the current quaternion), velocity deltas, joint deltas. `apply` inverts
`increment` exactly (up to float error), which the tests check.
"""

from __future__ import annotations

import torch

from flashnerd.utils.math import (
    quat_apply,
    quat_apply_inverse,
    quat_conjugate,
    quat_mul,
    quat_to_rotvec,
    rotvec_to_quat,
)

__all__ = ["StateRepresentation", "quat_to_rotvec", "rotvec_to_quat"]


class StateRepresentation:
    """Feature and increment maps of one robot: `nj` joints (hinge/slide, unactuated ones included), `nu` of them
    actuated, on a floating base (qpos: 7 + nj, qvel: 6 + nj) or a fixed one (qpos: nj, qvel: nj).

    A fixed base drops the root terms (height, gravity, base velocities) from the features and the targets. Joints
    listed in `periodic` (unlimited hinges, e.g. a CartPole's pole) enter the model input as sin and cos, not as the
    raw angle, which grows without bound when the pole spins; features and targets keep the continuous angle.
    """

    def __init__(self, num_joints: int, contact_dim: int = 0, floating_base: bool = True,
                 actuated: list[int] | None = None, periodic: list[int] | None = None) -> None:
        self.nj = num_joints
        self.contact_dim = contact_dim
        self.floating_base = floating_base
        self.actuated = list(range(num_joints)) if actuated is None else list(actuated)
        self.periodic = list(periodic or [])
        self.nu = len(self.actuated)
        self.q0, self.v0 = (7, 6) if floating_base else (0, 0)  # where the joints start in qpos / qvel
        self.root_dim = 10 if floating_base else 0  # height (1), gravity_b (3), lin_vel_b (3), ang_vel_b (3)
        self.state_dim = self.root_dim + 2 * num_joints
        self.input_dim = self.state_dim + 2 * len(self.periodic) + self.nu + contact_dim
        self.target_dim = (12 if floating_base else 0) + 2 * num_joints
        self._ctrl_idx = torch.tensor([self.q0 + j for j in self.actuated])  # (nu,) qpos address of each actuator
        self._vel_idx = self._ctrl_idx - self.q0 + self.v0  # (nu,) qvel address of each actuator
        self._periodic_idx = torch.tensor(self.periodic, dtype=torch.long)  # (np,) joint index
        self._on_device: dict[tuple[str, torch.device], torch.Tensor] = {}  # the indices above, copied once per device

    @classmethod
    def for_robot(cls, robot, model, contact_dim: int = 0) -> StateRepresentation:
        """The representation of `robot` compiled into `model` (an `MjModel`): actuated and unlimited-hinge joints
        are read from the model."""
        import mujoco

        q0 = 7 if robot.floating_base else 0
        joints = [j for j in range(model.njnt) if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE]
        qadr = [int(model.jnt_qposadr[j]) - q0 for j in joints]  # joint index = qpos address after the root
        actuated = [qadr[joints.index(int(model.actuator_trnid[a, 0]))] for a in range(model.nu)]
        periodic = [qadr[i] for i, j in enumerate(joints)
                    if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE and not model.jnt_limited[j]]
        return cls(model.nq - q0, contact_dim, robot.floating_base, actuated, periodic)

    def layout(self) -> dict[str, list[int]]:
        """Named slices of the input vector (saved into datasets and checkpoints)."""
        nj = self.nj
        parts = [("height", 1), ("gravity_b", 3), ("lin_vel_b", 3), ("ang_vel_b", 3)] if self.floating_base else []
        parts += [("joint_pos", nj), ("joint_vel", nj)]
        if self.periodic:
            parts.append(("periodic_sin_cos", 2 * len(self.periodic)))
        parts += [("target_error", self.nu), ("contact", self.contact_dim)]
        out, start = {}, 0
        for name, size in parts:
            out[name] = [start, start + size]
            start += size
        return out

    def joint_pos(self, qpos: torch.Tensor) -> torch.Tensor:
        """Joint positions (..., nj) of qpos (..., nq)."""
        return qpos[..., self.q0:]

    def joint_vel(self, qvel: torch.Tensor) -> torch.Tensor:
        """Joint velocities (..., nj) of qvel (..., nv)."""
        return qvel[..., self.v0:]

    def _index(self, name: str, device: torch.device) -> torch.Tensor:
        """The index tensor `name` on `device`, copied there once (a per-step copy to a GPU would wait on it)."""
        key = (name, device)
        if key not in self._on_device:
            with torch.inference_mode(False):  # a normal tensor, whatever mode the first call ran in
                self._on_device[key] = getattr(self, name).to(device)
        return self._on_device[key]

    def actuated_pos(self, qpos: torch.Tensor) -> torch.Tensor:
        """Positions (..., nu) of the actuated joints, in actuator order."""
        return qpos[..., self._index("_ctrl_idx", qpos.device)]

    def actuated_vel(self, qvel: torch.Tensor) -> torch.Tensor:
        """Velocities (..., nu) of the actuated joints, in actuator order."""
        return qvel[..., self._index("_vel_idx", qvel.device)]

    def state_features(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """Robot-centric state (..., state_dim) from qpos (..., nq) and qvel (..., nv)."""
        joints = (self.joint_pos(qpos), self.joint_vel(qvel))
        if not self.floating_base:
            return torch.cat(joints, dim=-1)
        quat = qpos[..., 3:7]
        gravity = torch.zeros_like(qpos[..., 0:3])
        gravity[..., 2] = -1.0
        return torch.cat((
            qpos[..., 2:3],  # base height
            quat_apply_inverse(quat, gravity),  # (..., 3)
            quat_apply_inverse(quat, qvel[..., 0:3]),  # (..., 3) linear velocity, base frame
            qvel[..., 3:6],  # (..., 3) angular velocity, already in the base frame
            *joints,
        ), dim=-1)

    def inputs(self, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor,
               contact: torch.Tensor | None = None) -> torch.Tensor:
        """One frame's model input (..., input_dim); ctrl are joint position targets (..., nu)."""
        parts = [self.state_features(qpos, qvel)]
        if self.periodic:
            periodic = self._index("_periodic_idx", qpos.device)  # (np,)
            angle = self.joint_pos(qpos)[..., periodic]  # (..., np)
            start = self.root_dim + periodic
            parts[0] = parts[0].index_fill(-1, start, 0.0)  # the raw angle is replaced by its sin and cos
            parts.append(torch.cat((torch.sin(angle), torch.cos(angle)), dim=-1))  # (..., 2 np)
        parts.append(ctrl - self.actuated_pos(qpos))  # (..., nu)
        if self.contact_dim:
            parts.append(contact)
        return torch.cat(parts, dim=-1)

    def increment(self, qpos0: torch.Tensor, qvel0: torch.Tensor, qpos1: torch.Tensor,
                  qvel1: torch.Tensor) -> torch.Tensor:
        """Target (..., target_dim) taking state 0 to state 1, in the base frame of state 0."""
        joints = (self.joint_pos(qpos1) - self.joint_pos(qpos0), self.joint_vel(qvel1) - self.joint_vel(qvel0))
        if not self.floating_base:
            return torch.cat(joints, dim=-1)
        q0, q1 = qpos0[..., 3:7], qpos1[..., 3:7]
        d_pos = quat_apply_inverse(q0, qpos1[..., 0:3] - qpos0[..., 0:3])  # (..., 3)
        d_rot = quat_to_rotvec(quat_mul(quat_conjugate(q0), q1))  # (..., 3) body-frame rotation
        d_lin = quat_apply_inverse(q0, qvel1[..., 0:3] - qvel0[..., 0:3])  # (..., 3)
        d_ang = qvel1[..., 3:6] - qvel0[..., 3:6]  # (..., 3)
        return torch.cat((d_pos, d_rot, d_lin, d_ang, *joints), dim=-1)

    def apply(self, qpos: torch.Tensor, qvel: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Next (qpos, qvel) from the current state and an increment (inverse of `increment`)."""
        nj, r = self.nj, self.target_dim - 2 * self.nj
        joints = self.joint_pos(qpos) + delta[..., r:r + nj]
        joint_vel = self.joint_vel(qvel) + delta[..., r + nj:r + 2 * nj]
        if not self.floating_base:
            return joints, joint_vel
        q0 = qpos[..., 3:7]
        pos = qpos[..., 0:3] + quat_apply(q0, delta[..., 0:3])
        quat = quat_mul(q0, rotvec_to_quat(delta[..., 3:6]))
        quat = quat / torch.linalg.norm(quat, dim=-1, keepdim=True)
        lin = qvel[..., 0:3] + quat_apply(q0, delta[..., 6:9])
        ang = qvel[..., 3:6] + delta[..., 9:12]
        return torch.cat((pos, quat, joints), dim=-1), torch.cat((lin, ang, joint_vel), dim=-1)
