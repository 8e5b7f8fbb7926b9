"""Batched forward kinematics in torch, built from an `MjModel` (free, hinge and slide joints).

Learned backends need body poses of *predicted* states (probe points for contact features) without calling MuJoCo;
this reproduces `mj_kinematics` for the joint types the project's robots use.
"""

from __future__ import annotations

import mujoco
import torch

from flashnerd.utils.math import quat_apply, quat_mul


def _axis_angle_quat(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Quaternion of a rotation by angle (N,) about a fixed unit axis (3,). -> (N, 4)."""
    half = 0.5 * angle
    return torch.cat((torch.cos(half)[:, None], torch.sin(half)[:, None] * axis), dim=-1)


class TorchKinematics:
    """Body poses (N, nbody, 3) and (N, nbody, 4) from qpos (N, nq); body 0 is the world."""

    def __init__(self, model: mujoco.MjModel, device: torch.device | str = "cpu") -> None:
        self.nbody = model.nbody
        self.device = torch.device(device)
        f = dict(dtype=torch.float32, device=self.device)
        self.parent = model.body_parentid.tolist()
        self.body_pos = torch.tensor(model.body_pos, **f)  # (nbody, 3)
        self.body_quat = torch.tensor(model.body_quat, **f)  # (nbody, 4)
        self.joints: list[list[tuple[int, int, torch.Tensor, torch.Tensor]]] = []
        for b in range(model.nbody):
            js = []
            for j in range(model.body_jntadr[b], model.body_jntadr[b] + model.body_jntnum[b]):
                js.append((int(model.jnt_type[j]), int(model.jnt_qposadr[j]),
                           torch.tensor(model.jnt_axis[j], **f), torch.tensor(model.jnt_pos[j], **f)))
            self.joints.append(js)

    def forward(self, qpos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """World positions (N, nbody, 3) and orientations (N, nbody, 4) of every body."""
        n = qpos.shape[0]
        pos = [torch.zeros(n, 3, dtype=qpos.dtype, device=qpos.device)]
        quat = [torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=qpos.dtype, device=qpos.device).expand(n, 4)]
        for b in range(1, self.nbody):
            p_par, q_par = pos[self.parent[b]], quat[self.parent[b]]
            p = p_par + quat_apply(q_par, self.body_pos[b].expand(n, 3))  # (N, 3)
            q = quat_mul(q_par, self.body_quat[b].expand(n, 4))  # (N, 4)
            for jtype, adr, axis, jpos in self.joints[b]:
                if jtype == mujoco.mjtJoint.mjJNT_FREE:
                    p = qpos[:, adr:adr + 3]
                    q = qpos[:, adr + 3:adr + 7] / torch.linalg.norm(qpos[:, adr + 3:adr + 7], dim=-1, keepdim=True)
                elif jtype == mujoco.mjtJoint.mjJNT_HINGE:
                    anchor = p + quat_apply(q, jpos.expand(n, 3))  # (N, 3) joint anchor stays fixed
                    q = quat_mul(q, _axis_angle_quat(axis, qpos[:, adr]))
                    p = anchor - quat_apply(q, jpos.expand(n, 3))
                elif jtype == mujoco.mjtJoint.mjJNT_SLIDE:
                    p = p + quat_apply(q, axis.expand(n, 3)) * qpos[:, adr:adr + 1]
                else:
                    raise ValueError("TorchKinematics supports free, hinge and slide joints only")
            pos.append(p)
            quat.append(q)
        return torch.stack(pos, dim=1), torch.stack(quat, dim=1)

    def points(self, qpos: torch.Tensor, body_ids: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """World positions (N, P, 3) of points given in body frames: body_ids (P,), local (P, 3)."""
        pos, quat = self.forward(qpos)  # (N, nbody, 3), (N, nbody, 4)
        return pos[:, body_ids] + quat_apply(quat[:, body_ids], local.expand(qpos.shape[0], -1, -1))
