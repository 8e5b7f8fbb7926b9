"""The stand-in robot's ROS 2 bag: log rows (data/logs.py's columns) written as the bag a robot records, so that the
path a lab's bags take through `import-logs` (data/rosbag.py) is the tested one (`flashnerd record --format logs
--out X.mcap`)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from flashnerd.data.log_columns import BASE
from flashnerd.data.rosbag import ARRAY, BAG_SUFFIXES, JOINT_STATE, ODOMETRY, ROLES, TRAJECTORY, TYPES, BagError

EPISODE_GAP_S = 1.0  # time between one episode's last row and the next one's first: a gap `import_logs` splits at


def _bag_times(frame: pd.DataFrame) -> np.ndarray:
    """(R,) s: each episode's times placed after the one before, EPISODE_GAP_S apart, starting at 1 s (a zero stamp
    reads as none)."""
    episodes = frame["episode"].to_numpy() if "episode" in frame else np.zeros(len(frame))
    t = frame["time"].to_numpy(dtype=float)
    times, offset, last_end = np.zeros(len(frame)), 1.0, None
    for e in pd.unique(episodes):
        rows = np.flatnonzero(episodes == e)
        if last_end is not None:
            offset = last_end + EPISODE_GAP_S - t[rows[0]]
        times[rows] = t[rows] + offset
        last_end = times[rows[-1]]
    return times


def write_bag(path: str | Path, frame: pd.DataFrame, joints: list[str], actuated: list[str], floating: bool,
              topics: dict[str, str] | None = None, targets_as: str = JOINT_STATE) -> None:
    """Write log rows as a ROS 2 bag at `path`: a bare `.mcap` or `.db3` file (replacing one there, as a log file is),
    or a new rosbag2 folder with sqlite3 storage for any other name. Per row, what a robot's bag holds: a JointState
    (position, velocity, and effort where every joint is actuated and its torque logged), an Odometry for a floating
    base, and the row's target on the targets topic as `targets_as` (any of the types the targets role takes; a row
    without a target sends none), all stamped with the row's time. Written beside `path`, then moved there."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    path, topics = Path(path), topics or dict(ROLES)
    if path.suffix not in BAG_SUFFIXES and path.exists():
        raise BagError(f"bag folder '{path}' exists; give a new path")
    if targets_as not in TYPES["targets"]:
        raise BagError(f"targets go as {' or '.join(TYPES['targets'])}, not {targets_as}")
    msgs = store.types
    Time, Header = msgs["builtin_interfaces/msg/Time"], msgs["std_msgs/msg/Header"]
    ns = np.round(_bag_times(frame) * 1e9).astype(np.int64)  # (R,)
    q = np.ascontiguousarray(frame[[f"q_{j}" for j in joints]].to_numpy(dtype=float))  # (R, nj)
    dq = np.ascontiguousarray(frame[[f"dq_{j}" for j in joints]].to_numpy(dtype=float))  # (R, nj)
    with_effort = set(actuated) == set(joints) and all(f"tau_{j}" in frame for j in joints)
    tau = np.ascontiguousarray(frame[[f"tau_{j}" for j in joints]].to_numpy(dtype=float)) if with_effort else None
    targets = np.ascontiguousarray(frame[[f"target_{j}" for j in actuated]].to_numpy(dtype=float))  # (R, nu)
    base = _base_columns(frame) if floating else None  # (R, 13)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        bag = tmp / "bag"
        plugin = StoragePlugin.MCAP if path.suffix == ".mcap" else StoragePlugin.SQLITE3
        with Writer(bag, version=9, storage_plugin=plugin) as writer:
            conn = {"joint_states": writer.add_connection(topics["joint_states"], JOINT_STATE, typestore=store),
                    "targets": writer.add_connection(topics["targets"], targets_as, typestore=store)}
            if floating:
                conn["odometry"] = writer.add_connection(topics["odometry"], ODOMETRY, typestore=store)
            for r, stamp in enumerate(ns.tolist()):
                header = Header(stamp=Time(sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000),
                                frame_id="base")
                state = msgs[JOINT_STATE](header=header, name=list(joints), position=q[r], velocity=dq[r],
                                          effort=tau[r] if tau is not None else np.zeros(0))
                writer.write(conn["joint_states"], stamp, store.serialize_cdr(state, JOINT_STATE))
                if base is not None:
                    writer.write(conn["odometry"], stamp,
                                 store.serialize_cdr(_odometry_message(msgs, header, base[r]), ODOMETRY))
                if np.isfinite(targets[r]).all():
                    command = _target_message(msgs, targets_as, header, actuated, targets[r])
                    writer.write(conn["targets"], stamp, store.serialize_cdr(command, targets_as))
        if path.suffix in BAG_SUFFIXES:  # a bare storage file: the bag's one file
            (inner,) = bag.glob(f"*{path.suffix}")
            inner.replace(path)
        else:
            bag.replace(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _base_columns(frame: pd.DataFrame) -> np.ndarray:
    """(R, 13) position, quaternion xyzw (ROS's order), base-frame linear and angular velocity of every row."""
    w, *xyz = BASE["quat"]
    names = [*BASE["pos"], *xyz, w, *BASE["lin_vel"], *BASE["ang_vel"]]
    return np.ascontiguousarray(frame[names].to_numpy(dtype=float))  # rows of a pandas block are strided


def _target_message(msgs, msgtype: str, header, actuated: list[str], target: np.ndarray):
    """The targets (nu,) of the `actuated` joints as a message of `msgtype` (one of TYPES["targets"])."""
    if msgtype == JOINT_STATE:
        return msgs[JOINT_STATE](header=header, name=list(actuated), position=target, velocity=np.zeros(0),
                                 effort=np.zeros(0))
    if msgtype == TRAJECTORY:
        point = msgs["trajectory_msgs/msg/JointTrajectoryPoint"](
            positions=target, velocities=np.zeros(0), accelerations=np.zeros(0), effort=np.zeros(0),
            time_from_start=msgs["builtin_interfaces/msg/Duration"](sec=0, nanosec=0))
        return msgs[TRAJECTORY](header=header, joint_names=list(actuated), points=[point])
    if msgtype == ARRAY:  # no header: read at the bag's time, which `write_bag` sets to the row's
        return msgs[ARRAY](layout=msgs["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0), data=target)
    raise AssertionError(msgtype)  # write_bag checked it


def _odometry_message(msgs, header, base: np.ndarray):
    """An Odometry of one row's base (13,) as `_base_columns` gives it, covariances unknown (zero)."""
    g = "geometry_msgs/msg/"
    pose = msgs[f"{g}Pose"](position=msgs[f"{g}Point"](*base[0:3]), orientation=msgs[f"{g}Quaternion"](*base[3:7]))
    twist = msgs[f"{g}Twist"](linear=msgs[f"{g}Vector3"](*base[7:10]), angular=msgs[f"{g}Vector3"](*base[10:13]))
    return msgs[ODOMETRY](header=header, child_frame_id="base",
                          pose=msgs[f"{g}PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
                          twist=msgs[f"{g}TwistWithCovariance"](twist=twist, covariance=np.zeros(36)))
