"""Contact features for learned models: fixed ground probes (NeRD) or variable contact rows (FlashNeRD)."""

import mujoco
import torch

from flashnerd.contacts.probes import NoContact, ProbeFeatures, probe_spheres
from flashnerd.contacts.rows import ContactRowDetector, ContactRows, unpack_rows
from flashnerd.robots import RobotSpec

__all__ = ["CONTACT_MODES", "ContactFeatures", "ContactRowDetector", "ContactRows", "NoContact", "ProbeFeatures",
           "contact_features", "probe_spheres", "unpack_rows"]

CONTACT_MODES = ("probes", "rows")
ContactFeatures = ProbeFeatures | ContactRowDetector | NoContact  # what `contact_features` returns


def contact_features(robot: RobotSpec, model: mujoco.MjModel, device: torch.device | str = "cpu",
                     mode: str = "probes", max_rows: int = 16, compile: bool = False) -> ContactFeatures:
    """The contact features of `robot` in `model`'s scene, called as `features(qpos, qvel) -> (N, dim)`:
    fixed probes against the ground plane (`mode="probes"`, NeRD's convention) or variable contact rows against
    everything in the scene (`mode="rows"`, packed, see `contacts/rows.py`); a robot without probes has none.
    `compile=True` runs the per-step tensor code through `torch.compile` (for long rollouts at a fixed batch size)."""
    if mode not in CONTACT_MODES:
        raise ValueError(f"unknown contact mode '{mode}'; choose one of: {', '.join(CONTACT_MODES)}")
    if not robot.probes:
        return NoContact()
    if mode == "rows":
        return ContactRowDetector(robot, model, device, max_rows=max_rows, compile=compile)
    return ProbeFeatures(robot, model, device, compile=compile)
