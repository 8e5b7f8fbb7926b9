"""Variable contact rows: every place where the robot's collision spheres come near the scene, from (predicted) states,
in torch, batched over worlds — what FlashNeRD's contact encoder reads instead of NeRD's fixed ground probes.

Robot side: the robot's contact spheres (its `RobotSpec.probes`; ANYmal's four feet are exactly its MJCF foot
spheres). Scene side: the ground plane and every static box geom of the compiled scene (platforms, steps, ramps; see
`sim/terrain.py`). Sphere-plane and sphere-box distances are exact (the tests compare them with MuJoCo's collision
pipeline). Every (sphere, scene geom) pair closer than `cutoff` is one row:

    body one-hot (nb) | point on the scene surface, root frame (3) | normal from the scene to the robot, root frame (3)
    | signed distance (1) | velocity of the sphere relative to the scene, root frame (3) | other side dynamic (1)

Lengths, distances and velocities are divided by fixed scales (`POINT_SCALE`, `DISTANCE_SCALE`, `VELOCITY_SCALE`) so
that row features are O(1) without per-slot statistics (which would break permutation invariance). Rows are sorted
nearest first and cut at `max_rows`; the number cut is the overflow. The packed form for a model's frame vector is
(N, R * (F + 1)): each row followed by its mask bit; empty rows are all zero.

Shapes: N worlds, P spheres, G scene geoms (ground plane first, then boxes), K = P * G candidate pairs, R rows,
F row features.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import torch

from flashnerd.contacts.probes import probe_spheres
from flashnerd.robots import RobotSpec
from flashnerd.robots.kinematics import TorchKinematics
from flashnerd.utils.math import quat_apply_inverse, quat_mul, rotvec_to_quat

POINT_SCALE = 0.5  # m
DISTANCE_SCALE = 0.05  # m
VELOCITY_SCALE = 1.0  # m/s
_FD_EPS = 1e-3  # s: finite-difference step of the sphere velocities


@dataclass
class ContactRows:
    """Rows (N, R, F), mask (N, R) bool, overflow (N,) long: rows beyond `max_rows` that were dropped."""

    rows: torch.Tensor
    mask: torch.Tensor
    overflow: torch.Tensor

    def packed(self) -> torch.Tensor:
        """(N, R * (F + 1)): each row followed by its mask bit."""
        n = self.rows.shape[0]
        return torch.cat((self.rows, self.mask[..., None].to(self.rows)), dim=-1).reshape(n, -1)


def unpack_rows(packed: torch.Tensor, max_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of `ContactRows.packed` over any leading dims: (..., R * (F + 1)) -> rows (..., R, F), mask (..., R)."""
    rows = packed.unflatten(-1, (max_rows, -1))  # (..., R, F+1)
    return rows[..., :-1], rows[..., -1] > 0.5


class ContactRowDetector:
    """Contact rows of a floating-base robot against the ground plane and the static boxes of `model`'s world body."""

    def __init__(self, robot: RobotSpec, model: mujoco.MjModel, device: torch.device | str = "cpu",
                 max_rows: int = 16, cutoff: float = 0.08, compile: bool = False) -> None:
        self.body_ids, self.local, self.radius = probe_spheres(robot, model, device)  # (P,), (P, 3), (P,)
        dev = torch.device(device)
        f = dict(dtype=torch.float32, device=dev)
        self.kin = TorchKinematics(model, dev)  # compiled below as part of the sphere motion
        bodies = list(dict.fromkeys(p.body for p in robot.probes))
        self.body_onehot = torch.eye(len(bodies), **f)[[bodies.index(p.body) for p in robot.probes]]  # (P, nb)
        world_boxes = [g for g in range(model.ngeom) if model.geom_bodyid[g] == 0
                       and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX]
        self.box_center = torch.tensor(model.geom_pos[world_boxes], **f).reshape(-1, 3)  # (B, 3)
        rot = torch.zeros(len(world_boxes), 9, dtype=torch.float64)
        for i, g in enumerate(world_boxes):
            mujoco.mju_quat2Mat(rot[i].numpy(), model.geom_quat[g])
        self.box_rot = rot.reshape(-1, 3, 3).to(**f)  # (B, 3, 3) box frame -> world
        self.box_half = torch.tensor(model.geom_size[world_boxes], **f).reshape(-1, 3)  # (B, 3)
        self.box_reach = (self.box_rot.abs() @ self.box_half[..., None])[..., 0]  # (B, 3) world-aligned half extents
        self.num_probes, self.num_geoms = len(robot.probes), 1 + len(world_boxes)
        self.max_rows, self.cutoff = max_rows, cutoff
        self.row_dim = len(bodies) + 11  # F
        self.dim = max_rows * (self.row_dim + 1)  # packed width
        # torch.compile fuses the many small per-row ops (launch-bound on a CPU) around the one data-dependent step,
        # the choice of boxes near the batch; compiled code is shared by every detector of the same shapes
        self._motion, self._rows = self._centers_and_velocity, self._rows_of
        if compile:
            self._motion = torch.compile(self._motion, dynamic=False)
            self._rows = torch.compile(self._rows, dynamic=False)

    # --- geometry -------------------------------------------------------------------------------------------------
    def _sphere_centers(self, qpos: torch.Tensor) -> torch.Tensor:
        return self.kin.points(qpos, self.body_ids, self.local)  # (N, P, 3)

    def _near_boxes(self, centers: torch.Tensor) -> torch.Tensor | None:
        """Indices of the boxes whose world bounding box comes within the cutoff of the bounding box of all spheres
        of the batch, or None when that is every box. A box left out is farther than the cutoff from every sphere, so
        it adds no row: planning batches (all samples around one robot) skip the rest of the terrain."""
        if len(self.box_center) == 0:
            return None
        grow = self.radius.max() + self.cutoff
        lo, hi = centers.amin(dim=(0, 1)) - grow, centers.amax(dim=(0, 1)) + grow  # (3,) x2
        near = ((self.box_center - self.box_reach <= hi) & (self.box_center + self.box_reach >= lo)).all(dim=1)  # (B,)
        return None if bool(near.all()) else near.nonzero()[:, 0]

    def _pairs(self, centers: torch.Tensor,
               boxes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Signed distance (N, P, G), surface point (N, P, G, 3) and unit normal (N, P, G, 3) of every sphere-geom
        pair, in the world frame; geom 0 is the ground plane z = 0, then every box (or only `boxes`, indices)."""
        n, p = centers.shape[:2]
        box_center, box_rot, half = self.box_center, self.box_rot, self.box_half  # (B, 3), (B, 3, 3), (B, 3)
        if boxes is not None:
            box_center, box_rot, half = box_center[boxes], box_rot[boxes], half[boxes]
        # ground plane
        g_point = centers.clone()
        g_point[..., 2] = 0.0  # (N, P, 3)
        g_normal = torch.zeros_like(centers)
        g_normal[..., 2] = 1.0
        g_dist = centers[..., 2]  # (N, P) center distance
        # boxes, in each box's frame: local = R^T (c - center)
        rel = centers[:, :, None] - box_center  # (N, P, B, 3)
        local = torch.einsum("npbi,bij->npbj", rel, box_rot)  # (N, P, B, 3)
        clamped = torch.maximum(torch.minimum(local, half), -half)  # (N, P, B, 3) nearest point of a solid box
        diff = local - clamped
        out_dist = torch.linalg.norm(diff, dim=-1)  # (N, P, B); 0 inside
        inside = out_dist < 1e-9
        # inside: the nearest face
        face_gap = half - local.abs()  # (N, P, B, 3) distance to the face pair along each axis
        axis = face_gap.argmin(dim=-1, keepdim=True)  # (N, P, B, 1)
        in_dist = -face_gap.gather(-1, axis)[..., 0]  # (N, P, B) negative
        sign = torch.where(local.gather(-1, axis) >= 0, 1.0, -1.0)  # (N, P, B, 1)
        in_normal = torch.zeros_like(local).scatter_(-1, axis, sign)  # (N, P, B, 3)
        in_point = local.scatter(-1, axis, sign * half.expand_as(local).gather(-1, axis))
        normal_l = torch.where(inside[..., None], in_normal, diff / out_dist.clamp_min(1e-9)[..., None])
        point_l = torch.where(inside[..., None], in_point, clamped)
        b_dist = torch.where(inside, in_dist, out_dist)  # (N, P, B) signed distance of the center
        b_normal = torch.einsum("bij,npbj->npbi", box_rot, normal_l)  # (N, P, B, 3) world
        b_point = torch.einsum("bij,npbj->npbi", box_rot, point_l) + box_center
        dist = torch.cat((g_dist[..., None], b_dist), dim=2) - self.radius[:, None]  # (N, P, G) sphere surface
        point = torch.cat((g_point[:, :, None], b_point), dim=2)  # (N, P, G, 3)
        normal = torch.cat((g_normal[:, :, None], b_normal), dim=2)  # (N, P, G, 3)
        return dist, point, normal

    def signed_distance(self, qpos: torch.Tensor) -> torch.Tensor:
        """Signed distance (N, P) of every sphere to the nearest scene surface (negative = penetration)."""
        return self._pairs(self._sphere_centers(qpos))[0].amin(dim=2)

    def _advance(self, qpos: torch.Tensor, qvel: torch.Tensor, dt: float) -> torch.Tensor:
        """qpos after moving at qvel for dt (free base: world linear, body angular velocity)."""
        out = qpos.clone()
        out[:, 0:3] += dt * qvel[:, 0:3]
        out[:, 3:7] = quat_mul(qpos[:, 3:7], rotvec_to_quat(dt * qvel[:, 3:6]))
        out[:, 7:] += dt * qvel[:, 6:]
        return out

    # --- rows -----------------------------------------------------------------------------------------------------
    def detect(self, qpos: torch.Tensor, qvel: torch.Tensor) -> ContactRows:
        """Contact rows of N worlds from qpos (N, nq) and qvel (N, nv)."""
        return self._detect(qpos, qvel)[0]

    def features_and_distance(self, qpos: torch.Tensor, qvel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Packed rows (N, R * (F + 1)) and each sphere's signed distance to the nearest surface (N, P), one pass;
        a distance beyond the cutoff may be to a farther surface than the nearest (only boxes near the batch count)."""
        rows, dist = self._detect(qpos, qvel)
        return rows.packed(), dist

    def _centers_and_velocity(self, qpos: torch.Tensor, qvel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sphere centers (N, P, 3) and their velocities (N, P, 3), by finite differences along qvel (one FK pass)."""
        n = qpos.shape[0]
        both = self._sphere_centers(torch.cat((qpos, self._advance(qpos, qvel, _FD_EPS))))  # (2N, P, 3)
        return both[:n], (both[n:] - both[:n]) / _FD_EPS

    def _detect(self, qpos: torch.Tensor, qvel: torch.Tensor) -> tuple[ContactRows, torch.Tensor]:
        centers, velocity = self._motion(qpos, qvel)  # (N, P, 3) x2
        rows, mask, overflow, nearest = self._rows(qpos, centers, velocity, self._near_boxes(centers))
        return ContactRows(rows, mask, overflow), nearest

    def _rows_of(self, qpos: torch.Tensor, centers: torch.Tensor, velocity: torch.Tensor,
                 boxes: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows (N, R, F), mask (N, R), overflow (N,) and each sphere's nearest distance (N, P) from sphere centers and
        velocities (N, P, 3) against the ground and `boxes` (indices; None = all)."""
        n, R, P = qpos.shape[0], self.max_rows, self.num_probes
        dist, point, normal = self._pairs(centers, boxes)  # (N, P, G), (N, P, G, 3) x2
        G = dist.shape[2]  # the ground and the boxes near the batch
        nearest = dist.amin(dim=2)  # (N, P)
        dist, point, normal = dist.reshape(n, P * G), point.reshape(n, P * G, 3), normal.reshape(n, P * G, 3)
        near = dist < self.cutoff  # (N, K)
        k = min(R, P * G)
        key = torch.where(near, dist, torch.full_like(dist, float("inf")))
        order = torch.topk(key, k, dim=1, largest=False).indices  # (N, k) nearest first
        mask = near.gather(1, order)  # (N, k)
        sphere = order // G  # (N, k) which sphere
        take = lambda t: t.gather(1, order[..., None].expand(-1, -1, 3))  # noqa: E731  (N, K, 3) -> (N, k, 3)
        root_pos, root_quat = qpos[:, None, 0:3], qpos[:, None, 3:7].expand(n, k, 4)
        point_b = quat_apply_inverse(root_quat, take(point) - root_pos) / POINT_SCALE  # (N, k, 3)
        normal_b = quat_apply_inverse(root_quat, take(normal))  # (N, k, 3)
        vel_b = quat_apply_inverse(root_quat, velocity.gather(1, sphere[..., None].expand(-1, -1, 3))) / VELOCITY_SCALE
        rows = torch.cat((
            self.body_onehot[sphere],  # (N, k, nb)
            point_b, normal_b,
            dist.gather(1, order)[..., None] / DISTANCE_SCALE,  # (N, k, 1)
            vel_b,
            torch.zeros(n, k, 1, device=qpos.device),  # the scene's boxes and plane are static
        ), dim=-1) * mask[..., None]  # (N, k, F); empty rows all zero
        if k < R:
            rows = torch.cat((rows, rows.new_zeros(n, R - k, rows.shape[-1])), dim=1)
            mask = torch.cat((mask, mask.new_zeros(n, R - k)), dim=1)
        overflow = (near.sum(dim=1) - R).clamp_min(0)  # (N,)
        return rows, mask, overflow, nearest

    def __call__(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """Packed rows (N, R * (F + 1)) for a model's frame vector."""
        return self.detect(qpos, qvel).packed()
