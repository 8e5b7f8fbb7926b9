"""Variable contact rows: every place where the robot's collision spheres come near the scene, from (predicted) states,
in torch, batched over worlds — what FlashNeRD's contact encoder reads instead of NeRD's fixed ground probes.

Robot side: the robot's contact probes (its `RobotSpec.probes`): spheres (ANYmal's four feet are exactly its MJCF
foot spheres) and capsules (a robot's collision capsules, robots/spec_file.py). Scene side: the ground plane and every
static box geom of the compiled scene (platforms, steps, ramps; see `sim/terrain.py`). Sphere-plane, sphere-box,
capsule-plane and capsule-box distances are exact (the tests compare them with MuJoCo's collision pipeline): a
capsule meets a plane at a segment end, and a box where the box's signed distance along the segment is least (a
convex function, found by golden-section search). Every (probe, scene geom) pair closer than `cutoff` is one row:

    body one-hot (nb) | point on the scene surface, root frame (3) | normal from the scene to the robot, root frame (3)
    | signed distance (1) | velocity of the sphere relative to the scene, root frame (3) | other side dynamic (1)

Lengths, distances and velocities are divided by fixed scales (`POINT_SCALE`, `DISTANCE_SCALE`, `VELOCITY_SCALE`) so
that row features are O(1) without per-slot statistics (which would break permutation invariance). Rows are sorted
nearest first and cut at `max_rows`; the number cut is the overflow. The packed form for a model's frame vector is
(N, R * (F + 1)): each row followed by its mask bit; empty rows are all zero.

Shapes: N worlds, P probes, E segment ends per probe (1 when every probe is a sphere, else 2), G scene geoms (ground
plane first, then boxes), K = P * G candidate pairs, R rows, F row features.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import torch

from flashnerd.contacts.probes import probe_segment_ends, probe_spheres, segment_ends
from flashnerd.robots import RobotSpec
from flashnerd.robots.kinematics import TorchKinematics
from flashnerd.sim.heightfield import HeightField, HeightMap, read_heightfield
from flashnerd.utils.math import quat_apply_inverse, quat_mul, rotvec_to_quat

POINT_SCALE = 0.5  # m
DISTANCE_SCALE = 0.05  # m
VELOCITY_SCALE = 1.0  # m/s
_FD_EPS = 1e-3  # s: finite-difference step of the sphere velocities
_GOLDEN = (5**0.5 - 1) / 2
_GOLDEN_STEPS = 40  # golden-section steps along a capsule's segment: the bracket shrinks to 0.618^40 = 4e-9 of it
_SEGMENT_SAMPLES = 9  # points along a capsule's segment that find its deepest point below a heightfield


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
        self.local_to = probe_segment_ends(robot, device)  # (P, 3) capsule ends, or None: spheres only
        dev = torch.device(device)
        f = dict(dtype=torch.float32, device=dev)
        self.kin = TorchKinematics(model, dev)  # compiled below as part of the sphere motion
        bodies = list(dict.fromkeys(p.body for p in robot.probes))
        self.body_onehot = torch.eye(len(bodies), **f)[[bodies.index(p.body) for p in robot.probes]]  # (P, nb)
        world_boxes = [g for g in range(model.ngeom) if model.geom_bodyid[g] == 0  # visual boxes collide with nothing
                       and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX
                       and (model.geom_contype[g] or model.geom_conaffinity[g])]
        self.box_center = torch.tensor(model.geom_pos[world_boxes], **f).reshape(-1, 3)  # (B, 3)
        rot = torch.zeros(len(world_boxes), 9, dtype=torch.float64)
        for i, g in enumerate(world_boxes):
            mujoco.mju_quat2Mat(rot[i].numpy(), model.geom_quat[g])
        self.box_rot = rot.reshape(-1, 3, 3).to(**f)  # (B, 3, 3) box frame -> world
        self.box_half = torch.tensor(model.geom_size[world_boxes], **f).reshape(-1, 3)  # (B, 3)
        self.box_reach = (self.box_rot.abs() @ self.box_half[..., None])[..., 0]  # (B, 3) world-aligned half extents
        self.field = read_heightfield(model)  # the scene's heightfield (the `rough` terrain), or None
        if self.field is not None:
            self._search_field(self.field, cutoff)
        self.num_probes, self.num_geoms = len(robot.probes), 1 + len(world_boxes) + (self.field is not None)
        self.max_rows, self.cutoff = max_rows, cutoff
        self.row_dim = len(bodies) + 11  # F
        self.dim = max_rows * (self.row_dim + 1)  # packed width
        # torch.compile fuses the many small per-row ops (launch-bound on a CPU) around the one data-dependent step,
        # the choice of boxes near the batch; compiled code is shared by every detector of the same shapes
        self._motion, self._rows = self._centers_and_velocity, self._rows_of
        if compile:
            self._motion = torch.compile(self._motion, dynamic=False)
            self._rows = torch.compile(self._rows, dynamic=False)

    def _search_field(self, field: HeightField, cutoff: float) -> None:
        """Tables and window sizes of the search of `field` (the scene's heightfield) for rows within `cutoff`."""
        dev = self.radius.device
        self.field = field
        self.field_map = HeightMap(field, dev, outside=float("-inf"))
        self.field_heights = self.field_map.table  # (nrow, ncol)
        half_len = 0.0 if self.local_to is None else float((self.local_to - self.local).norm(dim=-1).max()) / 2
        # every surface point within the cutoff of a sphere (or of a segment) lies within `field_reach`, horizontally,
        # of its center (the segment's middle): in a window of w cells per axis from the cell that holds the center
        # minus the reach (a span of 2 * reach meets at most floor(2 * reach / cell) + 2 cells)
        self.field_reach = half_len + float(self.radius.max()) + cutoff
        nrow, ncol = self.field_heights.shape
        w = math.floor(2 * self.field_reach / field.cell) + 2  # per axis, at most the grid's cells
        self.field_rows = torch.arange(min(w, nrow - 1) + 1, device=dev)  # (wr + 1,) grid points from the corner
        self.field_cols = torch.arange(min(w, ncol - 1) + 1, device=dev)  # (wc + 1,)
        # the highest grid point within the reach of any point of each cell (a cell's corners, dilated by the cells
        # the reach spans): a point farther than the reach above it has no surface within the reach
        k = math.ceil(self.field_reach / field.cell)
        padded = torch.nn.functional.pad(self.field_heights[None, None], (k, k + 1, k, k + 1), value=-math.inf)
        self.field_top = torch.nn.functional.max_pool2d(padded, 2 * k + 2, stride=1)[0, 0]  # (nrow, ncol)

    # --- geometry -------------------------------------------------------------------------------------------------
    def _ends(self, qpos: torch.Tensor) -> torch.Tensor:
        """World positions (N, P, E, 3) of the probes' segment ends (E = 1: the sphere centers)."""
        return segment_ends(self.kin, qpos, self.body_ids, self.local, self.local_to)

    def _near_boxes(self, centers: torch.Tensor) -> torch.Tensor | None:
        """Indices of the boxes whose world bounding box comes within the cutoff of the bounding box of all spheres
        of the batch, or None when that is every box. A box left out is farther than the cutoff from every sphere, so
        it adds no row: planning batches (all samples around one robot) skip the rest of the terrain."""
        if len(self.box_center) == 0:
            return None
        grow = self.radius.max() + self.cutoff
        centers = centers.reshape(-1, 3)  # every segment end: their bounding box holds every segment
        lo, hi = centers.amin(dim=0) - grow, centers.amax(dim=0) + grow  # (3,) x2
        near = ((self.box_center - self.box_reach <= hi) & (self.box_center + self.box_reach >= lo)).all(dim=1)  # (B,)
        return None if bool(near.all()) else near.nonzero()[:, 0]

    def _pairs(self, ends: torch.Tensor, boxes: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Signed distance (N, P, G), surface point (N, P, G, 3), unit normal (N, P, G, 3) of every probe-geom pair,
        in the world frame, and where along each capsule's segment the pair is nearest (N, P, G; None for spheres);
        geom 0 is the ground plane z = 0, then every box (or only `boxes`, indices). `ends`: (N, P, E, 3)."""
        box_center, box_rot, half = self.box_center, self.box_rot, self.box_half  # (B, 3), (B, 3, 3), (B, 3)
        if boxes is not None:
            box_center, box_rot, half = box_center[boxes], box_rot[boxes], half[boxes]
        if ends.shape[2] == 1:  # spheres: one center for every geom
            centers, t = ends[:, :, 0], None  # (N, P, 3)
            box_centers = centers[:, :, None]  # (N, P, 1, 3)
        else:  # capsules: each geom's nearest point of the segment is the center of the sphere that meets it
            a, b = ends[:, :, 0], ends[:, :, 1]  # (N, P, 3) x2
            t_ground = (b[..., 2] < a[..., 2]).to(a.dtype)  # (N, P) the lower end
            centers = a + t_ground[..., None] * (b - a)  # (N, P, 3)
            t_box = _segment_box_nearest(a, b, box_center, box_rot, half)  # (N, P, B)
            box_centers = a[:, :, None] + t_box[..., None] * (b - a)[:, :, None]  # (N, P, B, 3)
            t = torch.cat((t_ground[..., None], t_box), dim=2)  # (N, P, G)
        # ground plane
        g_point = centers.clone()
        g_point[..., 2] = 0.0  # (N, P, 3)
        g_normal = torch.zeros_like(centers)
        g_normal[..., 2] = 1.0
        g_dist = centers[..., 2]  # (N, P) center distance
        # boxes, in each box's frame: local = R^T (c - center)
        rel = box_centers - box_center  # (N, P, B, 3)
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
        dists, points, normals = [g_dist[..., None], b_dist], [g_point[:, :, None], b_point], [g_normal[:, :, None],
                                                                                               b_normal]
        if self.field is not None:
            if t is None:
                f_dist, f_point, f_normal = self._field_pairs(centers)  # (N, P), (N, P, 3) x2
            else:
                f_dist, f_point, f_normal, f_t = self._field_segment_pairs(ends[:, :, 0], ends[:, :, 1])
                t = torch.cat((t, f_t[..., None]), dim=2)
            dists.append(f_dist[..., None])
            points.append(f_point[:, :, None])
            normals.append(f_normal[:, :, None])
        dist = torch.cat(dists, dim=2) - self.radius[:, None]  # (N, P, G) sphere surface
        point = torch.cat(points, dim=2)  # (N, P, G, 3)
        normal = torch.cat(normals, dim=2)  # (N, P, G, 3)
        return dist, point, normal, t

    def _field_window(self, ax: torch.Tensor, ay: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The window of grid points around anchors at x `ax`, y `ay` (...): row (wr + 1, ...) and column (wc + 1, ...)
        indices and their y and x coordinates; the window lies inside the grid (moved in at its borders, which keeps
        every cell within the reach that the grid has)."""
        f, shape = self.field, (-1, *(1,) * ax.dim())
        rows, cols = self.field_rows.view(shape), self.field_cols.view(shape)  # (wr + 1, 1...), (wc + 1, 1...)
        nrow, ncol = self.field_heights.shape
        r0 = torch.floor((ay - self.field_reach - f.y0) / f.cell).long().clamp(0, nrow - len(rows))  # (...)
        c0 = torch.floor((ax - self.field_reach - f.x0) / f.cell).long().clamp(0, ncol - len(cols))
        rows, cols = r0 + rows, c0 + cols  # (wr + 1, ...), (wc + 1, ...)
        return rows, cols, f.y0 + rows * f.cell, f.x0 + cols * f.cell

    def _window_heights(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Heights (wr + 1, wc + 1, ...) [row, column] of a window's grid points (rows (wr + 1, ...), cols
        (wc + 1, ...)); one gather."""
        flat = rows[:, None] * self.field_heights.shape[1] + cols[None, :]  # (wr + 1, wc + 1, ...)
        return self.field_heights.view(-1)[flat]

    def _field_triangles(self, anchor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Corners (N, P, T, 3) x3 of the heightfield's triangles in the window of cells around points (N, P, 3):
        per cell (v00, v01, v11) and (v00, v11, v10), MuJoCo's split."""
        rows, cols, y, x = self._field_window(anchor[..., 0], anchor[..., 1])  # (wr + 1, N, P), (wc + 1, N, P) x2
        h = self._window_heights(rows, cols).movedim((0, 1), (-2, -1))  # (N, P, wr + 1, wc + 1)
        y, x = y.movedim(0, -1), x.movedim(0, -1)  # (N, P, wr + 1), (N, P, wc + 1)
        shape = h.shape[:-2] + (h.shape[-2] - 1, h.shape[-1] - 1)  # (N, P, wr, wc)

        def corner(dr: int, dc: int) -> torch.Tensor:  # (N, P, wr * wc, 3)
            xs, ys = x[..., None, dc:dc + shape[-1]], y[..., dr:dr + shape[-2], None]
            zs = h[..., dr:dr + shape[-2], dc:dc + shape[-1]]
            return torch.stack((xs.expand(shape), ys.expand(shape), zs), dim=-1).flatten(-3, -2)

        v00, v01, v11, v10 = corner(0, 0), corner(0, 1), corner(1, 1), corner(1, 0)
        return torch.cat((v00, v00), dim=2), torch.cat((v01, v11), dim=2), torch.cat((v11, v10), dim=2)

    def _field_nearest(self, points: torch.Tensor, anchor: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Signed distance (N, P), nearest surface point (N, P, 3) and unit normal (N, P, 3) of points (N, P, 3) to
        the heightfield's triangles in the window around `anchor` (default: the points); negative below the surface.

        Exact within `field_reach`; beyond it no value is exact. A point higher than the reach above every grid point
        within its reach (most of a robot's body, most of the time) has no surface within the reach and gets its
        height above those points (a lower bound of its distance to the surface within the reach, not to all of
        it), the point below it at their top height and an upward normal: on the CPU it skips the search (a GPU,
        and a compiled graph, search every point, with no host sync; their values beyond the reach differ)."""
        lead = points.shape[:-1]
        flat = points.reshape(-1, 3)  # (M, 3)
        f = self.field
        nrow, ncol = self.field_top.shape
        r = torch.floor((flat[:, 1] - f.y0) / f.cell).long().clamp(0, nrow - 1)  # (M,)
        c = torch.floor((flat[:, 0] - f.x0) / f.cell).long().clamp(0, ncol - 1)
        top = self.field_top.view(-1)[r * ncol + c]  # (M,)
        above = flat[:, 2] - top  # (M,) a lower bound of the distance to the surface within the reach
        anchor = flat if anchor is None else anchor.reshape(-1, 3)
        if flat.device.type == "cpu" and not torch.compiler.is_compiling():
            near = (above <= self.field_reach).nonzero()[:, 0]  # (M',) reading the count is no device sync here
            if len(near) < len(flat):
                dist, q, normal = self._field_search(flat[near], anchor[near])  # (M',), (M', 3) x2
                far_q = torch.stack((flat[:, 0], flat[:, 1], top), dim=-1)  # (M, 3)
                up = torch.zeros_like(flat)
                up[:, 2] = 1.0
                dist = above.index_copy(0, near, dist)
                q, normal = far_q.index_copy(0, near, q), up.index_copy(0, near, normal)
                return dist.view(lead), q.view(*lead, 3), normal.view(*lead, 3)
        dist, q, normal = self._field_search(flat, anchor)
        return dist.view(lead), q.view(*lead, 3), normal.view(*lead, 3)

    def _field_search(self, points: torch.Tensor, anchor: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`_field_nearest` of points (M, 3) by search of the window around `anchor` (M, 3): (M,), (M, 3), (M, 3).

        The nearest point of a union of triangles is the nearest of two kinds of candidates: each triangle's plane
        projection where it falls inside the triangle, and each edge's clamped projection (which covers the
        vertices). On a grid they are few and regular: per cell a horizontal, a vertical and a diagonal edge and two
        faces, each written out in its components (no (..., 3) reductions, no Voronoi-region branches), with the
        points on the last axis so that every op runs along long contiguous rows. Candidates carry the residual
        r = point - candidate; the least |r| wins."""
        cell = self.field.cell
        px, py, pz = points.t().contiguous()  # (M,) x3
        wx, wy = anchor[:, 0], anchor[:, 1]
        rows, cols, y, x = self._field_window(wx, wy)  # (wr + 1, M), (wc + 1, M), (wr + 1, M), (wc + 1, M)
        h = self._window_heights(rows, cols)  # (wr + 1, wc + 1, M) [row i, column j]
        dx, dy, dz = px - x, py - y, pz - h  # (wc + 1, M) per column, (wr + 1, M) per row, (wr + 1, wc + 1, M)
        dxj, dyi = dx[None], dy[:, None]  # (1, wc + 1, M), (wr + 1, 1, M)

        def axis_edge(ax, ay, az, ez):  # edges a -> a + (cell, 0, ez): clamped projections' residuals and |r|^2
            t = ((ax * cell + az * ez) / (cell * cell + ez * ez)).clamp(0.0, 1.0)
            rx, rz = ax - t * cell, az - t * ez
            ry = ay.expand_as(rx)
            return rx, ry, rz, rx * rx + ry * ry + rz * rz

        ax, ay, az = dxj[:, :-1], dyi[:-1], dz[:-1, :-1]  # (1, wc, M), (wr, 1, M), (wr, wc, M): the cells' v00
        h00, h01, h10, h11 = h[:-1, :-1], h[:-1, 1:], h[1:, :-1], h[1:, 1:]  # (wr, wc, M)
        along_y = axis_edge(dyi[:-1], dxj, dz[:-1], h[1:] - h[:-1])  # in (y, x, z) order, (wr, wc + 1, M)
        dh = h11 - h00
        t = (((ax + ay) * cell + az * dh) / (2 * cell * cell + dh * dh)).clamp(0.0, 1.0)  # the diagonal v00 -> v11
        rx, ry, rz = ax - t * cell, ay - t * cell, az - t * dh
        candidates = [axis_edge(ax, dyi, dz[:, :-1], h[:, 1:] - h[:, :-1]),  # along x (wr + 1, wc, M)
                      (along_y[1], along_y[0], along_y[2], along_y[3]),
                      (rx, ry, rz, rx * rx + ry * ry + rz * rz)]  # (wr, wc, M)
        normals = []  # per cell (v00, v01, v11), where the cell's u >= v, and (v00, v11, v10), where u <= v
        for nx, ny, lower in ((h00 - h01, h01 - h11, True), (h10 - h11, h00 - h10, False)):
            norm = torch.sqrt(nx * nx + ny * ny + cell * cell)
            nx, ny, nz = nx / norm, ny / norm, cell / norm  # (wr, wc, M) the unit normal, upward
            s = nx * ax + ny * ay + nz * az  # (wr, wc, M) signed distance to the plane
            u, v = (ax - s * nx) / cell, (ay - s * ny) / cell  # the projection, in the cell's unit square
            inside = (v >= 0) & (u <= 1) & (v <= u) if lower else (u >= 0) & (v <= 1) & (u <= v)
            candidates.append((s * nx, s * ny, s * nz, torch.where(inside, s * s, torch.inf)))
            normals.append((nx, ny, nz))
        rx, ry, rz, gap2 = (torch.cat([g[k].flatten(0, 1) for g in candidates]) for k in range(4))  # (C, M) x4
        best = gap2.argmin(dim=0, keepdim=True)  # (1, M)
        gap = gap2.gather(0, best)[0].sqrt()  # (M,)
        residual = torch.stack([r.gather(0, best)[0] for r in (rx, ry, rz)], dim=-1)  # (M, 3) point - nearest
        sign = torch.where(pz < self._field_height(points), -1.0, 1.0)  # (M,) inside the terrain: -1
        # on the surface itself the residual has no direction: the normal of the face under the point
        wr, wc = h.shape[0] - 1, h.shape[1] - 1
        u, v = dx[0] / cell, dy[0] / cell  # (M,) the point in cells from the window's corner
        j, i = u.floor().long().clamp(0, wc - 1), v.floor().long().clamp(0, wr - 1)  # a NaN point: cell 0
        face = ((u - j < v - i).long() * wr * wc + i * wc + j)[None]  # (1, M)
        up = torch.stack([torch.cat([n[k].flatten(0, 1) for n in normals]).gather(0, face)[0] for k in range(3)],
                         dim=-1)  # (M, 3)
        normal = torch.where((gap > 1e-9)[:, None], residual / gap.clamp_min(1e-9)[:, None] * sign[:, None], up)
        return sign * gap, points - residual, normal

    def _field_pairs(self, centers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Signed distance (N, P), nearest surface point (N, P, 3) and unit normal (N, P, 3) of each sphere center to
        the heightfield's triangles in a window of cells around it (every triangle within the cutoff lies in it)."""
        return self._field_nearest(centers)

    def _field_segment_pairs(self, a: torch.Tensor, b: torch.Tensor
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(signed distance (N, P), surface point (N, P, 3), normal (N, P, 3), place along the segment (N, P)) of each
        segment a -> b (N, P, 3) to the heightfield. Clear of the surface the distance is exact: the least of the
        ends' distances to every triangle, the segment's to every triangle edge, and zero where it crosses one.
        Into the surface it is that of the point of the segment deepest below it (of `_SEGMENT_SAMPLES` along it,
        measured vertically), to the surface."""
        tris = self._field_triangles(0.5 * (a + b))
        ta, tb, tc = tris  # (N, P, T, 3)
        sa, sb = a[:, :, None].expand_as(ta), b[:, :, None].expand_as(ta)  # (N, P, T, 3)
        cands = [(sa, _closest_on_triangles(sa, ta, tb, tc)), (sb, _closest_on_triangles(sb, ta, tb, tc))]
        cands += [_closest_between_segments(sa, sb, p, q) for p, q in ((ta, tb), (tb, tc), (tc, ta))]
        n = torch.linalg.cross(tb - ta, tc - ta)  # (N, P, T, 3) the triangles' normals (unnormalized)
        da, db = ((sa - ta) * n).sum(-1), ((sb - ta) * n).sum(-1)  # (N, P, T) the ends' sides of each plane
        cross = sa + (da / torch.where(da != db, da - db, torch.ones_like(da)))[..., None] * (sb - sa)
        hit = _closest_on_triangles(cross, ta, tb, tc)  # where the segment meets the plane, if in the triangle
        inside = torch.linalg.norm(hit - cross, dim=-1) < 1e-5 * (1 + cross.abs().amax(-1))  # float32 far out
        crosses = (da * db <= 0) & (da != db) & inside
        cands.append((cross, torch.where(crosses[..., None], cross, hit + 1e3)))  # a far point where it does not
        on_seg = torch.stack([p for p, _ in cands], dim=-2)  # (N, P, T, 6, 3)
        on_tri = torch.stack([q for _, q in cands], dim=-2)
        gap = torch.linalg.norm(on_seg - on_tri, dim=-1).flatten(2)  # (N, P, T*6)
        best = gap.argmin(dim=2, keepdim=True)  # (N, P, 1)
        gap = gap.gather(2, best)[..., 0]  # (N, P)
        pick = lambda t: t.flatten(2, 3).gather(2, best[..., None].expand(-1, -1, 1, 3))[:, :, 0]  # noqa: E731
        p, q = pick(on_seg), pick(on_tri)  # (N, P, 3) nearest points on the segment and on the surface
        length2 = ((b - a) ** 2).sum(-1).clamp_min(1e-12)
        t = (((p - a) * (b - a)).sum(-1) / length2).clamp(0, 1)  # (N, P)
        normal = (p - q) / gap.clamp_min(1e-9)[..., None]
        # Into the surface (or touching it): the deepest of the samples along the segment, by its vertical depth.
        ts = torch.linspace(0, 1, _SEGMENT_SAMPLES, device=a.device)  # (K,)
        samples = a[:, :, None] + ts[:, None] * (b - a)[:, :, None]  # (N, P, K, 3)
        depth = self._field_height(samples) - samples[..., 2]  # (N, P, K) > 0 below the surface
        deepest = depth.argmax(dim=2)  # (N, P)
        into = (depth.amax(dim=2) > 0) | (gap < 1e-9)  # (N, P)
        point = samples.gather(2, deepest[..., None, None].expand(-1, -1, 1, 3))[:, :, 0]  # (N, P, 3)
        d_in, q_in, n_in = self._field_nearest(point, anchor=0.5 * (a + b))
        return (torch.where(into, -d_in.abs(), gap), torch.where(into[..., None], q_in, q),
                torch.where(into[..., None], n_in, normal), torch.where(into, ts[deepest], t))

    def _field_height(self, points: torch.Tensor) -> torch.Tensor:
        """Surface height (...) of the heightfield under points (..., 3); -inf outside the grid (nothing below)."""
        return self.field_map(points)

    def signed_distance(self, qpos: torch.Tensor) -> torch.Tensor:
        """Signed distance (N, P) of every probe to the nearest scene surface (negative = penetration); exact within
        the cutoff (beyond it, a heightfield's may be too small or too large: see `_field_nearest`)."""
        return self._pairs(self._ends(qpos))[0].amin(dim=2)

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
        """Packed rows (N, R * (F + 1)) and each probe's signed distance to the nearest surface (N, P), one pass;
        a distance beyond the cutoff is not exact (only boxes near the batch count; a heightfield is searched within
        the reach of each probe only)."""
        rows, dist = self._detect(qpos, qvel)
        return rows.packed(), dist

    def _centers_and_velocity(self, qpos: torch.Tensor, qvel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Segment ends (N, P, E, 3) and their velocities (N, P, E, 3), by finite differences along qvel (one FK
        pass)."""
        n = qpos.shape[0]
        both = self._ends(torch.cat((qpos, self._advance(qpos, qvel, _FD_EPS))))  # (2N, P, E, 3)
        return both[:n], (both[n:] - both[:n]) / _FD_EPS

    def _detect(self, qpos: torch.Tensor, qvel: torch.Tensor) -> tuple[ContactRows, torch.Tensor]:
        centers, velocity = self._motion(qpos, qvel)  # (N, P, E, 3) x2
        rows, mask, overflow, nearest = self._rows(qpos, centers, velocity, self._near_boxes(centers))
        return ContactRows(rows, mask, overflow), nearest

    def _rows_of(self, qpos: torch.Tensor, centers: torch.Tensor, velocity: torch.Tensor,
                 boxes: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows (N, R, F), mask (N, R), overflow (N,) and each probe's nearest distance (N, P) from the probes' segment
        ends and their velocities (N, P, E, 3) against the ground and `boxes` (indices; None = all)."""
        n, R, P = qpos.shape[0], self.max_rows, self.num_probes
        dist, point, normal, t = self._pairs(centers, boxes)  # (N, P, G), (N, P, G, 3) x2, (N, P, G) or None
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
        if t is None:  # a sphere moves with its center
            vel = velocity[:, :, 0].gather(1, sphere[..., None].expand(-1, -1, 3))  # (N, k, 3)
        else:  # the nearest point of a segment moves as the point at its place between the two ends (one rigid body)
            va, vb = velocity[:, :, 0:1], velocity[:, :, 1:2]  # (N, P, 1, 3) x2
            vel = take((va + t[..., None] * (vb - va)).reshape(n, P * G, 3))  # (N, k, 3)
        vel_b = quat_apply_inverse(root_quat, vel) / VELOCITY_SCALE
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


def _closest_on_triangles(p: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The point (..., 3) of each triangle (a, b, c) nearest to p (..., 3): Voronoi regions of the vertices, edges and
    face, as in Ericson's Real-Time Collision Detection (5.1.5), batched with torch.where."""
    dot = lambda u, w: (u * w).sum(-1)  # noqa: E731
    ab, ac, ap, bp, cp = b - a, c - a, p - a, p - b, p - c
    d1, d2, d3, d4, d5, d6 = dot(ab, ap), dot(ac, ap), dot(ab, bp), dot(ac, bp), dot(ab, cp), dot(ac, cp)
    va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
    safe = lambda x: torch.where(x.abs() > 1e-12, x, torch.full_like(x, 1e-12))  # noqa: E731
    denom = safe(va + vb + vc)
    out = a + ab * (vb / denom)[..., None] + ac * (vc / denom)[..., None]  # inside the face
    checks = (  # applied last-to-first, so the first region that holds wins
        ((va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0), b + (c - b) * ((d4 - d3) / safe(d4 - d3 + d5 - d6))[..., None]),
        ((vb <= 0) & (d2 >= 0) & (d6 <= 0), a + ac * (d2 / safe(d2 - d6))[..., None]),  # edge AC
        ((d6 >= 0) & (d5 <= d6), c),  # vertex C
        ((vc <= 0) & (d1 >= 0) & (d3 <= 0), a + ab * (d1 / safe(d1 - d3))[..., None]),  # edge AB
        ((d3 >= 0) & (d4 <= d3), b),  # vertex B
        ((d1 <= 0) & (d2 <= 0), a),  # vertex A
    )
    for region, point in checks:
        out = torch.where(region[..., None], point, out)
    return out


def _closest_between_segments(p1: torch.Tensor, q1: torch.Tensor, p2: torch.Tensor,
                              q2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The nearest points (..., 3) x2 of segments p1 -> q1 and p2 -> q2 (..., 3), either possibly a point (Ericson's
    Real-Time Collision Detection, 5.1.9, batched)."""
    dot = lambda u, w: (u * w).sum(-1)  # noqa: E731
    d1, d2, r = q1 - p1, q2 - p2, p1 - p2
    a, e, f = dot(d1, d1), dot(d2, d2), dot(d2, r)
    c, b = dot(d1, r), dot(d1, d2)
    eps = 1e-12
    a_safe, e_safe = a.clamp_min(eps), e.clamp_min(eps)
    denom = a * e - b * b
    s = torch.where(denom > eps, ((b * f - c * e) / denom.clamp_min(eps)).clamp(0, 1), torch.zeros_like(a))
    t = (b * s + f) / e_safe
    s = torch.where(t < 0, (-c / a_safe).clamp(0, 1), torch.where(t > 1, ((b - c) / a_safe).clamp(0, 1), s))
    t = t.clamp(0, 1)
    s = torch.where(a <= eps, torch.zeros_like(s), s)  # the first segment is a point
    t = torch.where(a <= eps, (f / e_safe).clamp(0, 1), t)
    return p1 + d1 * s[..., None], p2 + d2 * t[..., None]


def _box_sdf(local: torch.Tensor, half: torch.Tensor) -> torch.Tensor:
    """Signed distance (...) of points `local` (..., 3), in a box's frame, to the solid box of half sizes `half`."""
    q = local.abs() - half  # (..., 3)
    return torch.linalg.norm(q.clamp_min(0.0), dim=-1) + q.amax(dim=-1).clamp_max(0.0)


def _segment_box_nearest(a: torch.Tensor, b: torch.Tensor, box_center: torch.Tensor, box_rot: torch.Tensor,
                         half: torch.Tensor) -> torch.Tensor:
    """Where (N, P, B) in [0, 1] along each segment a -> b (N, P, 3) the box's signed distance is least: it is convex
    along a line (a box is convex), so golden-section search brackets the minimum."""
    la = torch.einsum("npbi,bij->npbj", a[:, :, None] - box_center, box_rot)  # (N, P, B, 3) in each box's frame
    d = torch.einsum("npi,bij->npbj", b - a, box_rot)  # (N, P, B, 3)
    lo, hi = torch.zeros_like(la[..., 0]), torch.ones_like(la[..., 0])  # (N, P, B)
    for _ in range(_GOLDEN_STEPS):
        x1, x2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
        left = _box_sdf(la + x1[..., None] * d, half) <= _box_sdf(la + x2[..., None] * d, half)  # minimum in [lo, x2]
        lo, hi = torch.where(left, lo, x1), torch.where(left, x2, hi)
    return 0.5 * (lo + hi)
