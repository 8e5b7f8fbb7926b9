"""The state representation every learned model shares: robot-centric inputs, increment targets, normalizers.

Inputs of a frame (floating base): base height, gravity direction in the base frame, base linear and angular
velocity in the base frame, joint positions and velocities, the control as joint-target error (target - q), and the
fixed-probe contact features. Nothing depends on the base's horizontal position or heading, so one model serves the
whole plane.

Targets are increments over one control step, expressed in the current base frame: position delta, orientation
delta as a rotation vector (composed onto the current quaternion), velocity deltas, joint deltas. `apply` inverts
`increment` exactly (up to float error), which the tests check.
"""

from __future__ import annotations

import torch
from torch import nn

from flashnerd.utils.math import quat_apply, quat_apply_inverse, quat_conjugate, quat_mul


def quat_to_rotvec(q: torch.Tensor) -> torch.Tensor:
    """Rotation vector (..., 3) of unit quaternions (..., 4), using the shorter rotation."""
    q = torch.where(q[..., :1] < 0, -q, q)
    xyz = q[..., 1:]
    s = torch.linalg.norm(xyz, dim=-1, keepdim=True)  # (..., 1) = sin(angle / 2)
    angle = 2.0 * torch.atan2(s, q[..., :1])  # (..., 1)
    scale = torch.where(s > 1e-8, angle / s.clamp_min(1e-12), 2.0 * torch.ones_like(s))
    return xyz * scale


def rotvec_to_quat(v: torch.Tensor) -> torch.Tensor:
    """Unit quaternion (..., 4) of rotation vectors (..., 3)."""
    angle = torch.linalg.norm(v, dim=-1, keepdim=True)  # (..., 1)
    half = 0.5 * angle
    scale = torch.where(angle > 1e-8, torch.sin(half) / angle.clamp_min(1e-12), 0.5 * torch.ones_like(angle))
    return torch.cat((torch.cos(half), v * scale), dim=-1)


class StateRepresentation:
    """Feature and increment maps for a floating-base robot with `nj` joints (qpos: 7 + nj, qvel: 6 + nj)."""

    def __init__(self, num_joints: int, contact_dim: int = 0) -> None:
        self.nj = num_joints
        self.contact_dim = contact_dim
        self.state_dim = 1 + 3 + 3 + 3 + 2 * num_joints  # height, gravity_b, lin_vel_b, ang_vel_b, q, qd
        self.input_dim = self.state_dim + num_joints + contact_dim
        self.target_dim = 12 + 2 * num_joints

    def layout(self) -> dict[str, list[int]]:
        """Named slices of the input vector (saved into datasets and checkpoints)."""
        nj, names, sizes = self.nj, [], []
        for name, size in (("height", 1), ("gravity_b", 3), ("lin_vel_b", 3), ("ang_vel_b", 3), ("joint_pos", nj),
                           ("joint_vel", nj), ("target_error", nj), ("contact", self.contact_dim)):
            names.append(name)
            sizes.append(size)
        out, start = {}, 0
        for name, size in zip(names, sizes):
            out[name] = [start, start + size]
            start += size
        return out

    def state_features(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """Robot-centric state (..., state_dim) from qpos (..., 7 + nj) and qvel (..., 6 + nj)."""
        quat = qpos[..., 3:7]
        gravity = torch.zeros_like(qpos[..., 0:3])
        gravity[..., 2] = -1.0
        return torch.cat((
            qpos[..., 2:3],  # base height
            quat_apply_inverse(quat, gravity),  # (..., 3)
            quat_apply_inverse(quat, qvel[..., 0:3]),  # (..., 3) linear velocity, base frame
            qvel[..., 3:6],  # (..., 3) angular velocity, already in the base frame
            qpos[..., 7:],
            qvel[..., 6:],
        ), dim=-1)

    def inputs(self, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor,
               contact: torch.Tensor | None = None) -> torch.Tensor:
        """One frame's model input (..., input_dim); ctrl are joint position targets (..., nj)."""
        parts = [self.state_features(qpos, qvel), ctrl - qpos[..., 7:]]
        if self.contact_dim:
            parts.append(contact)
        return torch.cat(parts, dim=-1)

    def increment(self, qpos0: torch.Tensor, qvel0: torch.Tensor, qpos1: torch.Tensor,
                  qvel1: torch.Tensor) -> torch.Tensor:
        """Target (..., target_dim) taking state 0 to state 1, in the base frame of state 0."""
        q0, q1 = qpos0[..., 3:7], qpos1[..., 3:7]
        d_pos = quat_apply_inverse(q0, qpos1[..., 0:3] - qpos0[..., 0:3])  # (..., 3)
        d_rot = quat_to_rotvec(quat_mul(quat_conjugate(q0), q1))  # (..., 3) body-frame rotation
        d_lin = quat_apply_inverse(q0, qvel1[..., 0:3] - qvel0[..., 0:3])  # (..., 3)
        d_ang = qvel1[..., 3:6] - qvel0[..., 3:6]  # (..., 3)
        return torch.cat((d_pos, d_rot, d_lin, d_ang, qpos1[..., 7:] - qpos0[..., 7:],
                          qvel1[..., 6:] - qvel0[..., 6:]), dim=-1)

    def apply(self, qpos: torch.Tensor, qvel: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Next (qpos, qvel) from the current state and an increment (inverse of `increment`)."""
        nj, q0 = self.nj, qpos[..., 3:7]
        pos = qpos[..., 0:3] + quat_apply(q0, delta[..., 0:3])
        quat = quat_mul(q0, rotvec_to_quat(delta[..., 3:6]))
        quat = quat / torch.linalg.norm(quat, dim=-1, keepdim=True)
        lin = qvel[..., 0:3] + quat_apply(q0, delta[..., 6:9])
        ang = qvel[..., 3:6] + delta[..., 9:12]
        joints = qpos[..., 7:] + delta[..., 12:12 + nj]
        joint_vel = qvel[..., 6:] + delta[..., 12 + nj:12 + 2 * nj]
        return torch.cat((pos, quat, joints), dim=-1), torch.cat((lin, ang, joint_vel), dim=-1)


class Normalizer(nn.Module):
    """Per-dimension mean/std fitted once on the training set; saved in the checkpoint's state_dict."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.eps = eps

    @torch.no_grad()
    def fit(self, x: torch.Tensor) -> Normalizer:
        """Set mean and std from samples x (..., dim); constant dimensions keep std 1."""
        flat = x.reshape(-1, x.shape[-1]).double()
        self.mean.copy_(flat.mean(0).float())
        std = flat.std(0).float()
        self.std.copy_(torch.where(std > self.eps, std, torch.ones_like(std)))
        return self

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.std + self.mean
