"""Robot logs, the way a lab keeps them: one row per sample in a Parquet or CSV file (docs/reference/robot_logs.md),
read with pandas/pyarrow and turned into the project's HDF5 dataset by `import_logs`.

Columns (joint names are the robot's, so the order of the columns does not matter):

    time                                      s, strictly increasing within an episode
    episode                                   optional: runs of one file (time may restart in each)
    q_<joint>, dq_<joint>                     every joint of the robot: rad (m for a slide joint), rad/s
    target_<joint>                            the position target sent to each actuated joint, applied from this row on
    base_pos_{x,y,z}, base_quat_{w,x,y,z}     floating base: world position (m) and orientation
    base_lin_vel_{x,y,z}, base_ang_vel_{x,y,z}  floating base: m/s and rad/s in the base frame (state estimation, IMU)
    tau_<joint>, contact_<body>               optional: measured joint torque (N m), contact of each contact body (0, 1)

Import resamples each run to the robot's control step (states interpolated, quaternions normalized, targets held
from the last one sent), splits runs at gaps, drops and counts rows that are not finite, cuts each segment into
trajectories that end at its last row (a run that ends in a fall keeps the steps before it), and checks units against
the robot (velocities against the derivative of the positions, positions and targets against the joint and control
ranges). Every problem is a one-line `LogError`. The stand-in robot writes this format too (`write_log`, used by
`flashnerd record --format logs`), so a lab's path is the tested one. ROS 2 bags (rosbag2, MCAP) come in through
data/rosbag.py, which reads their topics into these rows.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection
from pathlib import Path

import mujoco
import numpy as np
import pandas as pd
import torch

from flashnerd.data.dataset import dataset_attrs, robot_layout, write_arrays
from flashnerd.data.log_columns import BASE, BASE_COLUMNS, QUAT_TOLERANCE
from flashnerd.data.rosbag import BAG_SUFFIXES, BagError, is_bag, read_bag
from flashnerd.data.rosbag_write import write_bag
from flashnerd.models.contact_head import CONTACT_LABEL_N
from flashnerd.robots import RobotSpec, robot_of_record
from flashnerd.sim.scene import build_scene, robot_columns
from flashnerd.utils.atomic import atomic_path
from flashnerd.utils.digest import file_sha256
from flashnerd.utils.host_memory import fits_in_memory
from flashnerd.utils.math import quat_apply, quat_apply_inverse

SUFFIXES = (".parquet", ".csv")
OUT_SUFFIXES = (*SUFFIXES, *BAG_SUFFIXES)  # what `record --format logs` writes: a log file or a ROS 2 bag
GAP_FACTOR = 1.5  # a step between rows longer than this x the control step (or the log's own step) splits a run
MAX_UPSAMPLE = 100  # control steps per logged row a segment may be resampled to (a log at >= 1/100 the control rate)
RESAMPLE_COPIES = 6  # float64 copies of every resampled step alive at once (interpolation, windows, the joined arrays)
CSV_EXPANSION = 16  # bytes in memory per byte of CSV at the peak of a read: "0," is 2 bytes on disk, 8 as float64,
# and pandas joins its chunks into a second copy; the runs and segments copy again
MAX_PIECES = 100_000  # episodes, and segments, one log file may split into: each is a frame worked on apart
UNIT_RATIO = (0.5, 2.0)  # a velocity column must be within these factors of the derivative of its position
MIN_MOTION = 0.05  # rad/s or m/s RMS of the derivative below which a column is too still to check its units
RANGE_MARGIN = 0.5  # rad (or m) a joint may sit beyond its range before the log is taken for the wrong unit
META_KEY = b"flashnerd.variant"  # Parquet file metadata: the variant the stand-in robot logged (JSON)


class LogError(ValueError):
    """A robot log that cannot be imported, with a one-line reason."""


class _Layout:
    """Where the robot's joints sit in qpos/qvel and what a log must name."""

    def __init__(self, robot: RobotSpec) -> None:
        model = build_scene(robot)
        nq_r, _ = robot_columns(robot, model)
        self.robot, self.nq, self.nv, self.nu, _ = robot, *robot_layout(robot)
        joints = [j for j in range(model.njnt) if model.jnt_qposadr[j] < nq_r
                  and model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE]
        if any(model.jnt_type[j] == mujoco.mjtJoint.mjJNT_BALL for j in joints):
            raise LogError(f"robot '{robot.name}' has a ball joint; robot logs support hinge and slide joints only")
        self.joints = [model.joint(j).name for j in joints]
        self.qadr = np.array([model.jnt_qposadr[j] for j in joints], dtype=int)
        self.dadr = np.array([model.jnt_dofadr[j] for j in joints], dtype=int)
        self.range = np.where(model.jnt_limited[joints].astype(bool)[:, None], model.jnt_range[joints],
                              [-np.inf, np.inf])  # (nj, 2)
        self.actuated = list(robot.joint_names)
        limited = model.actuator_ctrllimited.astype(bool)[:, None]
        self.ctrl_range = np.where(limited, model.actuator_ctrlrange, [-np.inf, np.inf])  # (nu, 2)
        self.contacts = list(robot.all_contact_bodies)
        self.floating = robot.floating_base

    def state_columns(self) -> list[str]:
        base = list(BASE_COLUMNS) if self.floating else []
        return [*base, *(f"q_{j}" for j in self.joints), *(f"dq_{j}" for j in self.joints)]

    def target_columns(self) -> list[str]:
        return [f"target_{j}" for j in self.actuated]


# --- writing (the stand-in robot) -------------------------------------------------------------------------------

def log_frame(robot: RobotSpec, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray,
              torque: np.ndarray | None = None, contact: np.ndarray | None = None) -> pd.DataFrame:
    """Trajectories qpos (M, T+1, nq), qvel (M, T+1, nv), ctrl (M, T, nu) (and torque (M, T, nu), contact flags
    (M, T, nb) per contact body) as log rows: one episode per trajectory, T+1 rows each; the last row of an episode
    has no target (nothing was sent after it)."""
    lay = _Layout(robot)
    m, t1 = qpos.shape[:2]
    cols: dict[str, np.ndarray] = {"episode": np.repeat(np.arange(m), t1),
                                   "time": np.tile(np.arange(t1) * robot.control_dt, m)}
    flat_q, flat_v = qpos.reshape(m * t1, -1).astype(np.float64), qvel.reshape(m * t1, -1).astype(np.float64)
    if lay.floating:
        quat = torch.from_numpy(flat_q[:, 3:7])
        lin_b = quat_apply_inverse(quat, torch.from_numpy(flat_v[:, 0:3])).numpy()  # world -> base frame
        for i, name in enumerate(BASE["pos"]):
            cols[name] = flat_q[:, i]
        for i, name in enumerate(BASE["quat"]):
            cols[name] = flat_q[:, 3 + i]
        for i, name in enumerate(BASE["lin_vel"]):
            cols[name] = lin_b[:, i]
        for i, name in enumerate(BASE["ang_vel"]):  # MuJoCo's free-joint angular velocity is in the body frame
            cols[name] = flat_v[:, 3 + i]
    for j, name in enumerate(lay.joints):
        cols[f"q_{name}"], cols[f"dq_{name}"] = flat_q[:, lay.qadr[j]], flat_v[:, lay.dadr[j]]
    pad = lambda a: np.concatenate([a, np.full((m, 1, a.shape[2]), np.nan)], 1).reshape(m * t1, -1)  # noqa: E731
    targets = pad(ctrl.astype(np.float64))
    for i, name in enumerate(lay.actuated):
        cols[f"target_{name}"] = targets[:, i]
    if torque is not None:  # a step's torque is measured at its end: row t + 1
        taus = np.concatenate([np.full((m, 1, torque.shape[2]), np.nan), torque.astype(np.float64)], 1)
        taus = taus.reshape(m * t1, -1)
        for i, name in enumerate(lay.actuated):
            cols[f"tau_{name}"] = taus[:, i]
    if contact is not None:  # a step's contact is reported at its end: row t + 1 (row 0 repeats row 1)
        flags = np.concatenate([contact[:, :1], contact], 1).astype(np.float64).reshape(m * t1, -1)
        for i, name in enumerate(lay.contacts):
            cols[f"contact_{name}"] = flags[:, i]
    return pd.DataFrame(cols)


def write_log(path: str | Path, frame: pd.DataFrame, variant: str = "") -> None:
    """Write log rows to `path` (.parquet or .csv; temp file, then rename). A Parquet file keeps `variant` (the
    JSON of the robot variant that made it) in its metadata."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise LogError(f"robot log '{path}' must end in {' or '.join(SUFFIXES)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        if path.suffix == ".csv":
            frame.to_csv(tmp, index=False)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(frame, preserve_index=False)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: variant.encode()})
            pq.write_table(table, tmp)


# --- reading and importing --------------------------------------------------------------------------------------

def read_log(path: str | Path, used: Collection[str] = ()) -> tuple[pd.DataFrame, str]:
    """The rows of a log file and the variant JSON in its metadata ("" when none); data only, no code runs. Of a
    Parquet file the columns of numbers are read, and a column named in `used` that holds none is an error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"robot log '{path}' does not exist")
    if path.suffix not in SUFFIXES:
        raise LogError(f"robot log '{path}' must be {' or '.join(SUFFIXES)}, got '{path.suffix}'")
    too_large = (f"robot log '{path}' is too large for this machine's memory ({{}} GiB once read); split it into "
                 "several files")
    expansion = CSV_EXPANSION if path.suffix == ".csv" else 4  # rows expand as they are read
    if not fits_in_memory(expansion * path.stat().st_size):
        raise LogError(too_large.format(f"{expansion * path.stat().st_size / 2**30:,.1f}"))
    import pyarrow as pa

    try:
        if path.suffix == ".csv":
            return pd.read_csv(path), ""
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(path)
        columns = _numeric_columns(parquet.schema_arrow, path, set(used))
        # compressed pages can hold thousands of times their size; numbers decompress to at most 8 bytes a row. The
        # reader sizes each row group by its own row count, so those are what is checked, and each group is read
        # alone and held to its count (a footer is the file's word, not a fact)
        meta = parquet.metadata
        groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        if sum(groups) != meta.num_rows or min(groups, default=0) < 0:
            raise LogError(f"robot log '{path}' declares {meta.num_rows:,} rows and row groups of {sum(groups):,}; "
                           "it is corrupt: write it again")
        declared = meta.num_rows * max(len(columns), 1) * 8
        if not fits_in_memory(4 * declared):  # the Arrow table, the pandas frame and the arrays made from them
            raise LogError(too_large.format(f"{4 * declared / 2**30:,.1f}"))
        read = [j for j in range(meta.num_columns) if meta.schema.column(j).path in columns]
        pages = sum(max(0, meta.row_group(i).column(j).total_uncompressed_size) for i in range(len(groups))
                    for j in read)
        if not fits_in_memory(pages):  # a column's pages are decompressed whole, whatever rows are kept of them
            raise LogError(too_large.format(f"{pages / 2**30:,.1f}"))
        parts = []
        for i, rows in enumerate(groups):
            part = parquet.read_row_group(i, columns=columns)
            if part.num_rows != rows:
                raise LogError(f"robot log '{path}': row group {i} holds {part.num_rows:,} rows where its footer "
                               f"declares {rows:,}; it is corrupt: write it again")
            parts.append(part)
        table = pa.concat_tables(parts) if parts else parquet.schema_arrow.empty_table().select(columns)
        variant = (parquet.schema_arrow.metadata or {}).get(META_KEY, b"").decode("utf-8", "replace")
        # the pandas metadata a writer stored (index, dtypes, attrs) is the file's word, not data: not followed
        return table.to_pandas(ignore_metadata=True), variant
    except LogError:
        raise
    except (OSError, ValueError, pa.ArrowException) as err:
        first = str(err).strip().splitlines()[0][:120] if str(err).strip() else type(err).__name__
        raise LogError(f"robot log '{path}' cannot be read ({first}); write it again") from err


def _numeric_columns(schema, path: Path, used: set[str]) -> list[str]:
    """The columns of a Parquet log to read: those holding numbers (or booleans). A column of another type (text,
    lists, structs, binary) is not read, so nothing it declares is decompressed; one in `used` is an error."""
    import pyarrow as pa

    seen: set[str] = set()
    twice = next((n for n in schema.names if n in seen or seen.add(n)), None)
    if twice is not None:
        raise LogError(f"robot log '{path}' has two columns named {twice}; name each column once")
    numeric = []
    for field in schema:
        if pa.types.is_integer(field.type) or pa.types.is_floating(field.type) or pa.types.is_boolean(field.type):
            numeric.append(field.name)
        elif field.name in used:
            raise LogError(f"robot log '{path}': column {field.name} holds {str(field.type)[:60]}, not numbers")
    return numeric


def _checked_columns(frame: pd.DataFrame, lay: _Layout, where: str) -> None:
    names = set(frame.columns)
    for prefix, expected in (("q_", lay.joints), ("dq_", lay.joints), ("target_", lay.actuated)):
        given = sorted(c[len(prefix):] for c in names if c.startswith(prefix))
        extra, absent = [g for g in given if g not in expected], [e for e in expected if e not in given]
        if extra or absent:
            which = f"unknown: {prefix}{extra[0]}" if extra else f"missing: {prefix}{absent[0]}"
            raise LogError(f"robot log '{where}' has {len(given)} {prefix}<joint> columns, robot '{lay.robot.name}' "
                           f"has {len(expected)} ({which}); log each of the robot's joints by name")
    required = ["time", *lay.state_columns(), *lay.target_columns()]
    missing = [c for c in required if c not in names]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise LogError(f"robot log '{where}' lacks column {missing[0]}{more}; see docs/reference/robot_logs.md")
    optional = [f"tau_{j}" for j in lay.actuated] + [f"contact_{b}" for b in lay.contacts] + ["episode"]
    for c in [*required, *(c for c in optional if c in names)]:
        if not pd.api.types.is_numeric_dtype(frame[c]):
            raise LogError(f"robot log '{where}': column {c} holds {frame[c].dtype}, not numbers")


def _runs(frame: pd.DataFrame, where: str) -> tuple[list[pd.DataFrame], int]:
    """The episodes of a log, each in row order, with time checked to increase strictly; and the number of rows
    dropped for an episode number that is not finite (they belong to no run)."""
    dropped = 0
    if "episode" in frame:
        finite = np.isfinite(frame["episode"].to_numpy(dtype=float))
        dropped = int((~finite).sum())
        if pd.unique(frame["episode"].to_numpy()[finite]).size > MAX_PIECES:  # before a frame is made for each
            raise LogError(f"robot log '{where}' has more than {MAX_PIECES:,} episode numbers; log runs of many rows")
        runs = [g for _, g in frame[finite].groupby("episode", sort=False)]
    else:
        runs = [frame]
    for run in runs:
        t = run["time"].to_numpy(dtype=float)
        ok = np.isfinite(t)
        back = np.flatnonzero(np.diff(t[ok]) <= 0)
        if back.size:
            i = back[0]
            raise LogError(f"robot log '{where}': time does not increase at row {run.index[ok][i + 1]} "
                           f"({t[ok][i + 1]:g} s after {t[ok][i]:g} s); sort it, or give each run its own episode")
    return runs, dropped


def _segments(run: pd.DataFrame, lay: _Layout, dt: float) -> tuple[list[pd.DataFrame], int]:
    """Split a run at rows that are not finite (dropped) and at gaps in time; returns (segments, rows dropped). A
    row whose state is finite but whose target is not may end a segment (no target followed it)."""
    state = run[["time", *lay.state_columns()]].to_numpy(dtype=float)
    good = np.isfinite(state).all(1)  # (R,)
    target_ok = np.isfinite(run[lay.target_columns()].to_numpy(dtype=float)).all(1)  # (R,)
    t = run["time"].to_numpy(dtype=float)
    step = np.median(np.diff(t[good])) if good.sum() > 1 else dt
    cut = np.zeros(len(run), dtype=bool)  # a new segment starts at this row
    cut[1:] = np.diff(t) > GAP_FACTOR * max(step, dt)
    segments, start, dropped = [], None, int((~good).sum())
    for i in range(len(run) + 1):
        end_here = i == len(run) or not good[i] or cut[i]
        if end_here and start is not None:
            segments.append(run.iloc[start:i])
            start = None
        if i < len(run) and good[i] and start is None:
            start = i
        if i < len(run) and good[i] and not target_ok[i] and start is not None:  # keep it as the last row
            segments.append(run.iloc[start:i + 1])
            start = None
    return segments, dropped


def _check_rate(seg: pd.DataFrame, dt: float, where: str) -> None:
    """A segment may be resampled to at most `MAX_UPSAMPLE` control steps per logged row: rows further apart are no
    trajectory to interpolate (most often time logged in ms or ns), and resampling them would need memory without
    bound (two rows 1e7 s apart make 5e8 steps)."""
    t = seg["time"].to_numpy(dtype=float)
    steps = (t[-1] - t[0]) / dt
    if steps > MAX_UPSAMPLE * len(t):
        raise LogError(f"robot log '{where}': {len(t)} rows span {t[-1] - t[0]:g} s, {steps:.3g} control steps of "
                       f"{dt:g} s (more than {MAX_UPSAMPLE} per row); log time in s, at no less than 1/{MAX_UPSAMPLE} "
                       "of the control rate")


def _resampled(seg: pd.DataFrame, lay: _Layout, dt: float) -> dict[str, np.ndarray]:
    """One segment at the control step: qpos (L, nq), qvel (L, nv), ctrl (L-1, nu), and tau/contact if logged."""
    t = seg["time"].to_numpy(dtype=float)
    grid = t[0] + dt * np.arange(int(math.floor((t[-1] - t[0]) / dt + 1e-6)) + 1)  # (L,)
    lo = np.clip(np.searchsorted(t, grid + 1e-6 * dt, side="right") - 1, 0, len(t) - 1)  # (L,) row at or before
    hi = np.minimum(lo + 1, len(t) - 1)  # (L,)
    gap = np.where(hi > lo, t[hi] - t[lo], 1.0)  # (L,)
    w = np.where(hi > lo, np.clip((grid - t[lo]) / gap, 0.0, 1.0), 0.0)  # (L,) 0 on a logged row
    w[np.abs(grid - t[lo]) < 1e-6 * dt] = 0.0
    w = w[:, None]  # (L, 1)

    def interp(cols: list[str]) -> np.ndarray:
        x = seg[cols].to_numpy(dtype=float)  # (R, k)
        return np.where(w > 0, (1 - w) * x[lo] + w * x[hi], x[lo])  # (L, k); a row's own value where logged

    qpos, qvel = np.zeros((len(grid), lay.nq)), np.zeros((len(grid), lay.nv))
    if lay.floating:
        x = seg[list(BASE["quat"])].to_numpy(dtype=float)  # (R, 4)
        b = np.where((x[lo] * x[hi]).sum(1, keepdims=True) < 0, -x[hi], x[hi])  # (L, 4) same hemisphere
        quat = np.where(w > 0, (1 - w) * x[lo] + w * b, x[lo])  # (L, 4) normalized lerp
        quat /= np.linalg.norm(quat, axis=1, keepdims=True)
        qpos[:, 0:3], qpos[:, 3:7] = interp(list(BASE["pos"])), quat
        lin_w = quat_apply(torch.from_numpy(quat), torch.from_numpy(interp(list(BASE["lin_vel"])))).numpy()
        qvel[:, 0:3], qvel[:, 3:6] = lin_w, interp(list(BASE["ang_vel"]))  # MuJoCo: linear in world, angular in body
    qpos[:, lay.qadr] = interp([f"q_{j}" for j in lay.joints])
    qvel[:, lay.dadr] = interp([f"dq_{j}" for j in lay.joints])
    out = {"qpos": qpos, "qvel": qvel, "ctrl": seg[lay.target_columns()].to_numpy(dtype=float)[lo[:-1]]}
    if all(f"tau_{j}" in seg for j in lay.actuated):
        out["torque"] = interp([f"tau_{j}" for j in lay.actuated])[1:]  # measured over each step: at its end
    if all(f"contact_{b}" in seg for b in lay.contacts):
        out["contact"] = seg[[f"contact_{b}" for b in lay.contacts]].to_numpy(dtype=float)[lo]
    return out


def _check_units(seg: pd.DataFrame, lay: _Layout, where: str, sums: dict[str, np.ndarray]) -> None:
    """Positions and targets against their ranges; each velocity column's products with the derivative of its
    position added to `sums` (name -> [sum of logged x derivative, sum of derivative^2, samples]), whose ratio
    `_check_velocity_units` checks once per file: one short, nearly still segment gives a noisy ratio, a unit error
    is wrong in every row. A base orientation that is no unit quaternion (an estimator's zeros before it starts) is
    an error, as in a bag's odometry: normalizing it would make NaN rows."""
    with np.errstate(over="ignore", invalid="ignore"):  # a value of 1e200 is judged below, not warned about
        if lay.floating:
            norm = np.linalg.norm(seg[list(BASE["quat"])].to_numpy(dtype=float), axis=1)  # (R,)
            off = ~(np.abs(norm - 1.0) <= QUAT_TOLERANCE)
            if off.any():
                i = int(np.argmax(off))
                raise LogError(f"robot log '{where}': the base orientation at time {seg['time'].iloc[i]:g} s has norm "
                               f"{norm[i]:g}; log unit quaternions, and NaN in rows without an estimate")
        _check_ranges_and_speeds(seg, lay, where, sums)


def _check_ranges_and_speeds(seg: pd.DataFrame, lay: _Layout, where: str, sums: dict[str, np.ndarray]) -> None:
    t = seg["time"].to_numpy(dtype=float)
    if len(t) < 3:
        return
    q = seg[[f"q_{j}" for j in lay.joints]].to_numpy(dtype=float)  # (R, nj)
    beyond = (q < lay.range[:, 0] - RANGE_MARGIN) | (q > lay.range[:, 1] + RANGE_MARGIN)  # (R, nj)
    if beyond.any():
        r, j = np.argwhere(beyond)[0]
        raise LogError(f"robot log '{where}': q_{lay.joints[j]} reaches {q[r, j]:g}, outside the joint's range "
                       f"[{lay.range[j, 0]:g}, {lay.range[j, 1]:g}]; log positions in rad (m for slide joints)")
    tg = seg[lay.target_columns()].to_numpy(dtype=float)  # (R, nu)
    beyond = np.isfinite(tg) & ((tg < lay.ctrl_range[:, 0] - RANGE_MARGIN) | (tg > lay.ctrl_range[:, 1] + RANGE_MARGIN))
    if beyond.any():
        r, a = np.argwhere(beyond)[0]
        raise LogError(f"robot log '{where}': target_{lay.actuated[a]} reaches {tg[r, a]:g}, outside the control "
                       f"range [{lay.ctrl_range[a, 0]:g}, {lay.ctrl_range[a, 1]:g}]; log targets in rad")
    span = (t[2:] - t[:-2])[:, None]  # (R-2, 1) central differences
    pairs = [(f"dq_{j}", (q[2:, i:i + 1] - q[:-2, i:i + 1]) / span, seg[[f"dq_{j}"]].to_numpy(float)[1:-1])
             for i, j in enumerate(lay.joints)]
    if lay.floating:
        pos = seg[list(BASE["pos"])].to_numpy(dtype=float)
        quat = torch.from_numpy(seg[list(BASE["quat"])].to_numpy(dtype=float)[1:-1].copy())
        lin_w = quat_apply(quat, torch.from_numpy(seg[list(BASE["lin_vel"])].to_numpy(float)[1:-1].copy())).numpy()
        pairs.append(("base_lin_vel", (pos[2:] - pos[:-2]) / span, lin_w))
    for name, derivative, logged in pairs:
        sums[name] = sums.get(name, np.zeros(4)) + ((logged * derivative).sum(), (derivative ** 2).sum(),
                                                    (logged ** 2).sum(), derivative.size)


def _check_velocity_units(sums: dict[str, np.ndarray], where: str) -> None:
    """Each velocity column of a file against the derivative of its position, over all its segments."""
    for name, (cross, square, logged_square, count) in sums.items():
        # a still joint cannot tell units apart; a logged speed on a still position can (time in ms makes every
        # position change 1000x slower than its logged velocity)
        if count == 0 or max(square, logged_square) / count < MIN_MOTION ** 2:
            continue
        with np.errstate(over="ignore", invalid="ignore"):  # a speed of 1e200 makes inf / inf
            ratio = float(cross / square) if square > 0 else math.inf
        if not math.isfinite(ratio):
            raise LogError(f"robot log '{where}': {name} is not a finite multiple of the time derivative of its "
                           "position (values beyond floating point in it); log it in its units, and time in s")
        if not UNIT_RATIO[0] <= ratio <= UNIT_RATIO[1]:
            unit = "m/s in the base frame" if name == "base_lin_vel" else "rad/s (m/s for slide joints)"
            raise LogError(f"robot log '{where}': {name} is {ratio:.3g} x the time derivative of its position; log it "
                           f"in {unit}, and time in s")


def import_logs(paths: list[str | Path], robot: RobotSpec, out: str | Path, traj_len: int = 100,
                topics: dict[str, str] | None = None, stamps: str = "header") -> dict:
    """Import robot logs (log files, or ROS 2 bags read on `topics` with times from `stamps`, data/rosbag.py) into
    one dataset `out` of `traj_len`-step trajectories at the robot's control step; returns counts (rows, rows
    dropped as not finite, segments, segments shorter than a trajectory, minutes; for bags the rows without a target
    or odometry)."""
    if traj_len < 1:
        raise LogError("traj_len must be positive")
    lay, dt = _Layout(robot), robot.control_dt
    arrays: dict[str, list[np.ndarray]] = {}
    counts = {"rows": 0, "non_finite_rows": 0, "segments": 0, "short_segments": 0}
    sources, variants = [], set()
    step_bytes = RESAMPLE_COPIES * 8 * (lay.nq + lay.nv + 2 * lay.nu + len(lay.contacts))  # float64 per control step
    steps = 0  # control steps resampled so far, over every file: all of them are held until the dataset is written
    # the columns the import reads: one of them that holds no numbers is an error, any other column is not read
    used = ["time", "episode", *lay.state_columns(), *lay.target_columns(), *(f"tau_{j}" for j in lay.actuated),
            *(f"contact_{b}" for b in lay.contacts)]
    for path in paths:
        if is_bag(path):
            try:
                frame, dropped_in_bag = read_bag(path, lay.joints, lay.actuated, lay.floating, topics, stamps)
            except BagError as err:
                raise LogError(str(err)) from None
            variant = ""
            for k, v in dropped_in_bag.items():
                counts[k] = counts.get(k, 0) + v
        else:
            frame, variant = read_log(path, used)
        where = str(path)
        _checked_columns(frame, lay, where)
        if variant:
            variants.add(_variant_name(variant, where))
        counts["rows"] += len(frame)
        sums: dict[str, np.ndarray] = {}
        runs, dropped = _runs(frame, where)
        counts["non_finite_rows"] += dropped
        pieces = 0
        for run in runs:
            segments, dropped = _segments(run, lay, dt)
            counts["non_finite_rows"] += dropped
            pieces += len(segments)
            if pieces > MAX_PIECES:  # each is a frame worked on apart: a file of one-row runs would take hours
                raise LogError(f"robot log '{where}' splits into more than {MAX_PIECES:,} segments (at episode "
                               "numbers, gaps in time and rows that are not finite); log runs of many rows")
            for seg in segments:
                _check_units(seg, lay, where, sums)
                _check_rate(seg, dt, where)
                steps += int((seg["time"].iloc[-1] - seg["time"].iloc[0]) / dt) + 1
                if not fits_in_memory(steps * step_bytes):
                    raise LogError(f"robot log '{where}': the logs resample to {steps:,} control steps so far, "
                                   f"{steps * step_bytes / 2**30:,.1f} GiB, more than this machine's memory holds; "
                                   "import fewer or shorter logs at a time")
                counts["segments"] += 1
                res = _resampled(seg, lay, dt)
                n = (len(res["qpos"]) - 1) // traj_len
                if n == 0:
                    counts["short_segments"] += 1
                    continue
                # windows end at the segment's last row: a run that ends in a fall keeps the steps before it, the
                # remainder dropped is at its start
                first = len(res["qpos"]) - 1 - n * traj_len
                for k, v in res.items():
                    width = traj_len + (1 if len(v) == len(res["qpos"]) else 0)
                    arrays.setdefault(k, []).append(np.stack([v[first + i * traj_len:first + i * traj_len + width]
                                                              for i in range(n)]))
        _check_velocity_units(sums, where)
        sources.append({"file": Path(path).name, "sha256": _digest(Path(path))})
    if not arrays:
        raise LogError(f"the logs hold no run of {traj_len + 1} control steps ({counts['segments']} segments, "
                       f"{counts['non_finite_rows']} rows not finite); lower --traj_len or log longer runs")
    joined = {k: np.concatenate(v) for k, v in arrays.items() if len(v) == len(arrays["qpos"])}
    m = len(joined["qpos"])
    variant = sorted(variants)[0] if len(variants) == 1 else ""
    attrs = dataset_attrs(robot, lay.nq, lay.nv, lay.nu, source="logs", terrain="flat", num_trajectories=m,
                          traj_len=traj_len, dropped=0, logs=json.dumps(sources), **counts)
    attrs["variant"] = variant
    write_arrays(out, joined, attrs)
    minutes = m * traj_len * dt / 60
    return {"out": str(out), "trajectories": m, "transitions": m * traj_len, "minutes": round(minutes, 3), **counts}


def _digest(path: Path) -> str:
    """SHA-256 of a log file, read in chunks; of a bag folder, over its files' names and contents in name order (a
    linked storage file counts as the file it links to)."""
    if path.is_file():
        with open(path, "rb") as f:
            return file_sha256(f)
    total = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        total.update(str(file.relative_to(path)).encode() + b"\0" + bytes.fromhex(_digest(file)))
    return total.hexdigest()


def _variant_name(text: str, where: str) -> str:
    """The variant JSON a stand-in log carries, checked to be what `RobotVariant.describe` writes."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise ValueError("no name")
    except (ValueError, RecursionError) as err:
        raise LogError(f"robot log '{where}' has corrupt flashnerd.variant metadata; write it again") from err
    return json.dumps(data, sort_keys=True)


def dataset_to_log(dataset: str | Path, out: str | Path) -> dict:
    """Write a dataset that `flashnerd record` has just made as a robot log `out` (what the stand-in robot logs): a
    Parquet or CSV file, or a ROS 2 bag (.mcap or .db3, data/rosbag.py)."""
    import h5py

    with h5py.File(dataset, "r") as f:
        arrays = {k: f[k][()] for k in ("qpos", "qvel", "ctrl", "torque", "contact_force") if k in f}
        variant = str(f.attrs.get("variant", "") or "")
        # the layout a log names is the nominal robot's
        robot = robot_of_record(str(f.attrs["robot"]), str(f.attrs.get("robot_spec", "") or ""))
    force = arrays.get("contact_force")
    if force is not None and force.shape != (*arrays["ctrl"].shape[:2], len(robot.all_contact_bodies)):
        force = None  # not one column per contact body: the log carries no contacts
    contact = None if force is None else (force > CONTACT_LABEL_N).astype(np.float64)  # what a contact sensor flags
    frame = log_frame(robot, arrays["qpos"], arrays["qvel"], arrays["ctrl"], arrays.get("torque"), contact)
    if Path(out).suffix in BAG_SUFFIXES:  # a ROS 2 bag: the states, odometry and targets (no contacts, no variant)
        lay = _Layout(robot)
        write_bag(out, frame, lay.joints, lay.actuated, lay.floating)
    else:
        write_log(out, frame, variant)
    return {"out": str(out), "rows": len(frame), "episodes": int(arrays["qpos"].shape[0])}
