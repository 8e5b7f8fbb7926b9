"""`RobotSpec`: what the rest of the suite needs to know about a robot beyond its MJCF."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from flashnerd.robots.variant import RobotVariant

ASSET_DIR = Path(__file__).parent / "assets"
DEFAULT_FLOOR_BITS = (1, 1)  # contype, conaffinity of the ground where a robot's MJCF brings no floor of its own
_INCLUDE = re.compile(rb"<(?:include|model)\s[^>]*?file\s*=\s*[\"']([^\"']+)[\"']")  # <include>, <asset><model>
_COMMENT = re.compile(rb"<!--.*?-->", re.S)


def included_files(mjcf: Path, limit: int = 100) -> list[Path]:
    """Files an MJCF `<include>`s (or attaches as `<model>`), nested ones too, in the order met: each looked for in
    the main file's folder first, then in the including file's, as MuJoCo does; each once, commented-out and missing
    ones left out (MuJoCo reports a missing one)."""
    found: list[Path] = []
    todo = [mjcf.resolve()]
    while todo and len(found) < limit:
        current = todo.pop(0)
        for name in _INCLUDE.findall(_COMMENT.sub(b"", current.read_bytes())):
            relative = name.decode(errors="replace")
            for folder in (mjcf.parent, current.parent):
                path = (folder / relative).resolve()
                if path.is_file():
                    if path not in found and path != mjcf.resolve():
                        found.append(path)
                        todo.append(path)
                    break
    return found


@dataclass(frozen=True)
class Probe:
    """A contact probe in the frame of `body`: a sphere of `radius` at `pos` (the NeRD convention), or with `to` a
    capsule of that radius around the segment from `pos` to `to` (a robot's collision capsule)."""

    body: str
    pos: tuple[float, float, float]
    radius: float = 0.0
    to: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class RobotSpec:
    """A robot model and the conventions that tasks and learned models share.

    Joint order is the MJCF actuator order; every tensor with a joint axis uses it.
    """

    name: str
    mjcf: str  # file name under robots/assets, or an absolute path (a robot from a spec file, robots/spec_file.py)
    joint_names: tuple[str, ...]
    default_joint_pos: tuple[float, ...]
    stiffness: float  # PD proportional gain of the position actuators (N*m/rad); per-joint gains live in the MJCF
    damping: float  # PD derivative gain (N*m*s/rad)
    effort_limit: float  # largest actuator torque limit (N*m); per-joint limits are the MJCF's forcerange
    init_base_height: float  # spawn height of the base (m); unused for a fixed base
    floating_base: bool = True  # qpos = [pos(3), quat(4), joints] and qvel = [lin(3), ang(3), joints]; else joints
    sim_dt: float = 0.005
    decimation: int = 4
    contact_bodies: dict[str, tuple[str, ...]] = field(default_factory=dict)  # group name -> body names
    probes: tuple[Probe, ...] = ()  # fixed-contact probe points for learned models
    # Exploration recording: PD targets default + a * U[-1, 1] (clipped to the actuator ctrlrange), with a per-
    # trajectory amplitude a up to `explore_amplitude`; initial joint positions default + U[-1, 1] * noise (one
    # value, or one per joint in qpos order, unactuated joints included) and initial velocities U[-1, 1] * vel.
    explore_amplitude: float = 0.8
    object_spawn: tuple[float, float, float] | None = None  # where a manipulated object starts (world frame, m)
    init_joint_noise: float | tuple[float, ...] = 0.4
    init_vel_noise: float = 0.5
    init_height_range: tuple[float, float] = (-0.15, 0.05)  # floating base: spawn height offsets around init height
    init_tilt: float = 0.3  # floating base: largest initial roll and pitch (rad); pi covers every orientation
    variant: RobotVariant | None = None  # how this robot differs from its MJCF (robots/variant.py); None: nominal
    undesired_contacts: tuple[str, ...] = ()  # contact groups a locomotion task penalizes touching (Isaac Lab: thighs)
    source: str = ""  # the spec file this robot was read from (absolute path); "" for a robot built into the package
    # (joint index in the MJCF, position) of each unactuated hinge or slide joint where the default pose (a keyframe)
    # sets it, named or not (the scene keeps the robot's joints first, in the MJCF's order); the others start at qpos0
    passive_joint_pos: tuple[tuple[int, float], ...] = ()

    @property
    def mjcf_path(self) -> Path:
        """Absolute path of the robot's MJCF file."""
        return ASSET_DIR / self.mjcf  # an absolute `mjcf` replaces the folder

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    @property
    def control_dt(self) -> float:
        """Seconds advanced by one control step."""
        return self.sim_dt * self.decimation

    @property
    def all_contact_bodies(self) -> tuple[str, ...]:
        """Every named contact body, in group order (the order of the backend's contact summary)."""
        return tuple(b for group in self.contact_bodies.values() for b in group)

    def with_variant(self, variant: RobotVariant | None) -> RobotSpec:
        """This robot with `variant` applied to every scene built of it (None: the nominal robot)."""
        if variant is not None and variant.robot != self.name:
            raise ValueError(f"robot variant '{variant.source or variant.name}' is for robot '{variant.robot}', "
                             f"not '{self.name}'")
        return dataclasses.replace(self, variant=variant)

    def without_ranges(self) -> RobotSpec:
        """This robot with its variant's `randomize` ranges dropped (the file's fixed values: one robot), for the
        backends that simulate one robot in every world (learned, coupled); itself when nothing is drawn."""
        if self.variant is None or not self.variant.randomized:
            return self
        return self.with_variant(self.variant.fixed())

    def model_hash(self) -> str:
        """A short hash of the MJCF text and of the files it `<include>`s (a Menagerie-style scene.xml holds the robot
        in one): checkpoints and datasets carry it to refuse data from another robot. Mesh and texture files are not
        hashed (collision meshes are not taken exactly anyway)."""
        digest = hashlib.sha256(self.mjcf_path.read_bytes())
        for path in included_files(self.mjcf_path):
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]
