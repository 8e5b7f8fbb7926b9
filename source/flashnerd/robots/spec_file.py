"""A robot from its own MJCF: a YAML spec file that needs only `mjcf:`, the rest derived from the compiled model.

    mjcf: my_quadruped.xml             # required: the robot (a floor plane in it gives the ground its collision
                                       # bits, contype/conaffinity; default 1/1), relative to this file
    name: my_quadruped                 # default: the MJCF's model name, other than letters, digits, _ and - as _
                                       # (its file name where <mujoco> has no model attribute)
    keyframe: home                     # default pose from this keyframe when the MJCF has it
    default_joint_pos: {".*_knee": -1.2}   # joint-name regex -> angle, or one list in actuator order
    init_base_height: 0.35             # spawn height of a floating base (default: the keyframe's; from geometry
                                       # without a keyframe or with default_joint_pos)
    sim_dt: 0.005                      # default: the MJCF's timestep
    decimation: 4                      # physics steps per control step (default: a 50 Hz control step)
    contact_bodies: {base: base, feet: ".*_foot", thighs: ".*_thigh"}   # group -> body-name regex or list of them
    undesired_contacts: [thighs]       # groups a locomotion task penalizes touching (default: none)
    probes: collision                  # contact probes: from the collision geometry (default), or a list of
                                       # {body, pos, radius} (and `to: [x, y, z]` for a capsule)
    unsupported_geoms: error           # collision geoms without an exact sphere form: error | bounding_box | skip
    explore_amplitude: 0.5             # exploration and spawn ranges of `flashnerd record` (see RobotSpec)
    init_joint_noise: 0.3              # or one value per joint position of qpos (unactuated joints included)
    init_vel_noise: 0.5
    init_height_range: [-0.05, 0.05]   # default: -25% to +8% of the spawn height
    init_tilt: 0.3
    object_spawn: [0.0, 0.0, 0.5]      # where a manipulated object (the cube) starts, world frame (default: none)

Derived from the compiled model: the joints (the actuated ones, in actuator order; every actuator must be a position
actuator on one hinge or slide joint, as the tasks send joint targets), a floating or fixed base (a free joint on the
first body), the PD gains and torque limit (reported; the per-actuator values stay in the MJCF), the contact groups
`base` (the floating body, unless a group of the file holds it) and `feet` (what the robot stands on in its default
pose: on each leg, the body with the lowest collision geometry, where it reaches near the ground; see `_standing_feet`)
unless given, and the contact probes. Collision geoms (contype or conaffinity nonzero) that meet the ground's bits
(`floor_bits`) become probes whose distance to a plane or a box is exactly the geom's (contacts/rows.py): a sphere and a
capsule are themselves (a capsule probe is a segment and a radius), a box is its eight corners (radius 0; exact against
a plane); a geom on an unnamed body welded to its parent rides on the nearest named ancestor, and that body's contact
sensor reads its subtree (`senses_subtree`).
Cylinders, ellipsoids (other than one of three equal axes, a sphere) and meshes have no such form: `unsupported_geoms`
names what happens (`bounding_box`: the corners of the geom's bounding box, which reach at least as far as the geom;
`skip`: no spheres). The backends add the sensors they need (contact per contact body, torque per actuator) through
`MjSpec` when the MJCF lacks them (sim/scene.py). The file is read with `utils.strict_yaml` (a safe loader: it runs no
code).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import mujoco
import numpy as np
import yaml

from flashnerd.robots.spec import ASSET_DIR, DEFAULT_FLOOR_BITS, Probe, RobotSpec
from flashnerd.robots.variant import number_in_range
from flashnerd.utils.host_memory import MAX_READ_FRACTION, available_host_bytes, fits_in_memory
from flashnerd.utils.name_patterns import NamePatternError, name_matches
from flashnerd.utils.sandbox import INTERPRETER_BYTES, BoundedRunError, run_bounded
from flashnerd.utils.strict_yaml import brief, load_yaml, yaml_problem

KEYS = ("mjcf", "name", "keyframe", "default_joint_pos", "init_base_height", "sim_dt", "decimation", "contact_bodies",
        "undesired_contacts", "probes", "unsupported_geoms", "explore_amplitude", "init_joint_noise",
        "init_vel_noise", "init_height_range", "init_tilt", "object_spawn")
UNSUPPORTED = ("error", "bounding_box", "skip")
CONTROL_DT = 0.02  # s: the default control step (50 Hz, Isaac Lab's locomotion rate)
MAX_SPEC_BYTES = 1 << 20  # a spec file is a few lines; a record naming a huge file is refused before it is read
SPAWN_CLEARANCE = 0.01  # m: a derived spawn height puts the lowest collision point this far above the floor
FOOT_TOLERANCE = 0.15  # a foot reaches within this share of the robot's collision height of its lowest point
FOOT_MIN_REACH = 0.01  # m: and at least within this
_NAME = re.compile(r"[A-Za-z0-9_\-]+")
HFIELD_BYTES = 16  # loading a heightfield takes about this much memory per sample (measured: 1 GB for 8000 x 8000)
TEXTURE_BYTES = 2  # and a texture about this much per pixel and channel (4 at most), six faces for a cube or skybox
MAX_INCLUDE_DEPTH = 8  # nested <include> files followed when counting what an MJCF declares
# the compiled model's arrays named after the element they belong to (the rest are named by their index)
_ELEMENT = {"body": "body", "jnt": "joint", "geom": "geom", "site": "site", "cam": "camera", "light": "light",
            "actuator": "actuator", "tendon": "tendon", "sensor": "sensor", "eq": "equality", "key": "key"}
_DERIVED = ("acc0", "length0", "invweight0", "subtreemass")  # compiled from other fields, reported after them
_GEOM = mujoco.mjtGeom


class RobotFileError(ValueError):
    """A robot spec file that cannot be used, with a one-line reason."""


def _number(where: str, value: Any, low: float, high: float = math.inf, low_open: bool = False) -> float:
    return number_in_range(where, value, low, high, low_open, RobotFileError)


def _regex_matches(where: str, pattern: Any, names: list[str]) -> list[str]:
    """The names that `pattern` matches in full; a bad or matchless pattern is a one-line error."""
    if not isinstance(pattern, str) or not pattern:
        raise RobotFileError(f"{where}: a name regex must be a non-empty string, got {brief(pattern)}")
    try:
        hits = [n for n in names if name_matches(pattern, n)]
    except NamePatternError as err:
        raise RobotFileError(f"{where}: {err}") from err
    if not hits:
        raise RobotFileError(f"{where}: '{pattern}' matches no name; the model has {', '.join(names[:12])}"
                             f"{' ...' if len(names) > 12 else ''}")
    return hits


UNNAMED_MODEL = mujoco.MjSpec().modelname  # MuJoCo's name for a model whose MJCF gives none ("MuJoCo Model")


def _compile(mjcf: Path, where: str) -> tuple[str, mujoco.MjModel, bool]:
    """(model name, compiled model, whether its angles are in degrees) of an MJCF file, refused in one line where it
    would not fit in memory once parsed or holds a physical value that is not a finite number. An MJCF from outside
    the package is compiled once in a child process with a memory and a CPU limit first (`_compile_bounded`)."""
    declared = _declared_bytes(mjcf)
    if not fits_in_memory(declared):
        raise RobotFileError(f"{where}: MJCF '{mjcf}' declares heightfields and textures of {declared / 2**20:,.0f} "
                             "MiB, more than this machine's memory holds; make them smaller")
    if not mjcf.resolve().is_relative_to(ASSET_DIR.resolve()):  # the package's own robots are compiled directly
        _compile_bounded(mjcf, where)
    try:
        spec = mujoco.MjSpec.from_file(str(mjcf))
        model = spec.compile()
    except Exception as err:  # MuJoCo raises ValueError with a multi-line message: its reason and line come second
        reason = " ".join(str(err).split())[:300] or type(err).__name__
        raise RobotFileError(f"{where}: MJCF '{mjcf}' failed to load: {reason}") from err
    _check_finite(model, f"{where}: MJCF '{mjcf}'")
    return spec.modelname, model, bool(spec.compiler.degree)


COMPILE_CPU_SECONDS = 60  # a robot with fine meshes compiles in seconds; a flexcomp grid of 10^6 bodies in minutes
COMPILE_MEMORY_BYTES = 4 << 30  # address space of the compiling child (it takes 0.25 GiB for the hound)


def _compile_sizes(mjcf: str) -> dict[str, np.ndarray]:
    """In a bounded child (utils/sandbox.py): compile the MJCF; its sizes, as numbers only."""
    try:
        model = mujoco.MjSpec.from_file(mjcf).compile()
    except Exception as err:  # MuJoCo's reason comes back as the child's ValueError; the parent's compile repeats it
        raise ValueError(" ".join(str(err).split())[:300] or type(err).__name__) from None
    return {"sizes": np.array([model.nbody, model.ngeom, model.nbuffer], dtype=np.int64)}


def _compile_bounded(mjcf: Path, where: str) -> None:
    """Compile a user's MJCF in a child process capped at the memory a file may take (`fits_in_memory`) and
    `COMPILE_CPU_SECONDS`: MuJoCo expands what a few lines can declare (nested `<replicate>` counts multiply, a
    `<flexcomp>` grid, a PNG's width and height, a `<model>` attached from another file) before any size is known
    here. MuJoCo's reason for a file that fails to compile is reported as it is, without compiling it again (the
    child reads no stdin: an MJCF that includes /dev/stdin fails there instead of blocking)."""
    memory = min(COMPILE_MEMORY_BYTES, INTERPRETER_BYTES + int(MAX_READ_FRACTION * available_host_bytes()))
    limits = f"{memory / 2**30:.1f} GiB and {COMPILE_CPU_SECONDS} s of CPU"
    try:
        run_bounded(_compile_sizes, (str(mjcf),), cpu_seconds=COMPILE_CPU_SECONDS,
                    wall_seconds=2 * COMPILE_CPU_SECONDS, memory_bytes=memory)
    except BoundedRunError as err:
        if err.raised:  # MuJoCo's reason; "Caught an unknown exception!" is how it reports a failed allocation
            hint = (f" (an allocation failed within the compile's {limits}: it declares more than a robot needs)"
                    if "unknown exception" in str(err) else "")
            raise RobotFileError(f"{where}: MJCF '{mjcf}' failed to load: {err}{hint}") from None
        limit = any(w in str(err) for w in ("did not finish", "CPU time", "memory", "killed"))
        cause = ("it declares more than a robot needs (replicate counts, flexcomp grids, image sizes)" if limit else
                 "the child interpreter failed: check that python can import flashnerd and mujoco")
        raise RobotFileError(f"{where}: MJCF '{mjcf}' could not be compiled within {limits} ({err}); {cause}"
                             ) from None


def _declared_bytes(mjcf: Path, root: Path | None = None, depth: int = 0) -> int:
    """Memory MuJoCo allocates for what an MJCF (and the files it includes) declares by size alone, read before
    MuJoCo parses it, which already allocates a heightfield's samples: a few bytes of XML can ask for gigabytes.
    A file that does not parse counts nothing here (MuJoCo then says what is wrong with it)."""
    root = root or mjcf.parent  # MuJoCo resolves includes against the main file's folder
    if not mjcf.is_file():  # a FIFO or a device (an include of /dev/stdin) would block the read
        return 0
    try:
        tree = ElementTree.parse(mjcf)  # expat refuses entity expansion bombs
    except (ElementTree.ParseError, OSError, ValueError):
        return 0
    total = 0
    for el in tree.iter():
        if el.tag == "hfield":
            total += _int(el.get("nrow")) * _int(el.get("ncol")) * HFIELD_BYTES
        elif el.tag == "texture":
            faces = 1 if el.get("type", "cube") == "2d" else 6
            total += _int(el.get("width")) * _int(el.get("height")) * faces * 4 * TEXTURE_BYTES
        elif el.tag == "include" and el.get("file") and depth < MAX_INCLUDE_DEPTH:
            total += _declared_bytes(root / el.get("file"), root, depth + 1)
    return total


def _int(text: str | None) -> int:
    """A non-negative MJCF integer attribute, or 0 where it is none (MuJoCo reports a malformed one itself)."""
    try:
        return max(int(text), 0) if text is not None else 0
    except ValueError:
        return 0


def _check_finite(model: mujoco.MjModel, where: str) -> None:
    """Every float the compiled model holds (masses, inertias, sizes, gains, damping, ranges, options) is finite: MuJoCo
    reads `nan` and `inf` from an MJCF as numbers, and a robot built on them steps to NaN."""
    arrays = [(f"opt.{n}", np.atleast_1d(getattr(model.opt, n))) for n in dir(model.opt) if not n.startswith("_")]
    # what the file sets first, then what the compiler derives from it (an infinite mass makes acc0 NaN too)
    names = sorted((n for n in dir(model) if not n.startswith("_")), key=lambda n: n.endswith(_DERIVED))
    arrays += [(n, getattr(model, n)) for n in names]
    for name, value in arrays:
        if not (isinstance(value, np.ndarray) and value.dtype.kind == "f") or np.isfinite(value).all():
            continue
        rows = value.reshape(len(value), -1)  # (elements, values of each)
        i, j = (int(k) for k in np.argwhere(~np.isfinite(rows))[0])
        kind, element = _ELEMENT.get(name.split("_")[0]), i
        if name.startswith("dof_"):  # a degree of freedom belongs to a joint
            kind, element = "joint", int(model.dof_jntid[i])
        label = f"{kind} '{getattr(model, kind)(element).name or f'#{element}'}'" if kind else f"element {i} of"
        raise RobotFileError(f"{where} gives {label} {name} {rows[i, j]} (MuJoCo reads nan and inf as numbers); every "
                             "physical value must be a finite number")


def _joints(model: mujoco.MjModel, where: str) -> tuple[str, ...]:
    """The actuated joints in actuator order; each actuator must be a position servo on one hinge or slide joint."""
    if model.nu == 0:
        raise RobotFileError(f"{where}: the MJCF has no actuators; add a <position> actuator per driven joint")
    names = []
    for a in range(model.nu):
        act = model.actuator(a)
        label = act.name or f"#{a}"
        if int(model.actuator_trntype[a]) != int(mujoco.mjtTrn.mjTRN_JOINT):
            raise RobotFileError(f"{where}: actuator '{label}' does not drive a joint; FlashNeRD's robots drive "
                                 "joints with position actuators")
        j = int(model.actuator_trnid[a, 0])
        if int(model.jnt_type[j]) not in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
            raise RobotFileError(f"{where}: actuator '{label}' drives a joint that is not a hinge or slide")
        kp, bias = model.actuator_gainprm[a, 0], model.actuator_biasprm[a, :3]
        position = (int(model.actuator_gaintype[a]) == int(mujoco.mjtGain.mjGAIN_FIXED) and kp > 0
                    and int(model.actuator_biastype[a]) == int(mujoco.mjtBias.mjBIAS_AFFINE)
                    and bias[0] == 0 and math.isclose(bias[1], -kp) and bias[2] <= 0)
        if not position or int(model.actuator_dyntype[a]) != int(mujoco.mjtDyn.mjDYN_NONE):
            raise RobotFileError(f"{where}: actuator '{label}' is not a position actuator (kp > 0, bias [0, -kp, -kv],"
                                 " no activation); the tasks send joint targets, use <position kp=... kv=...>")
        name = model.joint(j).name
        if not name:
            raise RobotFileError(f"{where}: actuator '{label}' drives an unnamed joint; name every actuated joint")
        if model.actuator_gear[a, 0] != 1.0:
            raise RobotFileError(f"{where}: actuator '{label}' has gear {model.actuator_gear[a, 0]:g}; the tasks' "
                                 "joint targets and torques are the joint's own, use gear 1 (fold the gear into kp, "
                                 "kv and the ranges)")
        if model.jnt_actgravcomp[j] and model.jnt_actfrclimited[j]:
            raise RobotFileError(f"{where}: joint '{name}' has both actuatorgravcomp and actuatorfrcrange, whose clamp "
                                 "then bounds gravity compensation too; drop one of them")
        names.append(name)
    if len(set(names)) != len(names):
        raise RobotFileError(f"{where}: two actuators drive the same joint; keep one actuator per joint")
    return tuple(names)


def actuator_force_limits(model: mujoco.MjModel) -> np.ndarray:
    """(nu, 2) force each actuator can apply to its joint: its `forcerange` where force-limited, within its joint's
    `actuatorfrcrange` (over the gear) where that is limited (MuJoCo clamps the joint's summed actuator force to it;
    with one actuator per joint the two clamps are one); [-inf, inf] where neither limits it."""
    limits = np.where(model.actuator_forcelimited.astype(bool)[:, None], model.actuator_forcerange,
                      np.array([-np.inf, np.inf]))  # (nu, 2)
    on_joint = model.actuator_trntype == int(mujoco.mjtTrn.mjTRN_JOINT)  # (nu,)
    joints = np.where(on_joint, model.actuator_trnid[:, 0], 0)  # (nu,)
    by_joint = np.sort(model.jnt_actfrcrange[joints] / model.actuator_gear[:, :1], axis=1)  # (nu, 2) in actuator units
    clamped = on_joint & model.jnt_actfrclimited[joints].astype(bool)  # (nu,)
    limits[clamped, 0] = np.maximum(limits[clamped, 0], by_joint[clamped, 0])
    limits[clamped, 1] = np.minimum(limits[clamped, 1], by_joint[clamped, 1])
    return limits


def _check_ctrlrange_units(model: mujoco.MjModel, degree: bool, where: str) -> None:
    """Under `<compiler angle="degree">` MuJoCo converts joint ranges to radians but not `ctrlrange` (a target is
    whatever unit the actuator takes), so a hinge servo's ctrlrange written in degrees lets targets 57x too far
    through. Refused where it reaches beyond a full turn while its joint's range does not: the radian values of the
    joint's range are in the message."""
    if not degree:
        return
    for a in range(model.nu):
        j = int(model.actuator_trnid[a, 0])
        if not (model.actuator_ctrllimited[a] and model.jnt_limited[j]
                and int(model.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_HINGE)):
            continue
        ctrl, (lo, hi) = model.actuator_ctrlrange[a], model.jnt_range[j]  # (2,), rad
        in_degrees = np.degrees([lo, hi])  # the joint's range as the MJCF wrote it
        copied = np.allclose(ctrl, in_degrees, rtol=0.0, atol=1e-3) and not np.allclose(ctrl, [lo, hi], atol=1e-3)
        if copied:  # the same numbers: a ctrlrange in degrees, or joint ranges in radians read as degrees
            raise RobotFileError(f"{where}: actuator '{model.actuator(a).name or f'#{a}'}' has ctrlrange "
                                 f"[{ctrl[0]:g}, {ctrl[1]:g}], the numbers of its joint's range, which MuJoCo read in "
                                 f"degrees as [{lo:.4g}, {hi:.4g}] rad (angle=\"degree\" is MuJoCo's default); if the "
                                 "MJCF's angles are radians, add <compiler angle=\"radian\"/>, else write the "
                                 "ctrlrange in radians or use inheritrange=\"1\"")
        if np.abs(ctrl).max() > 2 * math.pi >= max(abs(lo), abs(hi)):
            raise RobotFileError(f"{where}: actuator '{model.actuator(a).name or f'#{a}'}' has ctrlrange "
                                 f"[{ctrl[0]:g}, {ctrl[1]:g}] on a joint whose range is [{lo:.4g}, {hi:.4g}] rad: "
                                 f"degrees? MuJoCo does not convert ctrlrange under angle=\"degree\"; write it in "
                                 f"radians or use inheritrange=\"1\"")


def _floating(model: mujoco.MjModel, where: str) -> bool:
    free = [j for j in range(model.njnt) if int(model.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_FREE)]
    if not free:
        return False
    if free != [0] or int(model.jnt_bodyid[0]) != 1:
        first = model.body(1).name or "#1"
        moving = ", ".join(f"'{model.body(int(model.jnt_bodyid[j])).name or int(model.jnt_bodyid[j])}'" for j in free)
        raise RobotFileError(f"{where}: only the robot's first body may have a free joint (the floating base), but "
                             f"the first body is '{first}' and free joints move {moving}; the MJCF holds the robot "
                             "alone: move static bodies (a camera rig, a prop) after the robot or onto the worldbody, "
                             "and remove free objects")
    return True


def _default_pose(data: dict, model: mujoco.MjModel, joints: tuple[str, ...],
                  where: str) -> tuple[np.ndarray, bool, bool]:
    """(qpos (nq,), from a keyframe, the keyframe's pose unchanged) of the default pose: the keyframe's when present,
    then `default_joint_pos`."""
    key = data.get("keyframe", "home")
    if not isinstance(key, str):
        raise RobotFileError(f"{where}: keyframe must be a keyframe name, got {brief(key)}")
    names = [model.key(k).name for k in range(model.nkey)]
    if "keyframe" in data and key not in names:
        raise RobotFileError(f"{where}: the MJCF has no keyframe '{key}' (it has {', '.join(names) or 'none'})")
    from_key = key in names
    qpos = model.key_qpos[names.index(key)].copy() if from_key else model.qpos0.copy()
    adr = [int(model.jnt_qposadr[model.joint(j).id]) for j in joints]
    given = data.get("default_joint_pos")
    if isinstance(given, list):
        if len(given) != len(joints):
            raise RobotFileError(f"{where}: default_joint_pos lists {len(given)} values for {len(joints)} joints")
        qpos[adr] = [_number(f"{where}: default_joint_pos[{i}]", v, -1e3, 1e3) for i, v in enumerate(given)]
    elif isinstance(given, dict):
        for pattern, value in given.items():
            v = _number(f"{where}: default_joint_pos['{pattern}']", value, -1e3, 1e3)
            for j in _regex_matches(f"{where}: default_joint_pos", pattern, list(joints)):
                qpos[adr[joints.index(j)]] = v
    elif given is not None:
        raise RobotFileError(f"{where}: default_joint_pos must map joint regexes to angles or list one per joint")
    for name, a in zip(joints, adr):
        j = model.joint(name).id
        lo, hi = model.jnt_range[j]
        if model.jnt_limited[j] and not lo - 1e-6 <= qpos[a] <= hi + 1e-6:
            raise RobotFileError(f"{where}: default position {qpos[a]:g} of joint '{name}' is outside its range "
                                 f"[{lo:g}, {hi:g}]")
    return qpos, from_key, from_key and np.array_equal(qpos, model.key_qpos[names.index(key)])


MAX_BASE_TILT = 30.0  # degrees: a default pose whose base frame tilts more has another up axis (a Y-up model)


def _check_level_base(quat: np.ndarray, source: str, where: str) -> None:
    """One-line error where the default pose tilts the floating base's z axis more than `MAX_BASE_TILT` from up: the
    tasks and every backend read the base frame as z up and x forward (projected gravity, base height, the velocity
    command), and a robot spawns with its base level, so a model built with another up axis would spawn on its side.
    A yaw (any heading) is kept level and allowed."""
    w, x, y, z = (float(v) for v in quat / max(np.linalg.norm(quat), 1e-12))
    up_z = 1.0 - 2.0 * (x * x + y * y)  # z component of the base's z axis in the world
    tilt = math.degrees(math.acos(max(-1.0, min(1.0, up_z))))
    if tilt > MAX_BASE_TILT:
        raise RobotFileError(f"{where}: the floating base's z axis tilts {tilt:.0f} degrees from up in {source}; the "
                             "tasks read the base frame as z up and x forward and spawn it level, so the robot would "
                             "lie on its side: make the base body's frame level (wrap its geoms, sites and child "
                             "bodies in a <frame> that holds the rotation) and the keyframe's base quaternion level")


def floor_bits(model: mujoco.MjModel) -> tuple[int, int]:
    """(contype, conaffinity) of the ground a scene of this MJCF stands on: those of its own floor (the first plane on
    its world body, which the scene replaces), MuJoCo's default (1, 1) where it has none (sim/scene.py)."""
    for g in range(model.ngeom):
        if model.geom_bodyid[g] == 0 and int(model.geom_type[g]) == int(mujoco.mjtGeom.mjGEOM_PLANE):
            return int(model.geom_contype[g]), int(model.geom_conaffinity[g])
    return DEFAULT_FLOOR_BITS


def _collision_geoms(model: mujoco.MjModel, ground: bool = False) -> list[int]:
    """The robot's geoms that collide (contype or conaffinity nonzero), on bodies other than the world; with `ground`
    only those that collide with the ground (MuJoCo's rule on their bits and `floor_bits`)."""
    contype, conaffinity = floor_bits(model) if ground else (-1, -1)
    return [g for g in range(model.ngeom) if model.body_rootid[model.geom_bodyid[g]] == 1  # the robot's tree
            and (model.geom_contype[g] & conaffinity or model.geom_conaffinity[g] & contype)]


def _check_one_robot(model: mujoco.MjModel, where: str) -> None:
    """One-line error for colliding geometry on bodies beside the robot's tree (a crate, a body holding a floor):
    the learned backends see the robot and the ground only."""
    for g in range(model.ngeom):
        b = int(model.geom_bodyid[g])
        if b != 0 and model.body_rootid[b] != 1 and (model.geom_contype[g] or model.geom_conaffinity[g]):
            name = f"body '{model.body(b).name}'" if model.body(b).name else f"unnamed body #{b}"
            raise RobotFileError(f"{where}: {name} beside the robot (the tree of its first "
                                 f"body '{model.body(1).name or 1}') has collision geometry; the MJCF holds the robot "
                                 "alone: put static geometry on the worldbody itself, or remove the body")


def _rotation(quat: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) of a unit quaternion (w, x, y, z)."""
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, quat)
    return rot.reshape(3, 3)


def _welded_unnamed(model: mujoco.MjModel, body: int) -> list[int]:
    """`body` and the ancestors above it that are unnamed and welded to their parent (a user's grouping), up to the
    nearest named or jointed one; empty when `body` is named, moves on a joint or is the world's child."""
    chain = []
    while not model.body(body).name and model.body_jntnum[body] == 0 and model.body_parentid[body] > 0:
        chain.append(body)
        body = int(model.body_parentid[body])
    return chain


def geom_probes(model: mujoco.MjModel, g: int, unsupported: str = "error") -> list[Probe]:
    """Probes of collision geom `g` in its body's frame that meet a plane or a box where the geom does: a sphere
    itself, a capsule itself (a segment and a radius), a box's eight corners; other types by `unsupported` (see the
    module doc)."""
    kind, size = int(model.geom_type[g]), model.geom_size[g]
    pos, rot = model.geom_pos[g], _rotation(model.geom_quat[g])  # geom frame -> body frame
    b = int(model.geom_bodyid[g])
    for c in _welded_unnamed(model, b):  # the probe rides on the nearest named ancestor, in its frame
        pos, rot = model.body_pos[c] + _rotation(model.body_quat[c]) @ pos, _rotation(model.body_quat[c]) @ rot
        b = int(model.body_parentid[c])
    body = model.body(b).name
    if not body:  # bodies beside the robot's tree were refused before (`_check_one_robot`)
        raise RobotFileError(f"collision geom #{g} is on an unnamed body that moves on a joint of its own; name the "
                             "body in the MJCF")
    signs = np.array([[sx, sy, sz] for sx in (1, -1) for sy in (1, -1) for sz in (1, -1)], dtype=float)  # (8, 3)
    in_body = lambda c: tuple(float(x) for x in pos + rot @ c)  # noqa: E731  geom frame -> body frame
    if kind == int(_GEOM.mjGEOM_CAPSULE):  # the segment along the geom's z axis
        return [Probe(body, in_body(np.array([0.0, 0.0, size[1]])), float(size[0]),
                      to=in_body(np.array([0.0, 0.0, -size[1]])))]
    if kind == int(_GEOM.mjGEOM_SPHERE) or (kind == int(_GEOM.mjGEOM_ELLIPSOID) and np.ptp(size[:3]) == 0):
        local = [(np.zeros(3), float(size[0]))]  # an ellipsoid of three equal axes is that sphere
    elif kind == int(_GEOM.mjGEOM_BOX):
        local = [(c, 0.0) for c in signs * size[:3]]
    elif unsupported == "bounding_box":
        aabb = model.geom_aabb[g]  # center (3), half sizes (3) in the geom frame
        local = [(c, 0.0) for c in aabb[:3] + signs * aabb[3:]]
    elif unsupported == "skip":
        local = []
    else:
        kind_name = mujoco.mjtGeom(kind).name.removeprefix("mjGEOM_").lower()
        label = f"'{model.geom(g).name}'" if model.geom(g).name else f"#{g} of body '{body}'"
        raise RobotFileError(f"collision geom {label} is a {kind_name}, which contact rows do not take exactly; set "
                             "'unsupported_geoms: bounding_box' (its bounding-box corners) or 'skip', or list probes")
    return [Probe(body, in_body(c), r) for c, r in local]


def collision_probes(model: mujoco.MjModel, unsupported: str = "error") -> tuple[Probe, ...]:
    """Contact probes of every collision geom of the robot that collides with the ground (see `geom_probes`), in geom
    order; a robot whose collision geoms all miss the ground is a one-line error."""
    geoms = _collision_geoms(model, ground=True)
    if not geoms and _collision_geoms(model):
        contype, conaffinity = floor_bits(model)
        raise RobotFileError(f"none of the robot's collision geoms collides with the ground (contype {contype}, "
                             f"conaffinity {conaffinity}: the MJCF's own floor's, or MuJoCo's default 1 without one); "
                             "give the feet contype/conaffinity bits that meet the floor's, or a floor plane whose "
                             "bits meet theirs")
    return tuple(p for g in geoms for p in geom_probes(model, g, unsupported))


def _listed_probes(where: str, value: Any, bodies: list[str]) -> tuple[Probe, ...]:
    if not isinstance(value, list) or not value:
        raise RobotFileError(f"{where}: probes must be 'collision' or a list of {{body, pos, radius}}")
    out = []
    for i, p in enumerate(value):
        if not isinstance(p, dict) or set(p) - {"body", "pos", "radius", "to"} or p.get("body") not in bodies:
            raise RobotFileError(f"{where}: probes[{i}] must be {{body: <a body of the model>, pos: [x, y, z], "
                                 f"radius: r, to: [x, y, z] (a capsule, optional)}}, got {brief(p)}")
        ends = []
        for key in ("pos", "to"):
            xyz = p.get(key, [0.0, 0.0, 0.0] if key == "pos" else None)
            if xyz is not None and (not isinstance(xyz, list) or len(xyz) != 3):
                raise RobotFileError(f"{where}: probes[{i}].{key} must be [x, y, z], got {brief(xyz)}")
            ends.append(None if xyz is None else
                        tuple(_number(f"{where}: probes[{i}].{key}", x, -10.0, 10.0) for x in xyz))
        out.append(Probe(p["body"], ends[0], _number(f"{where}: probes[{i}].radius", p.get("radius", 0.0), 0.0, 10.0),
                         to=ends[1]))
    return tuple(out)


def _contact_groups(data: dict, model: mujoco.MjModel, floating: bool, qpos: np.ndarray,
                    where: str) -> dict[str, tuple[str, ...]]:
    """Group -> bodies: the file's groups, with `base` (the floating body) and `feet` (what it stands on) added."""
    bodies = [model.body(b).name for b in range(1, model.nbody)]
    given = data.get("contact_bodies", {})
    if not isinstance(given, dict):
        raise RobotFileError(f"{where}: contact_bodies must map group names to body-name regexes")
    groups: dict[str, tuple[str, ...]] = {}
    for group, patterns in given.items():
        if not isinstance(group, str) or not _NAME.fullmatch(group):
            raise RobotFileError(f"{where}: contact group name {brief(group)} must be letters, digits, _ or -")
        patterns = patterns if isinstance(patterns, list) else [patterns]
        hits = [b for p in patterns for b in _regex_matches(f"{where}: contact_bodies['{group}']", p, bodies)]
        groups[group] = tuple(dict.fromkeys(hits))
    base = model.body(1).name
    if floating and "base" not in given and not any(base in members for members in groups.values()):
        # first in the contact summary, as the shipped robots have it; with the named bodies welded to the base that
        # collide (a head, a battery box): the robot lying on them has fallen as surely as lying on its base
        colliding = {_owner(model, int(model.geom_bodyid[g])) for g in _collision_geoms(model)}
        welded = [model.body(b).name for b in _welded_to(model, 1) if model.body(b).name and b in colliding
                  and not any(model.body(b).name in members for members in groups.values())]
        groups = {"base": (base, *welded), **groups}
    if floating and "feet" not in given:
        try:
            feet = _standing_feet(model, qpos)
        except RobotFileError as err:
            raise RobotFileError(f"{where}: {err}") from err
        if feet:
            groups["feet"] = feet
    seen: dict[str, str] = {}
    for group, members in groups.items():
        for b in members:
            if not b:
                raise RobotFileError(f"{where}: contact group '{group}' holds an unnamed body; name it in the MJCF")
            if b in seen:
                raise RobotFileError(f"{where}: body '{b}' is in contact groups '{seen[b]}' and '{group}'; put each "
                                     "body in one group")
            seen[b] = group
    for g in _collision_geoms(model):  # a body sensor sees the body's own geoms only, a subtree sensor all below it
        b = int(model.geom_bodyid[g])
        owner = _owner(model, b)
        if owner != b and model.body(owner).name in seen and not senses_subtree(model, owner):
            name = model.body(owner).name
            raise RobotFileError(f"{where}: collision geom #{g} sits on an unnamed body welded to '{name}' (contact "
                                 f"group '{seen[name]}'), and a body below '{name}' other than its unnamed welded "
                                 "parts collides too, so neither its body's nor its subtree's contact sensor sees "
                                 f"exactly its geoms; name that body and add it to the group, or move the geom into "
                                 f"'{name}'")
    return groups


def _owner(model: mujoco.MjModel, body: int) -> int:
    """The body whose contact sensor and probes take `body`'s geoms: the nearest named or jointed one at or above it
    (an unnamed body welded to its parent is part of that parent)."""
    chain = _welded_unnamed(model, body)
    return int(model.body_parentid[chain[-1]]) if chain else body


def senses_subtree(model: mujoco.MjModel, body: int) -> bool:
    """Whether `body`'s contact sensor reads its subtree (MuJoCo's `subtree1`) instead of the body alone: where
    collision geoms sit on unnamed bodies welded to it (a user's grouping; a body sensor misses them) and nothing else
    below it collides, so the subtree's contacts are exactly those of the body and its welded parts."""
    parts = False
    for g in _collision_geoms(model):
        b = int(model.geom_bodyid[g])
        if b == body:
            continue
        chain = _welded_unnamed(model, b)
        if chain and model.body_parentid[chain[-1]] == body:
            parts = True
        elif body in _ancestors(model, b):
            return False
    return parts


def _welded_to(model: mujoco.MjModel, body: int) -> list[int]:
    """The bodies rigidly attached to `body` through bodies without joints (its welded subtree, `body` excluded)."""
    out, stack = [], [body]
    while stack:
        parent = stack.pop()
        children = [b for b in range(1, model.nbody) if model.body_parentid[b] == parent and model.body_jntnum[b] == 0]
        out += children
        stack += children
    return out


def _ancestors(model: mujoco.MjModel, body: int) -> list[int]:
    """The bodies above `body` up to, not including, the world."""
    out = []
    while model.body_parentid[body] > 0:
        body = int(model.body_parentid[body])
        out.append(body)
    return out


def _standing_feet(model: mujoco.MjModel, qpos: np.ndarray) -> tuple[str, ...]:
    """The bodies a floating robot stands on in its default pose `qpos`: the colliding bodies below a joint (on a leg,
    not welded to the base) whose lowest collision point is within FOOT_TOLERANCE of the robot's collision height
    above its lowest point, and lowest along their own line of the tree (no body above or below them on it reaches
    lower; of two that reach as low, the lower in the tree). A head or sensor mount welded to the base is no foot,
    nor an arm or a tail held above the ground, nor a shin's capsule above its foot; feet on legs that hang from one
    jointed waist or spine are each kept."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    data.qpos[0:7] = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)  # the base at the origin: heights are relative to it
    mujoco.mj_kinematics(model, data)
    low: dict[int, float] = {}  # body -> height of its lowest collision point
    top = -math.inf  # height of the robot's highest collision point
    for g in _collision_geoms(model, ground=True):  # a geom that passes through the floor stands on nothing
        for p in geom_probes(model, g, "bounding_box"):  # a box reaches at least as far as an unsupported geom
            b = model.body(p.body).id
            rot = data.xmat[b].reshape(3, 3)
            for end in (p.pos, p.to if p.to is not None else p.pos):
                z = float((data.xpos[b] + rot @ np.asarray(end))[2])
                low[b] = min(low.get(b, math.inf), z - p.radius)
                top = max(top, z + p.radius)
    lines = {b: _ancestors(model, b) for b in low}
    legs = [b for b in low if any(model.body_jntnum[c] > 0 for c in [b, *lines[b]] if c > 1)]
    if not legs:
        return ()
    ground = min(low[b] for b in legs)
    reach = max(FOOT_TOLERANCE * (top - ground), FOOT_MIN_REACH)
    feet = []
    for b in sorted(legs):
        above = [a for a in lines[b] if a in low]
        below = [d for d in legs if b in lines[d]]
        if low[b] <= ground + reach and all(low[a] > low[b] for a in above) and all(low[d] > low[b] for d in below):
            feet.append(model.body(b).name)
    return tuple(feet)


def _lowest_point(model: mujoco.MjModel, qpos: np.ndarray, probes: tuple[Probe, ...]) -> float:
    """Height of the lowest point of the contact spheres with the robot at `qpos`."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    low = math.inf
    for p in probes:
        b = model.body(p.body).id
        rot = data.xmat[b].reshape(3, 3)
        for end in (p.pos, p.to if p.to is not None else p.pos):
            low = min(low, float((data.xpos[b] + rot @ np.asarray(end))[2]) - p.radius)
    return low


def parse_robot_file(data: Any, path: Path) -> RobotSpec:
    """Check a spec file's content and derive the robot (see the module docstring); problems are one-line errors."""
    where = f"robot spec '{path}'"
    if not isinstance(data, dict) or not isinstance(data.get("mjcf"), str):
        raise RobotFileError(f"{where} must be a YAML mapping with an 'mjcf' key (the robot's MJCF file)")
    for key in data:
        if key not in KEYS:
            raise RobotFileError(f"{where}: unknown key '{key}'; use {', '.join(KEYS)}")
    mjcf = (path.parent / data["mjcf"]).resolve()
    if not mjcf.is_file():
        raise RobotFileError(f"{where}: MJCF file '{mjcf}' does not exist (mjcf is relative to the spec file)")
    model_name, model, degree = _compile(mjcf, where)
    # a derived name is made a valid one (Menagerie's scene files are "go2 scene"); a name given must be one already.
    # An MJCF whose <mujoco> has no model attribute is "MuJoCo Model" to MuJoCo: such a robot is named by its file
    derived = mjcf.stem if model_name in ("", UNNAMED_MODEL) else model_name
    name = data.get("name", re.sub(r"[^A-Za-z0-9_-]+", "_", derived).strip("_") or "robot")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RobotFileError(f"{where}: robot name {brief(name)} must be letters, digits, _ or - (set 'name:')")
    joints = _joints(model, where)
    _check_ctrlrange_units(model, degree, where)
    floating = _floating(model, where)
    _check_one_robot(model, where)
    qpos, from_key, as_keyframe = _default_pose(data, model, joints, where)
    if floating:
        _check_level_base(qpos[3:7], "keyframe '" + str(data.get("keyframe", "home")) + "'" if from_key else
                          "the MJCF (its base body's orientation)", where)
    groups = _contact_groups(data, model, floating, qpos, where)
    undesired = data.get("undesired_contacts", [])
    if not isinstance(undesired, list) or any(not isinstance(g, str) or g not in groups for g in undesired):
        raise RobotFileError(f"{where}: undesired_contacts must list contact groups ({', '.join(groups) or 'none'}), "
                             f"got {brief(undesired)}")
    unsupported = data.get("unsupported_geoms", "error")
    if unsupported not in UNSUPPORTED:
        raise RobotFileError(f"{where}: unsupported_geoms must be one of {', '.join(UNSUPPORTED)}, got "
                             f"{brief(unsupported)}")
    probes_given = data.get("probes", "collision")
    if probes_given == "collision":
        try:
            probes = collision_probes(model, unsupported) if floating else ()
        except RobotFileError as err:
            raise RobotFileError(f"{where}: {err}") from err
    else:
        probes = _listed_probes(where, probes_given, [model.body(b).name for b in range(1, model.nbody)])
    sim_dt = _number(f"{where}: sim_dt", data.get("sim_dt", float(model.opt.timestep)), 1e-5, 0.1)
    decimation = data.get("decimation", max(1, round(CONTROL_DT / sim_dt)))
    if isinstance(decimation, bool) or not isinstance(decimation, int) or not 1 <= decimation <= 1000:
        raise RobotFileError(f"{where}: decimation must be a whole number of physics steps (1-1000), got "
                             f"{brief(decimation)}")
    height = 0.0
    if floating:
        if "init_base_height" in data:
            height = _number(f"{where}: init_base_height", data["init_base_height"], 0.0, 100.0, True)
        elif as_keyframe or (from_key and not probes):
            height = float(qpos[2])  # the keyframe's height fits the keyframe's pose, not another one
        elif probes:
            standing = qpos.copy()
            standing[0:7] = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
            height = SPAWN_CLEARANCE - _lowest_point(model, standing, probes)
        else:
            raise RobotFileError(f"{where}: cannot place the floating base without a keyframe or collision geometry; "
                                 "set init_base_height")
    kp = model.actuator_gainprm[:, 0]
    force = np.abs(actuator_force_limits(model))  # (nu, 2)
    effort = float(force[np.isfinite(force)].max()) if np.isfinite(force).any() else math.inf
    # spawn heights for exploration scale with the robot, as ANYmal-C's (-0.15, 0.05) m do around its 0.6 m
    extra: dict[str, Any] = {"init_height_range": (-0.25 * height, 0.08 * height)} if floating else {}
    for key, low, high in (("explore_amplitude", 0.0, 10.0), ("init_vel_noise", 0.0, 100.0),
                           ("init_tilt", 0.0, math.pi + 1e-6)):
        if key in data:
            extra[key] = _number(f"{where}: {key}", data[key], low, high)
    noise = data.get("init_joint_noise")
    joint_qpos = model.nq - (7 if floating else 0)  # the robot's own joints in qpos, unactuated ones included
    if isinstance(noise, list):
        if len(noise) != joint_qpos:
            raise RobotFileError(f"{where}: init_joint_noise lists {len(noise)} values for the {joint_qpos} joint "
                                 "positions of qpos (one number for all, or one per position)")
        extra["init_joint_noise"] = tuple(_number(f"{where}: init_joint_noise[{i}]", v, 0.0, 10.0)
                                          for i, v in enumerate(noise))
    elif noise is not None:
        extra["init_joint_noise"] = _number(f"{where}: init_joint_noise", noise, 0.0, 10.0)
    if "object_spawn" in data:
        xyz = data["object_spawn"]
        if not isinstance(xyz, list) or len(xyz) != 3:
            raise RobotFileError(f"{where}: object_spawn must be [x, y, z] (m, world frame), got {brief(xyz)}")
        extra["object_spawn"] = tuple(_number(f"{where}: object_spawn", x, -100.0, 100.0) for x in xyz)
    if "init_height_range" in data:
        r = data["init_height_range"]
        if not isinstance(r, list) or len(r) != 2:
            raise RobotFileError(f"{where}: init_height_range must be [low, high] (m), got {brief(r)}")
        lo, hi = (_number(f"{where}: init_height_range", x, -10.0, 10.0) for x in r)
        if lo > hi:
            raise RobotFileError(f"{where}: init_height_range [{lo:g}, {hi:g}] has low above high")
        extra["init_height_range"] = (lo, hi)
    adr = [int(model.jnt_qposadr[model.joint(j).id]) for j in joints]
    scalar = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
    passive = tuple((j, float(qpos[model.jnt_qposadr[j]])) for j in range(model.njnt)
                    if from_key and int(model.jnt_type[j]) in scalar and model.joint(j).name not in joints)
    return RobotSpec(
        name=name, mjcf=str(mjcf), joint_names=joints, default_joint_pos=tuple(float(qpos[a]) for a in adr),
        stiffness=float(kp.max()), damping=float(max(0.0, -model.actuator_biasprm[:, 2].min())), effort_limit=effort,
        init_base_height=height, floating_base=floating, sim_dt=sim_dt, decimation=decimation,
        contact_bodies=groups, probes=probes, undesired_contacts=tuple(undesired), source=str(path),
        passive_joint_pos=passive, **extra,
    )


def load_robot_file(path: str | Path) -> RobotSpec:
    """Read a robot spec file (YAML, safe loader) and derive the robot from its MJCF."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise RobotFileError(f"robot spec file '{path}' does not exist")
    try:
        if path.stat().st_size > MAX_SPEC_BYTES:
            raise RobotFileError(f"robot spec '{path}' is {path.stat().st_size} bytes; a spec file is a few lines of "
                                 "YAML")
        data = load_yaml(path.read_text())
    except OSError as err:
        raise RobotFileError(f"robot spec '{path}' cannot be read ({err.strerror or type(err).__name__})") from err
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        raise RobotFileError(f"robot spec '{path}' is not valid YAML: {yaml_problem(err)}") from None
    return parse_robot_file(data, path)
