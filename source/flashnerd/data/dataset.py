"""The dataset format (documented in docs/reference/dataset.md): its one writer, its reader and its checks.

`write_arrays` is the only code that writes dataset files (temp file, then rename) and `concat_files` the only code
that joins them; `sane_trajectories` is the one divergence filter and `dataset_attrs` the attributes every file
carries. The reader returns torch tensors, validated where they are read.

Missing, corrupt, foreign and other-robot files are one-line errors; so are arrays whose layout disagrees with the
robot (nq, nv, nu) and a control time step the robot does not take. Trajectories with non-finite or runaway values,
or with a quaternion that is not of unit length, are dropped and counted in `attrs["dropped_on_read"]`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import mujoco
import numpy as np
import torch

import flashnerd
from flashnerd.models.contact_head import CONTACT_LABEL_N
from flashnerd.robots import RobotSpec, robot_of_record
from flashnerd.sim.scene import build_scene
from flashnerd.utils.atomic import atomic_path
from flashnerd.utils.host_memory import fits_in_memory

REQUIRED = ("qpos", "qvel", "ctrl")
DATASET_FORMAT_VERSION = 1  # the layout `flashnerd record` writes and this module reads
MAX_ABS = 1e5  # a state or control beyond this is a diverged simulation, not data
QUAT_TOL = 1e-3  # |norm - 1| of a stored unit quaternion (float32 round-off is ~1e-7)
_LAYOUTS: dict[tuple[str, str], tuple[int, int, int, tuple[int, ...]]] = {}


@dataclass
class TrajectoryData:
    """All trajectories of a dataset: qpos (M, T+1, nq), qvel (M, T+1, nv), ctrl (M, T, nu) + attributes.

    Contact labels, where the file has them for every contact body of the robot: `touching` (M, T, nb) 1.0 where a
    body touched during step t (a recorded force above `CONTACT_LABEL_N`, or a robot log's contact flag at the end
    of the step), and `contact_force` (M, T, nb) the recorded force in N (`flashnerd record` data only). `torque`
    where the file has it: the joint torque measured at the end of each step (actuator identification reads it)."""

    qpos: torch.Tensor
    qvel: torch.Tensor
    ctrl: torch.Tensor
    attrs: dict
    touching: torch.Tensor | None = None
    contact_force: torch.Tensor | None = None
    torque: torch.Tensor | None = None  # (M, T, nu) measured joint torque over each step (NaN where a log lacks it)

    @property
    def num_trajectories(self) -> int:
        return self.qpos.shape[0]

    @property
    def traj_len(self) -> int:
        return self.ctrl.shape[1]

    def split(self, val_fraction: float, seed: int = 0) -> tuple[TrajectoryData, TrajectoryData]:
        """Split by trajectory (never by frame) into (train, validation)."""
        m = self.num_trajectories
        n_val = max(1, int(round(m * val_fraction))) if m > 1 else 0
        perm = torch.randperm(m, generator=torch.Generator().manual_seed(seed))
        val, train = perm[:n_val], perm[n_val:]
        return self.select(train), self.select(val)

    def select(self, idx: torch.Tensor) -> TrajectoryData:
        """The trajectories `idx` (k,) (indices or a mask), labels included."""
        pick = lambda a: None if a is None else a[idx]  # noqa: E731
        return TrajectoryData(self.qpos[idx], self.qvel[idx], self.ctrl[idx], self.attrs, pick(self.touching),
                              pick(self.contact_force), pick(self.torque))

    def to(self, device: torch.device | str) -> TrajectoryData:
        """A copy on `device`."""
        move = lambda a: None if a is None else a.to(device)  # noqa: E731
        return TrajectoryData(self.qpos.to(device), self.qvel.to(device), self.ctrl.to(device), self.attrs,
                              move(self.touching), move(self.contact_force), move(self.torque))


def load_dataset(path: str | Path, robot: RobotSpec | None = None) -> TrajectoryData:
    """Load a dataset written by `flashnerd record`; refuse truncated, corrupt or other-robot files in one line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset '{path}' does not exist; record one with `flashnerd record`")
    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in REQUIRED if k not in f]
            if missing:
                raise ValueError(f"dataset '{path}' lacks {', '.join(missing)}; it was not written by flashnerd record")
            attrs = {k: plain_attr(v) for k, v in f.attrs.items()}
            _refuse_unsafe_storage(f, path)
            arrays = {k: f[k] for k in REQUIRED}
            groups = [k for k, a in arrays.items() if not isinstance(a, h5py.Dataset)]
            if groups:
                raise ValueError(f"dataset '{path}' stores {groups[0]} as a group, not an array; it was not written "
                                 "by flashnerd record")
            bad = [k for k, a in arrays.items() if a.ndim != 3 or a.dtype.kind not in "fiu"]
            if bad:
                raise ValueError(f"dataset '{path}' stores {bad[0]} as {arrays[bad[0]].ndim}-d "
                                 f"{arrays[bad[0]].dtype}; flashnerd record writes 3-d float arrays")
            label_arrays = _label_arrays(f, robot, attrs)
            torque = f.get("torque")  # optional, of ctrl's shape: a file without it still serves fitting
            if isinstance(torque, h5py.Dataset) and torque.dtype.kind == "f" and torque.shape == arrays["ctrl"].shape:
                label_arrays["torque"] = torque
            # each array is read at its stored width, then copied to float32
            declared = sum(a.size * (a.dtype.itemsize + 4) for a in (*arrays.values(), *label_arrays.values()))
            if not fits_in_memory(declared):
                raise ValueError(f"dataset '{path}' declares {declared / 2**30:,.1f} GiB of arrays, more than this "
                                 "machine can hold; split it or use a larger machine")
            # in native byte order: torch reads no other (a file written on a big-endian machine is still data)
            data = {k: torch.from_numpy(a.astype(a.dtype.newbyteorder("="))[()]) for k, a in arrays.items()}
            labels = {k: torch.from_numpy(a.astype("<f4")[()]) for k, a in label_arrays.items()}
    except (OSError, KeyError, TypeError, RuntimeError) as err:  # RuntimeError: a cycle of soft links
        raise ValueError(f"dataset '{path}' is truncated or corrupt ({str(err).splitlines()[0][:120]}); "
                         "record it again") from err
    version = attrs.get("format_version", 1)
    if isinstance(version, bool) or not isinstance(version, (int, float)) or not math.isfinite(version):
        raise ValueError(f"dataset '{path}' has a corrupt format_version attribute; record it again")
    if int(version) > DATASET_FORMAT_VERSION:
        raise ValueError(f"dataset '{path}' has format version {attrs['format_version']}, newer than this flashnerd "
                         f"reads ({DATASET_FORMAT_VERSION}); upgrade flashnerd or record it again")
    if robot is not None:
        check_robot(attrs, robot, path)
    qpos, qvel, ctrl = data["qpos"], data["qvel"], data["ctrl"]
    if qpos.shape[0] == 0:
        raise ValueError(f"dataset '{path}' holds no trajectories")
    if qpos.shape[1] != ctrl.shape[1] + 1 or qvel.shape[:2] != qpos.shape[:2] or ctrl.shape[0] != qpos.shape[0]:
        raise ValueError(f"dataset '{path}' has inconsistent shapes qpos {tuple(qpos.shape)}, "
                         f"qvel {tuple(qvel.shape)}, ctrl {tuple(ctrl.shape)}")
    if isinstance(attrs.get("state_layout"), str):
        try:
            attrs["state_layout"] = json.loads(attrs["state_layout"])
        except (ValueError, RecursionError) as err:
            raise ValueError(f"dataset '{path}' has a corrupt state_layout attribute ({str(err)[:100]})") from err
    robot = robot or _robot_of(attrs, path)
    touching, force = _contact_labels(labels, attrs, robot, qpos.shape[:2])
    return _validated(TrajectoryData(qpos, qvel, ctrl, attrs, touching, force, labels.get("torque")), robot, path)


MAX_CHUNK_BYTES = 1 << 28  # 256 MiB: `flashnerd record`'s chunks (`chunk_rows`) take at most 16 MiB
WRITE_CHUNK_BYTES = 1 << 24  # 16 MiB: the chunks this module writes, 64 trajectories or fewer where they are long


def chunk_rows(row_shape: tuple[int, ...], itemsize: int) -> int:
    """Trajectories per HDF5 chunk for arrays of trajectories shaped `row_shape`: 64, or fewer so that a chunk stays
    within `WRITE_CHUNK_BYTES` (a chunk is decompressed whole to read any part of it)."""
    row = math.prod(max(1, d) for d in row_shape) * itemsize
    return max(1, min(64, WRITE_CHUNK_BYTES // row))


def _refuse_unsafe_storage(f: h5py.File, path: Path) -> None:
    """Refuse arrays whose data is not in the file itself: a soft or external link, or an external or virtual dataset,
    would read another file (or another place in this one) in place of what `flashnerd record` wrote there. And
    chunks past `MAX_CHUNK_BYTES` and past twice their array: HDF5 decompresses a whole chunk to read any element of
    it, so a tiny array in one huge chunk of compressed zeros takes that chunk's memory (a chunk about its array's
    size costs what reading the array costs, which the readers count). Every member is checked, read or not, so no
    optional array slips through."""
    for name in f:
        link = f.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise ValueError(f"dataset '{path}' stores {name} as an HDF5 {type(link).__name__} to another place; "
                             "flashnerd reads only arrays stored in the dataset file itself, record it again")
        node = f[name]
        if isinstance(node, h5py.Dataset) and (node.external or node.is_virtual):
            raise ValueError(f"dataset '{path}' keeps the data of {name} in other files (HDF5 external or virtual "
                             "storage); flashnerd reads only arrays stored in the dataset file itself, record it again")
        if isinstance(node, h5py.Dataset) and node.chunks:
            chunk = math.prod(node.chunks) * node.dtype.itemsize
            if chunk > MAX_CHUNK_BYTES and chunk > 2 * node.size * node.dtype.itemsize:
                raise ValueError(f"dataset '{path}' stores {name} in chunks of {chunk / 2**20:,.0f} MiB, each "
                                 f"decompressed whole to read any part, for an array of "
                                 f"{node.size * node.dtype.itemsize / 2**20:,.1f} MiB (chunks past "
                                 f"{MAX_CHUNK_BYTES >> 20} MiB and twice their array are refused); write it with "
                                 "smaller chunks, or record it again")


def _label_arrays(f: h5py.File, robot: RobotSpec | None, attrs: dict) -> dict[str, h5py.Dataset]:
    """The file's contact-label arrays that are shaped like labels of its trajectories for the robot it names (one
    column per contact body): `contact_force` (M, T, nb) or `contact` (M, T+1, nb); nothing for an unknown robot."""
    try:
        robot = robot or _named_robot(attrs)
    except ValueError:
        return {}
    m, t1 = f["qpos"].shape[:2]
    nb = len(robot.all_contact_bodies)
    shapes = {"contact_force": (m, t1 - 1, nb), "contact": (m, t1, nb)}
    return {k: f[k] for k, shape in shapes.items()
            if isinstance(f.get(k), h5py.Dataset) and f[k].dtype.kind in "fiu" and f[k].shape == shape}


def _contact_labels(labels: dict[str, torch.Tensor], attrs: dict, robot: RobotSpec,
                    shape: tuple[int, int]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(touching, contact_force) of a file's arrays: `contact_force` (M, T, nb) from `flashnerd record`, or a robot
    log's contact flags `contact` (M, T+1, nb). Labels that do not cover the robot's contact bodies (in its order) at
    every step, or are not finite (or a negative force), are left out (the file still serves dynamics fitting, not a
    contact head)."""
    (m, t1), nb = shape, len(robot.all_contact_bodies)
    named = attrs.get("contact_bodies")
    try:
        if named is not None and json.loads(named) != list(robot.all_contact_bodies):
            return None, None
    except (TypeError, ValueError, RecursionError):
        return None, None
    force = labels.get("contact_force")
    if force is not None and force.shape == (m, t1 - 1, nb) and bool((torch.isfinite(force) & (force >= 0)).all()):
        return (force > CONTACT_LABEL_N).float(), force
    flags = labels.get("contact")
    if flags is not None and flags.shape == (m, t1, nb) and bool(torch.isfinite(flags).all()):
        return (flags[:, 1:] >= 0.5).float(), None  # the flag at the end of each step
    return None, None


def _robot_of(attrs: dict, path: Path) -> RobotSpec:
    """The robot a dataset names (built in, or from the spec file it names), checked against its model hash."""
    robot = _named_robot(attrs)
    check_robot(attrs, robot, path)
    return robot


def _named_robot(attrs: dict) -> RobotSpec:
    return robot_of_record(str(attrs.get("robot")), str(attrs.get("robot_spec", "") or ""))


def robot_layout(robot: RobotSpec) -> tuple[int, int, int, tuple[int, ...]]:
    """(nq, nv, nu, qpos address of every unit quaternion) of `robot` alone, as `flashnerd record` stores it."""
    key = (robot.name, robot.model_hash())
    if key not in _LAYOUTS:
        model = build_scene(robot)
        free, ball = int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL)
        types = [int(t) for t in model.jnt_type]
        quats = [int(model.jnt_qposadr[j]) + (3 if t == free else 0) for j, t in enumerate(types) if t in (free, ball)]
        _LAYOUTS[key] = (model.nq, model.nv, model.nu, tuple(quats))
    return _LAYOUTS[key]


def _validated(data: TrajectoryData, robot: RobotSpec, path: Path) -> TrajectoryData:
    """`data` as float32 with its layout and time step checked against `robot` and bad trajectories dropped."""
    nq, nv, nu, quats = robot_layout(robot)
    got = (data.qpos.shape[-1], data.qvel.shape[-1], data.ctrl.shape[-1])
    if got != (nq, nv, nu):
        raise ValueError(f"dataset '{path}' stores (nq, nv, nu) = {got}, robot '{robot.name}' has {(nq, nv, nu)}; "
                         "it was recorded with another model layout, record it again")
    dt = data.attrs.get("control_dt")
    if not isinstance(dt, (int, float)) or not math.isclose(dt, robot.control_dt, rel_tol=1e-6):
        raise ValueError(f"dataset '{path}' has control_dt {dt!r}, robot '{robot.name}' steps "
                         f"{robot.control_dt} s; record (or resample) it at the robot's control step")
    qpos, qvel, ctrl = data.qpos.float(), data.qvel.float(), data.ctrl.float()
    finite = torch.from_numpy(sane_trajectories(qpos, qvel, ctrl))  # (M,)
    unit = torch.ones_like(finite)  # (M,)
    for adr in quats:
        norm = qpos[..., adr:adr + 4].norm(dim=-1)  # (M, T+1)
        unit &= ((norm - 1).abs() < QUAT_TOL).all(1) | ~finite
    keep = finite & unit  # (M,)
    dropped = {"non_finite": int((~finite).sum()), "quaternion": int((~unit).sum())}
    if not bool(keep.any()):
        raise ValueError(f"dataset '{path}' holds no usable trajectory ({dropped['non_finite']} non-finite or "
                         f"beyond {MAX_ABS:g}, {dropped['quaternion']} with a non-unit quaternion); record it again")
    data = TrajectoryData(qpos, qvel, ctrl, {**data.attrs, "dropped_on_read": dropped,
                                             "variants": [_variant_name(data.attrs, path)]},
                          data.touching, data.contact_force, data.torque)
    return data if bool(keep.all()) else data.select(keep)


def _variant_name(attrs: dict, path: Path) -> str:
    """The name of the robot variant a dataset was recorded on ("" for the nominal robot)."""
    text = str(attrs.get("variant", "") or "")
    if not text:
        return ""
    try:
        return str(json.loads(text)["name"])
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        raise ValueError(f"dataset '{path}' has a corrupt variant attribute; record it again") from err


def load_datasets(paths: Sequence[str | Path], robot: RobotSpec | None = None) -> TrajectoryData:
    """Load one or more datasets of the same robot and trajectory length as one (trajectories concatenated)."""
    parts = [load_dataset(p, robot) for p in paths]
    if not parts:
        raise ValueError("no dataset given")
    first = parts[0]
    for path, d in zip(paths[1:], parts[1:]):
        if d.attrs.get("robot") != first.attrs.get("robot") or d.attrs.get("model_hash") != first.attrs.get(
                "model_hash"):
            raise ValueError(f"dataset '{path}' is for robot {d.attrs.get('robot')} ({d.attrs.get('model_hash')}), "
                             f"'{paths[0]}' for {first.attrs.get('robot')} ({first.attrs.get('model_hash')}); "
                             "fit one robot at a time")
        if d.attrs.get("terrain", "flat") != first.attrs.get("terrain", "flat"):
            raise ValueError(f"dataset '{path}' was recorded on terrain '{d.attrs.get('terrain', 'flat')}', "
                             f"'{paths[0]}' on '{first.attrs.get('terrain', 'flat')}'; fit data of one terrain")
        if d.traj_len != first.traj_len:
            raise ValueError(f"dataset '{path}' has {d.traj_len}-step trajectories, '{paths[0]}' {first.traj_len}; "
                             "record them with the same --traj_len")
    if len(parts) == 1:
        return first
    variants = [v for d in parts for v in d.attrs["variants"]]  # a fit may mix simulation and robot data
    cat = lambda k: torch.cat([getattr(d, k) for d in parts])  # noqa: E731  (sum M, T(+1), D)
    labelled = lambda k: cat(k) if all(getattr(d, k) is not None for d in parts) else None  # noqa: E731
    dropped = {k: sum(d.attrs["dropped_on_read"][k] for d in parts) for k in first.attrs["dropped_on_read"]}
    return TrajectoryData(cat("qpos"), cat("qvel"), cat("ctrl"), {**first.attrs, "dropped_on_read": dropped,
                                                                   "variants": variants},
                          labelled("touching"), labelled("contact_force"), labelled("torque"))


def plain_attr(value):
    """An HDF5 attribute as a Python value: numpy scalars -> int/float, arrays -> lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def check_robot(attrs: dict, robot: RobotSpec, path: str | Path) -> None:
    """Refuse a dataset recorded for another robot, or for another version of this robot's model."""
    if attrs.get("robot") != robot.name:
        raise ValueError(f"dataset '{path}' was recorded for robot '{attrs.get('robot')}', not '{robot.name}'")
    if attrs.get("model_hash") != robot.model_hash():
        raise ValueError(f"dataset '{path}' was recorded with another version of the '{robot.name}' model "
                         f"(hash {attrs.get('model_hash')} != {robot.model_hash()}); record it again")


def sane_trajectories(*arrays) -> np.ndarray:
    """(M,) mask of the trajectories whose values in every array (M, ...) are finite and below MAX_ABS in size: the
    one divergence filter of every writer and of the reader."""
    keep = np.ones(len(arrays[0]), dtype=bool)
    for a in arrays:
        x = np.asarray(a).reshape(len(a), -1)
        keep &= (np.isfinite(x) & (np.abs(x) < MAX_ABS)).all(1)
    return keep


def dataset_attrs(robot: RobotSpec, nq: int, nv: int, nu: int, **extra) -> dict:
    """The attributes every dataset file carries (see docs/reference/dataset.md), plus `extra`."""
    variant = json.dumps(robot.variant.describe(), sort_keys=True) if robot.variant else ""
    return {"robot": robot.name, "model_hash": robot.model_hash(), "robot_spec": robot.source,
            "control_dt": robot.control_dt, "nq": nq,
            "nv": nv, "nu": nu, "format_version": DATASET_FORMAT_VERSION, "flashnerd_version": flashnerd.__version__,
            "variant": variant, **extra}


def _growable(shape: tuple[int, ...]) -> tuple[int | None, ...]:
    """HDF5 max shape: unlimited trajectories; a zero-width axis unlimited too, since its chunk must be >= 1."""
    return (None, *(d or None for d in shape[1:]))


def write_arrays(path: str | Path, arrays: dict[str, np.ndarray], attrs: dict, compress: bool = True) -> None:
    """The one writer of dataset files: every array (leading axis = trajectories, growable) and the attributes go
    to a temporary file renamed to `path` once complete, so a file at `path` is never torn."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        for name, value in arrays.items():
            value = np.asarray(value, dtype=np.float32)
            # zero-width arrays (a robot without probes) still need chunks of at least 1
            rows = min(chunk_rows(value.shape[1:], value.dtype.itemsize), value.shape[0])
            chunks = (max(1, rows), *(max(1, d) for d in value.shape[1:]))
            f.create_dataset(name, data=value, maxshape=_growable(value.shape), chunks=chunks,
                             **({"compression": "gzip", "compression_opts": 4} if compress else {}))
        f.attrs.update(attrs)


def concat_files(parts: Sequence[str | Path], out: str | Path, attrs: dict) -> int:
    """Stream the arrays of `parts` (files of `write_arrays` with the same layout), in order, into one compressed
    file `out` (temp file, then rename) with the first part's attributes updated by `attrs`; returns the number of
    trajectories. Memory stays bounded by slabs of 256 trajectories."""
    total, layout = 0, None
    with atomic_path(out) as tmp, h5py.File(tmp, "w") as f:
        for i, part in enumerate(parts):
            with h5py.File(part, "r") as src:
                _refuse_unsafe_storage(src, Path(part))
                arrays = {k: (d.shape[1:], d.dtype) if isinstance(d, h5py.Dataset) and d.ndim else None
                          for k, d in src.items()}
                counts = {d.shape[0] for d in src.values() if isinstance(d, h5py.Dataset) and d.ndim}
                if i == 0:
                    layout = arrays
                if arrays != layout or None in arrays.values() or len(counts) != 1:
                    raise ValueError(f"'{part}' does not hold arrays of the layout of '{parts[0]}' (the same names, "
                                     "widths and types, one trajectory count); record it again")
                if i == 0:
                    f.attrs.update(dict(src.attrs))
                    for k, d in src.items():
                        chunks = (chunk_rows(d.shape[1:], d.dtype.itemsize), *(max(1, n) for n in d.shape[1:]))
                        f.create_dataset(k, shape=(0, *d.shape[1:]), maxshape=_growable(d.shape),
                                         dtype=d.dtype, chunks=chunks, compression="gzip", compression_opts=4)
                n = counts.pop()
                for k, d in src.items():
                    dst = f[k]
                    dst.resize(total + n, axis=0)
                    for a in range(0, n, 256):
                        dst[total + a:total + min(n, a + 256)] = d[a:min(n, a + 256)]
                total += n
        f.attrs.update(attrs)
    return total


def write_dataset(path: str | Path, robot: RobotSpec, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor,
                  **attrs) -> dict:
    """Write trajectories qpos (M, T+1, nq), qvel (M, T+1, nv), ctrl (M, T, nu) in `flashnerd record`'s format
    (with `write_arrays`); `attrs` are added to the file's attributes (terrain, source, ...)."""
    if qpos.shape[:2] != qvel.shape[:2] or qpos.shape[1] != ctrl.shape[1] + 1 or qpos.shape[0] != ctrl.shape[0]:
        raise ValueError(f"inconsistent shapes qpos {tuple(qpos.shape)}, qvel {tuple(qvel.shape)}, "
                         f"ctrl {tuple(ctrl.shape)}")
    finite = torch.from_numpy(sane_trajectories(qpos, qvel))  # (M,)
    qpos, qvel, ctrl = qpos[finite], qvel[finite], ctrl[finite]
    write_arrays(path, {"qpos": qpos.numpy(), "qvel": qvel.numpy(), "ctrl": ctrl.numpy()},
                 dataset_attrs(robot, qpos.shape[2], qvel.shape[2], ctrl.shape[2], num_trajectories=qpos.shape[0],
                               dropped=int((~finite).sum()), **attrs))
    return {"out": str(path), "trajectories": int(qpos.shape[0]), "dropped": int((~finite).sum()),
            "traj_len": int(ctrl.shape[1]), "transitions": int(ctrl.shape[0] * ctrl.shape[1])}
