"""Fixed-probe contact features against a flat ground plane, computed from (predicted) states in torch.

For each probe (a sphere, or a capsule: its sphere at the lower segment end): the nearest ground point and the ground
normal, both in the root frame, and the signed distance of the probe to the ground; a probe farther than `cutoff` is
masked (features zero, flag 0), as NeRD masks probes beyond max(4 * thickness, 0.12 m).
"""

from __future__ import annotations

import mujoco
import torch

from flashnerd.robots import RobotSpec
from flashnerd.robots.kinematics import TorchKinematics
from flashnerd.utils.math import quat_apply_inverse

FEATURES_PER_PROBE = 8  # point_b (3), normal_b (3), signed distance (1), in-range flag (1)


def probe_spheres(robot: RobotSpec, model: mujoco.MjModel, device: torch.device | str = "cpu"):
    """The robot's contact probes (`RobotSpec.probes`): body ids (P,), centers (a capsule: its `pos` end) in their
    body frames (P, 3), radii (P,); refuses robots without probes or with a fixed base."""
    if not robot.probes:
        raise ValueError(f"robot '{robot.name}' defines no contact probes")
    if not robot.floating_base:
        raise ValueError(f"robot '{robot.name}' has a fixed base; contact features are defined for a floating one")
    dev = torch.device(device)
    body_ids = torch.tensor([model.body(p.body).id for p in robot.probes], device=dev)  # (P,)
    local = torch.tensor([p.pos for p in robot.probes], dtype=torch.float32, device=dev)  # (P, 3)
    radius = torch.tensor([p.radius for p in robot.probes], dtype=torch.float32, device=dev)  # (P,)
    return body_ids, local, radius


def probe_segment_ends(robot: RobotSpec, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """The `to` ends (P, 3) of the probes in their body frames (a sphere's equals its center), or None when every
    probe is a sphere."""
    if all(p.to is None for p in robot.probes):
        return None
    return torch.tensor([p.to if p.to is not None else p.pos for p in robot.probes], dtype=torch.float32,
                        device=torch.device(device))  # (P, 3)


def segment_ends(kin: TorchKinematics, qpos: torch.Tensor, body_ids: torch.Tensor, local: torch.Tensor,
                 local_to: torch.Tensor | None) -> torch.Tensor:
    """World positions (N, P, E, 3) of the probes' segment ends, from one kinematics pass (E = 1 when every probe is
    a sphere: the centers; else 2, a sphere's two ends equal)."""
    if local_to is None:
        return kin.points(qpos, body_ids, local)[:, :, None]  # (N, P, 1, 3)
    ends = kin.points(qpos, torch.cat((body_ids, body_ids)), torch.cat((local, local_to)))  # (N, 2P, 3)
    return ends.unflatten(1, (2, -1)).transpose(1, 2)  # (N, P, 2, 3)


def lowest_centers(kin: TorchKinematics, qpos: torch.Tensor, body_ids: torch.Tensor, local: torch.Tensor,
                   local_to: torch.Tensor | None) -> torch.Tensor:
    """World centers (N, P, 3) of the probe spheres nearest a horizontal plane: a sphere's center, a capsule's lower
    segment end (the segment's nearest point to any plane below it lies at an end)."""
    ends = segment_ends(kin, qpos, body_ids, local, local_to)  # (N, P, E, 3)
    if ends.shape[2] == 1:
        return ends[:, :, 0]  # (N, P, 3)
    a, b = ends[:, :, 0], ends[:, :, 1]
    return torch.where((b[..., 2] < a[..., 2])[..., None], b, a)  # (N, P, 3)


class ProbeFeatures:
    """Maps qpos (N, nq) of a floating-base robot to probe features (N, P * 8) and signed distances (N, P)."""

    def __init__(self, robot: RobotSpec, model: mujoco.MjModel, device: torch.device | str = "cpu",
                 cutoff: float = 0.12, ground_height: float = 0.0, compile: bool = False) -> None:
        self.body_ids, self.local, self.radius = probe_spheres(robot, model, device)
        self.local_to = probe_segment_ends(robot, device)  # (P, 3) or None: capsule probes
        self.kin = TorchKinematics(model, device)
        self.cutoff = cutoff
        self.ground_height = ground_height
        self.num_probes = len(robot.probes)
        self.dim = self.num_probes * FEATURES_PER_PROBE
        if compile:  # one fused pass (kinematics included) instead of many small launch-bound ops
            self.features_and_distance = torch.compile(self.features_and_distance, dynamic=False)

    def signed_distance(self, qpos: torch.Tensor) -> torch.Tensor:
        """Signed distance (N, P) of each probe to the ground (negative = penetration)."""
        centers = lowest_centers(self.kin, qpos, self.body_ids, self.local, self.local_to)  # (N, P, 3)
        return centers[..., 2] - self.ground_height - self.radius

    def __call__(self, qpos: torch.Tensor, qvel: torch.Tensor | None = None) -> torch.Tensor:
        """Probe features (N, P * 8) in the root frame of each world (velocities are not used)."""
        return self.features_and_distance(qpos, qvel)[0]

    def features_and_distance(self, qpos: torch.Tensor,
                              qvel: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Features (N, P * 8) and signed distances (N, P) from one kinematics pass."""
        n = qpos.shape[0]
        centers = lowest_centers(self.kin, qpos, self.body_ids, self.local, self.local_to)  # (N, P, 3)
        dist = centers[..., 2] - self.ground_height - self.radius  # (N, P)
        point_w = centers.clone()
        point_w[..., 2] = self.ground_height  # nearest ground point below each sphere
        root_pos, root_quat = qpos[:, None, 0:3], qpos[:, None, 3:7].expand(n, self.num_probes, 4)
        point_b = quat_apply_inverse(root_quat, point_w - root_pos)  # (N, P, 3)
        up = torch.tensor([0.0, 0.0, 1.0], device=qpos.device, dtype=qpos.dtype).expand(n, self.num_probes, 3)
        normal_b = quat_apply_inverse(root_quat, up)  # (N, P, 3)
        flag = (dist < self.cutoff).to(qpos.dtype)  # (N, P)
        feats = torch.cat((point_b, normal_b, dist[..., None], flag[..., None]), dim=-1) * flag[..., None]
        return feats.reshape(n, self.dim), dist  # (N, P * 8), (N, P)


class NoContact:
    """Contact features of a robot without probes (a fixed-base arm, a CartPole): zero columns."""

    dim = 0
    num_probes = 0

    def signed_distance(self, qpos: torch.Tensor) -> torch.Tensor:
        return qpos.new_zeros(qpos.shape[0], 0)  # (N, 0)

    def features_and_distance(self, qpos: torch.Tensor, qvel: torch.Tensor | None = None):
        return qpos.new_zeros(qpos.shape[0], 0), qpos.new_zeros(qpos.shape[0], 0)  # (N, 0), (N, 0)

    def __call__(self, qpos: torch.Tensor, qvel: torch.Tensor | None = None) -> torch.Tensor:
        return qpos.new_zeros(qpos.shape[0], 0)  # (N, 0)
