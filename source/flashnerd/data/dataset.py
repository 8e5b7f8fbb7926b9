"""Read recorded HDF5 datasets (with clear errors for missing, corrupt or foreign files) into torch tensors."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import torch

import flashnerd
from flashnerd.robots import RobotSpec

REQUIRED = ("qpos", "qvel", "ctrl")
DATASET_FORMAT_VERSION = 1  # the layout `flashnerd record` writes and this module reads


@dataclass
class TrajectoryData:
    """All trajectories of a dataset: qpos (M, T+1, nq), qvel (M, T+1, nv), ctrl (M, T, nu) + attributes."""

    qpos: torch.Tensor
    qvel: torch.Tensor
    ctrl: torch.Tensor
    attrs: dict

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
        pick = lambda idx: TrajectoryData(self.qpos[idx], self.qvel[idx], self.ctrl[idx], self.attrs)  # noqa: E731
        return pick(train), pick(val)


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
            data = {k: torch.from_numpy(f[k][()]) for k in REQUIRED}
    except (OSError, KeyError) as err:
        raise ValueError(f"dataset '{path}' is truncated or corrupt ({str(err).splitlines()[0][:120]}); "
                         "record it again") from err
    if int(attrs.get("format_version", 1)) > DATASET_FORMAT_VERSION:
        raise ValueError(f"dataset '{path}' has format version {attrs['format_version']}, newer than this flashnerd "
                         f"reads ({DATASET_FORMAT_VERSION}); upgrade flashnerd or record it again")
    if robot is not None:
        check_robot(attrs, robot, path)
    qpos, qvel, ctrl = data["qpos"], data["qvel"], data["ctrl"]
    if qpos.shape[0] == 0:
        raise ValueError(f"dataset '{path}' holds no trajectories")
    if qpos.shape[1] != ctrl.shape[1] + 1 or qvel.shape[:2] != qpos.shape[:2]:
        raise ValueError(f"dataset '{path}' has inconsistent shapes qpos {tuple(qpos.shape)}, "
                         f"qvel {tuple(qvel.shape)}, ctrl {tuple(ctrl.shape)}")
    if "state_layout" in attrs and isinstance(attrs["state_layout"], str):
        attrs["state_layout"] = json.loads(attrs["state_layout"])
    return TrajectoryData(qpos.float(), qvel.float(), ctrl.float(), attrs)


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
    cat = lambda k: torch.cat([getattr(d, k) for d in parts])  # noqa: E731  (sum M, T(+1), D)
    return TrajectoryData(cat("qpos"), cat("qvel"), cat("ctrl"), first.attrs)


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


def write_dataset(path: str | Path, robot: RobotSpec, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor,
                  **attrs) -> dict:
    """Write trajectories qpos (M, T+1, nq), qvel (M, T+1, nv), ctrl (M, T, nu) in `flashnerd record`'s format
    (through a temporary file, then renamed); `attrs` are added to the file's attributes (terrain, source, ...)."""
    path = Path(path)
    if qpos.shape[:2] != qvel.shape[:2] or qpos.shape[1] != ctrl.shape[1] + 1 or qpos.shape[0] != ctrl.shape[0]:
        raise ValueError(f"inconsistent shapes qpos {tuple(qpos.shape)}, qvel {tuple(qvel.shape)}, "
                         f"ctrl {tuple(ctrl.shape)}")
    finite = torch.isfinite(qpos).flatten(1).all(1) & torch.isfinite(qvel).flatten(1).all(1)  # (M,)
    finite &= (qpos.abs().flatten(1).amax(1) < 1e5) & (qvel.abs().flatten(1).amax(1) < 1e5)
    qpos, qvel, ctrl = qpos[finite], qvel[finite], ctrl[finite]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        for name, value in (("qpos", qpos), ("qvel", qvel), ("ctrl", ctrl)):
            f.create_dataset(name, data=value.float().numpy(), compression="gzip", compression_opts=4)
        f.attrs.update({"robot": robot.name, "model_hash": robot.model_hash(), "control_dt": robot.control_dt,
                        "nq": qpos.shape[2], "nv": qvel.shape[2], "nu": ctrl.shape[2],
                        "format_version": DATASET_FORMAT_VERSION, "flashnerd_version": flashnerd.__version__,
                        "num_trajectories": qpos.shape[0], "dropped": int((~finite).sum()), **attrs})
    os.replace(tmp, path)
    return {"out": str(path), "trajectories": int(qpos.shape[0]), "dropped": int((~finite).sum()),
            "traj_len": int(ctrl.shape[1]), "transitions": int(ctrl.shape[0] * ctrl.shape[1])}
