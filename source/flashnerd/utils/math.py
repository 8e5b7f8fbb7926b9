"""Batched quaternion and frame math on torch tensors. Quaternions are (w, x, y, z), as in MuJoCo."""

from __future__ import annotations

import math

import torch


def quat_mul(q1: torch.Tensor, q2: torch.Tensor) -> torch.Tensor:
    """Hamilton product q1 * q2. (..., 4) x (..., 4) -> (..., 4)."""
    w1, x1, y1, z1 = q1.unbind(-1)
    w2, x2, y2, z2 = q2.unbind(-1)
    return torch.stack(
        (
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ),
        dim=-1,
    )


def quat_conjugate(q: torch.Tensor) -> torch.Tensor:
    """Inverse of a unit quaternion. (..., 4) -> (..., 4)."""
    return torch.cat((q[..., :1], -q[..., 1:]), dim=-1)


def quat_apply(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors v by unit quaternions q. (..., 4), (..., 3) -> (..., 3)."""
    w = q[..., :1]  # (..., 1)
    xyz = q[..., 1:]  # (..., 3)
    t = 2.0 * torch.linalg.cross(xyz, v, dim=-1)  # (..., 3)
    return v + w * t + torch.linalg.cross(xyz, t, dim=-1)


def quat_apply_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors v by the inverse of unit quaternions q (world -> body frame). (..., 4), (..., 3) -> (..., 3)."""
    return quat_apply(quat_conjugate(q), v)


def quat_from_euler_xyz(roll: torch.Tensor, pitch: torch.Tensor, yaw: torch.Tensor) -> torch.Tensor:
    """Quaternion of the intrinsic z-y-x rotation (yaw, then pitch, then roll). (...,) x3 -> (..., 4)."""
    cr, sr = torch.cos(roll * 0.5), torch.sin(roll * 0.5)
    cp, sp = torch.cos(pitch * 0.5), torch.sin(pitch * 0.5)
    cy, sy = torch.cos(yaw * 0.5), torch.sin(yaw * 0.5)
    return torch.stack(
        (
            cr * cp * cy + sr * sp * sy,
            sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy,
        ),
        dim=-1,
    )


def yaw_from_quat(q: torch.Tensor) -> torch.Tensor:
    """Heading angle (rotation about world z) of unit quaternions. (..., 4) -> (...,)."""
    w, x, y, z = q.unbind(-1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def wrap_to_pi(angle: torch.Tensor) -> torch.Tensor:
    """Wrap angles to [-pi, pi)."""
    return torch.remainder(angle + math.pi, 2.0 * math.pi) - math.pi


def random_quat(n: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu") -> torch.Tensor:
    """Uniformly distributed unit quaternions (n, 4), wxyz with w >= 0 (normalized 4-D Gaussians)."""
    q = torch.randn(n, 4, generator=generator, device=device)
    q = q / torch.linalg.norm(q, dim=-1, keepdim=True)
    return torch.where(q[:, :1] < 0, -q, q)


def quat_rotation_angle(q1: torch.Tensor, q2: torch.Tensor) -> torch.Tensor:
    """Angle (...) of the rotation between orientations q1 and q2 (..., 4): 2 asin(|vec(q1 q2^-1)|), in [0, pi]."""
    vec = quat_mul(q1, quat_conjugate(q2))[..., 1:]
    return 2.0 * torch.asin(torch.linalg.norm(vec, dim=-1).clamp(max=1.0))


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
