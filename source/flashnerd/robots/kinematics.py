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


def _quat_to_mat(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices (..., 3, 3) of unit quaternions (..., 4), wxyz."""
    w, x, y, z = q.unbind(-1)
    return torch.stack((
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ), dim=-1).unflatten(-1, (3, 3))


def _mat_to_quat(m: torch.Tensor) -> torch.Tensor:
    """Unit quaternions (..., 4), wxyz, of rotation matrices (..., 3, 3): each from the largest of 4 (w, x, y, z)
    candidates (Shepperd's method), so it stays accurate for every rotation."""
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    cands = torch.stack((
        torch.stack((1 + m00 + m11 + m22, m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                     m[..., 1, 0] - m[..., 0, 1]), -1),
        torch.stack((m[..., 2, 1] - m[..., 1, 2], 1 + m00 - m11 - m22, m[..., 0, 1] + m[..., 1, 0],
                     m[..., 0, 2] + m[..., 2, 0]), -1),
        torch.stack((m[..., 0, 2] - m[..., 2, 0], m[..., 0, 1] + m[..., 1, 0], 1 - m00 + m11 - m22,
                     m[..., 1, 2] + m[..., 2, 1]), -1),
        torch.stack((m[..., 1, 0] - m[..., 0, 1], m[..., 0, 2] + m[..., 2, 0], m[..., 1, 2] + m[..., 2, 1],
                     1 - m00 - m11 + m22), -1),
    ), -2)  # (..., 4, 4): row i is 4 q_i q (i = the candidate's dominant component)
    best = torch.stack((1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22),
                       -1).argmax(-1)  # (...,)
    q = cands.gather(-2, best[..., None, None].expand(*best.shape, 1, 4))[..., 0, :]  # (..., 4)
    return q / torch.linalg.norm(q, dim=-1, keepdim=True)


class TorchKinematics:
    """Body poses (N, nbody, 3) and (N, nbody, 4) from qpos (N, nq); body 0 is the world.

    Bodies are processed one tree depth at a time with rotation matrices (ANYmal: 5 batched levels instead of 17
    bodies one by one), which needs every body to carry at most one hinge or slide joint (a free joint only at depth
    1); other trees take the body-by-body quaternion path. `compile=True` runs `forward_mat` and `points` through
    `torch.compile` (the first call of each batch size compiles, seconds; later calls are several times faster).
    """

    def __init__(self, model: mujoco.MjModel, device: torch.device | str = "cpu", compile: bool = False) -> None:
        self.nbody = model.nbody
        self.device = torch.device(device)
        f = dict(dtype=torch.float32, device=self.device)
        self.parent = model.body_parentid.tolist()
        self.body_pos = torch.tensor(model.body_pos, **f)  # (nbody, 3)
        self.body_quat = torch.tensor(model.body_quat, **f)  # (nbody, 4)
        # a hinge or slide joint turns or moves its body by qpos - qpos0 (its `ref`), as mj_kinematics does
        self.joints: list[list[tuple[int, int, torch.Tensor, torch.Tensor, float]]] = []
        for b in range(model.nbody):
            js = []
            for j in range(model.body_jntadr[b], model.body_jntadr[b] + model.body_jntnum[b]):
                adr = int(model.jnt_qposadr[j])
                js.append((int(model.jnt_type[j]), adr, torch.tensor(model.jnt_axis[j], **f),
                           torch.tensor(model.jnt_pos[j], **f), float(model.qpos0[adr])))
            self.joints.append(js)
        self.levels = self._levels()
        if compile:  # a few fused loops instead of ~100 small ops (launch-bound on a CPU); shared by same-shaped calls
            self.forward_mat = torch.compile(self.forward_mat, dynamic=False)
            self.points = torch.compile(self.points, dynamic=False)

    def _levels(self) -> list[dict] | None:
        """Per tree depth: its bodies, their parents' places in the previous depth, and joint data as rotation
        matrices; None if a body below the root has more than one joint, or a free joint sits deeper than depth 1."""
        depth = [0] * self.nbody
        for b in range(1, self.nbody):
            depth[b] = depth[self.parent[b]] + 1
        levels, place = [], {0: 0}
        hinge, slide, free_t = mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE, mujoco.mjtJoint.mjJNT_FREE
        f = dict(dtype=torch.float32, device=self.device)
        for d in range(1, max(depth, default=0) + 1):
            bodies = [b for b in range(self.nbody) if depth[b] == d]
            free = [b for b in bodies if any(j[0] == free_t for j in self.joints[b])]
            other = any(j[0] not in (hinge, slide, free_t) for b in bodies for j in self.joints[b])
            if other or any(len(self.joints[b]) > 1 for b in bodies) or (free and (d > 1 or len(free) > 1)):
                return None
            kind = [self.joints[b][0][0] if self.joints[b] else -1 for b in bodies]
            joint = [self.joints[b][0] if self.joints[b] else (-1, 0, torch.zeros(3, **f), torch.zeros(3, **f), 0.0)
                     for b in bodies]
            axis = torch.stack([j[2] for j in joint])  # (k, 3)
            skew = torch.zeros(len(bodies), 3, 3, **f)  # (k, 3, 3) cross-product matrix of each axis
            skew[:, 0, 1], skew[:, 0, 2], skew[:, 1, 2] = -axis[:, 2], axis[:, 1], -axis[:, 0]
            skew = skew - skew.transpose(1, 2)
            rot, jpos = _quat_to_mat(self.body_quat[bodies]), torch.stack([j[3] for j in joint])  # (k, 3, 3), (k, 3)
            ref = torch.tensor([0.0 if k == free_t else j[4] for k, j in zip(kind, joint)], **f)  # (k,) qpos0
            levels.append({
                "bodies": bodies, "parent": torch.tensor([place[self.parent[b]] for b in bodies], device=self.device),
                "adr": torch.tensor([j[1] for j in joint], device=self.device),
                "ref": ref if bool(ref.any()) else None,  # most robots' are all zero: no subtraction per step
                "pos": self.body_pos[bodies], "rot": rot,
                # a hinge's rotation is I + sin(a) K + (1 - cos(a)) K^2 (Rodrigues, K = skew(axis)); folding the body
                # rotation and the anchor jpos into these constants leaves one matrix product per depth
                "rot_k": rot @ skew, "rot_k2": rot @ skew @ skew,  # (k, 3, 3)
                "rot_k_jpos": (rot @ skew @ jpos[..., None])[..., 0],  # (k, 3)
                "rot_k2_jpos": (rot @ skew @ skew @ jpos[..., None])[..., 0],  # (k, 3)
                "rot_axis": (rot @ axis[..., None])[..., 0],  # (k, 3)
                "free": bodies.index(free[0]) if free else None,
                "free_adr": joint[bodies.index(free[0])][1] if free else None,
                "is_hinge": torch.tensor([k == hinge for k in kind], **f),
                "is_slide": torch.tensor([k == slide for k in kind], **f),
            })
            place.update({b: i for i, b in enumerate(bodies)})
        order = [0] + [b for lv in levels for b in lv["bodies"]]  # bodies in the order `forward_mat` makes them
        self._inverse = torch.empty(self.nbody, dtype=torch.long, device=self.device)
        self._inverse[torch.tensor(order, device=self.device)] = torch.arange(self.nbody, device=self.device)
        return levels

    def forward(self, qpos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """World positions (N, nbody, 3) and orientations (N, nbody, 4) of every body."""
        if self.levels is None:
            return self._forward_bodies(qpos)
        pos, rot = self.forward_mat(qpos)
        return pos, _mat_to_quat(rot)

    def forward_mat(self, qpos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """World positions (N, nbody, 3) and rotation matrices (N, nbody, 3, 3) of every body: one batch of matrix
        products per tree depth (few kernel launches: this runs inside every learned-model step)."""
        if self.levels is None:
            pos, quat = self._forward_bodies(qpos)
            return pos, _quat_to_mat(quat)
        n = qpos.shape[0]
        pos = qpos.new_zeros(n, 1, 3)  # (N, 1, 3) the world
        rot = torch.eye(3, dtype=qpos.dtype, device=qpos.device).expand(n, 1, 3, 3)
        all_pos, all_rot = [pos], [rot]
        for lv in self.levels:
            p_par, r_par = pos[:, lv["parent"]], rot[:, lv["parent"]]  # (N, k, 3), (N, k, 3, 3)
            value = qpos[:, lv["adr"]]  # (N, k) joint coordinate (masked by joint type below)
            if lv["ref"] is not None:
                value = value - lv["ref"]  # (N, k) the displacement from qpos0
            angle = value * lv["is_hinge"]  # (N, k)
            sin, vers = torch.sin(angle)[..., None], (1 - torch.cos(angle))[..., None]  # (N, k, 1)
            # child frame in the parent frame: body rotation, then the hinge about its anchor, or the slide
            local = lv["rot"] + sin[..., None] * lv["rot_k"] + vers[..., None] * lv["rot_k2"]  # (N, k, 3, 3)
            offset = (lv["pos"] - sin * lv["rot_k_jpos"] - vers * lv["rot_k2_jpos"]
                      + (value * lv["is_slide"])[..., None] * lv["rot_axis"])  # (N, k, 3)
            p = p_par + (r_par @ offset[..., None])[..., 0]  # (N, k, 3)
            r = r_par @ local  # (N, k, 3, 3)
            if lv["free"] is not None:  # the floating base: its pose is qpos itself
                i, adr = lv["free"], lv["free_adr"]
                quat = qpos[:, adr + 3:adr + 7] / torch.linalg.norm(qpos[:, adr + 3:adr + 7], dim=-1, keepdim=True)
                p = torch.cat((p[:, :i], qpos[:, None, adr:adr + 3], p[:, i + 1:]), dim=1)
                r = torch.cat((r[:, :i], _quat_to_mat(quat)[:, None], r[:, i + 1:]), dim=1)
            pos, rot = p, r
            all_pos.append(p)
            all_rot.append(r)
        return torch.cat(all_pos, dim=1)[:, self._inverse], torch.cat(all_rot, dim=1)[:, self._inverse]

    def _forward_bodies(self, qpos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` one body at a time (any number of joints per body)."""
        n = qpos.shape[0]
        pos = [torch.zeros(n, 3, dtype=qpos.dtype, device=qpos.device)]
        quat = [torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=qpos.dtype, device=qpos.device).expand(n, 4)]
        for b in range(1, self.nbody):
            p_par, q_par = pos[self.parent[b]], quat[self.parent[b]]
            p = p_par + quat_apply(q_par, self.body_pos[b].expand(n, 3))  # (N, 3)
            q = quat_mul(q_par, self.body_quat[b].expand(n, 4))  # (N, 4)
            for jtype, adr, axis, jpos, ref in self.joints[b]:
                if jtype == mujoco.mjtJoint.mjJNT_FREE:
                    p = qpos[:, adr:adr + 3]
                    q = qpos[:, adr + 3:adr + 7] / torch.linalg.norm(qpos[:, adr + 3:adr + 7], dim=-1, keepdim=True)
                elif jtype == mujoco.mjtJoint.mjJNT_HINGE:
                    anchor = p + quat_apply(q, jpos.expand(n, 3))  # (N, 3) joint anchor stays fixed
                    q = quat_mul(q, _axis_angle_quat(axis, qpos[:, adr] - ref))
                    p = anchor - quat_apply(q, jpos.expand(n, 3))
                elif jtype == mujoco.mjtJoint.mjJNT_SLIDE:
                    p = p + quat_apply(q, axis.expand(n, 3)) * (qpos[:, adr:adr + 1] - ref)
                else:
                    raise ValueError("TorchKinematics supports free, hinge and slide joints only")
            pos.append(p)
            quat.append(q)
        return torch.stack(pos, dim=1), torch.stack(quat, dim=1)

    def points(self, qpos: torch.Tensor, body_ids: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """World positions (N, P, 3) of points given in body frames: body_ids (P,), local (P, 3)."""
        pos, rot = self.forward_mat(qpos)  # (N, nbody, 3), (N, nbody, 3, 3)
        return pos[:, body_ids] + (rot[:, body_ids] @ local[..., None])[..., 0]
