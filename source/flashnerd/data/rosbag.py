"""Robot logs as ROS 2 bags: a rosbag2 folder (its `metadata.yaml` with sqlite3 or MCAP storage) or a bare `.mcap` or
`.db3` file, read with the `rosbags` package into the rows of the log format (data/logs.py), which `import_logs`
then checks, resamples and cuts like any Parquet log (docs/reference/robot_logs.md).

Topics, by role (each renamed with `--topics role=/name`):

    joint_states  /joint_states    sensor_msgs/msg/JointState: one log row per message, every joint's position and
                                   velocity by name (effort: the measured torque)
    odometry      /odom            nav_msgs/msg/Odometry: a floating base's pose in the world and its twist in the
                                   base frame (REP 105)
    targets       /joint_commands  the position targets sent: sensor_msgs/msg/JointState (position by name),
                                   trajectory_msgs/msg/JointTrajectory (its first point) or
                                   std_msgs/msg/Float64MultiArray (the actuated joints in the robot's order)

A sample's time is its header stamp (when it was measured; the bag's receive time for a message without a header or
with a zero stamp). The odometry is interpolated at each joint-state row (positions and velocities linearly,
the orientation by a normalized lerp in one hemisphere) and each row holds the last target sent at or before it; the
rows before the first target or outside the odometry's span are dropped and counted.

Reading a bag runs nothing from it: only the message types above are decoded, with the ROS 2 definitions built into
`rosbags` (which generates its decoders from type definitions: the definitions a bag carries are never used), and
`metadata.yaml` is read as safe YAML.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from flashnerd.utils.host_memory import fits_in_memory

BAG_SUFFIXES = (".mcap", ".db3")
ROLES = {"joint_states": "/joint_states", "odometry": "/odom", "targets": "/joint_commands"}
JOINT_STATE = "sensor_msgs/msg/JointState"
ODOMETRY = "nav_msgs/msg/Odometry"
TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
ARRAY = "std_msgs/msg/Float64MultiArray"
TYPES = {"joint_states": (JOINT_STATE,), "odometry": (ODOMETRY,), "targets": (JOINT_STATE, TRAJECTORY, ARRAY)}
MESSAGE_BYTES = 2048  # host memory a decoded message's numbers take at most while a bag is read (a 50-joint state)


class BagError(ValueError):
    """A bag that cannot be read as a robot log, with a one-line reason."""


def is_bag(path: str | Path) -> bool:
    """Whether `path` names a ROS 2 bag: a folder with a metadata.yaml, or a .mcap or .db3 file."""
    path = Path(path)
    return path.suffix in BAG_SUFFIXES or (path.is_dir() and (path / "metadata.yaml").is_file())


def topics_of(text: str | None) -> dict[str, str]:
    """The topic of every role: `text` ("role=/topic[,role=/topic]", None: the defaults) over `ROLES`; an unknown
    role or a malformed entry is a one-line `BagError`."""
    topics = dict(ROLES)
    for item in (text or "").split(","):
        if not item:
            continue
        role, sep, topic = item.partition("=")
        if not sep or role not in ROLES or not topic.startswith("/"):
            raise BagError(f"--topics takes role=/topic[,role=/topic] with roles {', '.join(ROLES)}, got '{item}'")
        topics[role] = topic
    return topics


def _stamp_ns(msg, received: int) -> int:
    """The message's header stamp in ns, or `received` (the bag's time) where it has no header or a zero stamp."""
    header = getattr(msg, "header", None)
    if header is None:
        return received
    stamp = int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)
    return stamp if stamp > 0 else received


def _by_name(where: str, names: list[str], values, wanted: list[str], what: str) -> np.ndarray:
    """`values` ordered by `names` as the (len(wanted),) array of `wanted`; a name the robot lacks, a missing name or
    a length that does not match the names is a one-line error."""
    if len(values) != len(names):
        raise BagError(f"{where}: {what} has {len(values)} values for {len(names)} joint names; publish one per name")
    index = {n: i for i, n in enumerate(names)}
    unknown = [n for n in names if n not in wanted]
    missing = [n for n in wanted if n not in index]
    if unknown or missing:
        which = f"'{unknown[0]}', which the robot lacks" if unknown else f"no '{missing[0]}'"
        raise BagError(f"{where}: {what} names {len(names)} joints with {which}; the robot's are "
                       f"{', '.join(wanted)[:200]}")
    return np.asarray([values[index[n]] for n in wanted], dtype=float)


def _read_messages(path: Path, topics: dict[str, str], floating: bool) -> dict[str, list]:
    """role -> [(stamp ns, message)] of the roles the robot needs, decoded with rosbags' built-in definitions."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    needed = [r for r in ROLES if floating or r != "odometry"]
    out: dict[str, list] = {r: [] for r in needed}
    with Reader(path) as reader:
        by_topic = {c.topic: c for c in reader.connections}
        connections = {}
        for role in needed:
            topic = topics[role]
            conn = by_topic.get(topic)
            if conn is None:
                have = ", ".join(sorted(by_topic))[:200] or "none"
                raise BagError(f"bag '{path}' has no topic {topic} for the {role} (its topics: {have}); name the "
                               f"right one with --topics {role}=/topic")
            if conn.msgtype not in TYPES[role]:
                raise BagError(f"bag '{path}': topic {topic} carries {conn.msgtype[:100]}, the {role} must be "
                               f"{' or '.join(TYPES[role])}")
            connections[conn.id] = role
        count = sum(c.msgcount for c in reader.connections if c.id in connections)
        if not fits_in_memory(count * MESSAGE_BYTES):
            raise BagError(f"bag '{path}' holds {count:,} messages on these topics, more than this machine's memory "
                           "holds at once; split it (ros2 bag convert) into several bags")
        chosen = [c for c in reader.connections if c.id in connections]
        for conn, received, raw in reader.messages(connections=chosen):
            msg = store.deserialize_cdr(raw, conn.msgtype)
            out[connections[conn.id]].append((_stamp_ns(msg, received), conn.msgtype, msg))
    return out


def read_bag(path: str | Path, joints: list[str], actuated: list[str], floating: bool,
             topics: dict[str, str] | None = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """The log rows (data/logs.py's columns, one per joint-state message, `time` in s from the first) of the bag at
    `path` for a robot with `joints` (every joint, actuated or not), `actuated` joints (the targets' order) and a
    floating base or not; and counts of what was dropped. Every problem is a one-line `BagError`."""
    from rosbags.rosbag2 import ReaderError
    from rosbags.serde import SerdeError

    path, topics = Path(path), topics or dict(ROLES)
    if not path.exists():
        raise FileNotFoundError(f"bag '{path}' does not exist")
    try:
        messages = _read_messages(path, topics, floating)
    except BagError:
        raise
    except (ReaderError, SerdeError, OSError, ValueError, KeyError, AssertionError, MemoryError) as err:
        first = str(err).strip().splitlines()[0][:120] if str(err).strip() else type(err).__name__
        raise BagError(f"bag '{path}' cannot be read ({first}); record or convert it again") from err
    where = f"bag '{path}'"
    states = messages["joint_states"]
    if not states:
        raise BagError(f"{where}: topic {topics['joint_states']} holds no message")
    t = np.asarray([s for s, _, _ in states], dtype=np.int64)  # (R,) ns
    q = np.stack([_by_name(where, list(m.name), m.position, joints, "a joint state's position") for *_, m in states])
    for *_, m in states:
        if len(m.velocity) == 0:
            raise BagError(f"{where}: the joint states on {topics['joint_states']} carry no velocity; publish "
                           "velocity with position (the model needs both)")
    dq = np.stack([_by_name(where, list(m.name), m.velocity, joints, "a joint state's velocity") for *_, m in states])
    effort = all(len(m.effort) == len(m.name) for *_, m in states)
    tau = np.stack([_by_name(where, list(m.name), m.effort, joints, "a joint state's effort")
                    for *_, m in states]) if effort else None
    cols: dict[str, np.ndarray] = {}
    keep = np.ones(len(t), dtype=bool)
    tt, targets = _targets(where, messages["targets"], actuated, topics["targets"])
    keep &= t >= tt[0]  # a row before the first target has nothing to hold
    if floating:
        odom = _odometry(where, messages["odometry"], topics["odometry"])
        keep &= (t >= odom["t"][0]) & (t <= odom["t"][-1])
    order = np.argsort(t[keep], kind="stable")  # (R',) a bag holds messages in receive order
    rows = np.flatnonzero(keep)[order]
    t_rows = t[rows]
    repeated = np.r_[False, np.diff(t_rows) == 0]  # (R',) the same stamp twice: the first is kept
    rows, t_rows = rows[~repeated], t_rows[~repeated]
    if not len(rows):
        raise BagError(f"{where}: no joint state lies after the first target"
                       + (" and within the odometry's span" if floating else "") + "; record them together")
    t0 = int(t_rows[0])
    cols["time"] = (t_rows - t0) / 1e9
    held = np.searchsorted(tt, t_rows, side="right") - 1  # (R',) the last target at or before each row
    if floating:
        base = _interpolated(odom, t_rows)
        for k, v in base.items():
            cols[k] = v
    for i, name in enumerate(joints):
        cols[f"q_{name}"], cols[f"dq_{name}"] = q[rows, i], dq[rows, i]
    for i, name in enumerate(actuated):
        cols[f"target_{name}"] = targets[held, i]
        if tau is not None:
            cols[f"tau_{name}"] = tau[rows, joints.index(name)]
    counts = {"bag_rows_without_target_or_odometry": int((~keep).sum()), "bag_repeated_stamps": int(repeated.sum())}
    return pd.DataFrame(cols), counts


def _targets(where: str, messages: list, actuated: list[str], topic: str) -> tuple[np.ndarray, np.ndarray]:
    """Times (K,) ns, sorted, and the targets (K, nu) in the robot's actuated order."""
    if not messages:
        raise BagError(f"{where}: topic {topic} holds no target")
    rows = []
    for stamp, msgtype, m in messages:
        if msgtype == JOINT_STATE:
            rows.append((stamp, _by_name(where, list(m.name), m.position, actuated, "a target's position")))
        elif msgtype == TRAJECTORY:
            if not len(m.points):
                raise BagError(f"{where}: a JointTrajectory on {topic} has no point; send the target as its first")
            rows.append((stamp, _by_name(where, list(m.joint_names), m.points[0].positions, actuated,
                                         "a trajectory's first point")))
        else:
            if len(m.data) != len(actuated):
                raise BagError(f"{where}: a Float64MultiArray on {topic} holds {len(m.data)} targets, the robot has "
                               f"{len(actuated)} actuated joints ({', '.join(actuated)[:120]}, in that order)")
            rows.append((stamp, np.asarray(m.data, dtype=float)))
    order = np.argsort([s for s, _ in rows], kind="stable")
    return (np.asarray([rows[i][0] for i in order], dtype=np.int64), np.stack([rows[i][1] for i in order]))


def _odometry(where: str, messages: list, topic: str) -> dict[str, np.ndarray]:
    """Times (M,) ns, sorted, positions (M, 3), quaternions (M, 4) wxyz, twists (M, 3) each."""
    if not messages:
        raise BagError(f"{where}: topic {topic} holds no odometry; a floating base needs its pose")
    messages = sorted(messages, key=lambda s: s[0])
    pose = [m.pose.pose for *_, m in messages]
    twist = [m.twist.twist for *_, m in messages]
    quat = np.asarray([[p.orientation.w, p.orientation.x, p.orientation.y, p.orientation.z] for p in pose])  # (M, 4)
    norm = np.linalg.norm(quat, axis=1)
    if not np.all(np.isfinite(norm)) or np.any(np.abs(norm - 1.0) > 0.01):
        bad = int(np.flatnonzero(~(np.abs(norm - 1.0) <= 0.01))[0])
        raise BagError(f"{where}: odometry on {topic} has an orientation of norm {norm[bad]:g}; publish a unit "
                       "quaternion")
    return {"t": np.asarray([s for s, *_ in messages], dtype=np.int64),
            "pos": np.asarray([[p.position.x, p.position.y, p.position.z] for p in pose]), "quat": quat,
            "lin": np.asarray([[v.linear.x, v.linear.y, v.linear.z] for v in twist]),
            "ang": np.asarray([[v.angular.x, v.angular.y, v.angular.z] for v in twist])}


def _interpolated(odom: dict[str, np.ndarray], t: np.ndarray) -> dict[str, np.ndarray]:
    """The base columns of data/logs.py at times `t` (R,) ns within the odometry's span: a sample's own values where
    a row falls on it (its quaternion's sign kept), else linear between the two around it (the quaternion a
    normalized lerp towards the later one's sign in the earlier one's hemisphere)."""
    x = odom["t"]  # (M,) ns
    lo = np.clip(np.searchsorted(x, t, side="right") - 1, 0, len(x) - 1)  # (R,) the sample at or before
    hi = np.minimum(lo + 1, len(x) - 1)  # (R,)
    w = np.where(hi > lo, (t - x[lo]) / np.maximum(x[hi] - x[lo], 1), 0.0)[:, None]  # (R, 1) in [0, 1)
    lerp = lambda v: (1 - w) * v[lo] + w * v[hi]  # noqa: E731  (R, k)
    q = odom["quat"]
    towards = np.where((q[lo] * q[hi]).sum(1, keepdims=True) < 0, -q[hi], q[hi])  # (R, 4) same hemisphere
    quat = np.where(w > 0, (1 - w) * q[lo] + w * towards, q[lo])  # (R, 4)
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    cols = {}
    for name, v in (("pos", lerp(odom["pos"])), ("quat", quat), ("lin_vel", lerp(odom["lin"])),
                    ("ang_vel", lerp(odom["ang"]))):
        for k, axis in enumerate("wxyz" if name == "quat" else "xyz"):
            cols[f"base_{name}_{axis}"] = v[:, k]
    return cols


def write_bag(path: str | Path, frame: pd.DataFrame, joints: list[str], actuated: list[str], floating: bool,
              topics: dict[str, str] | None = None, targets_as: str = JOINT_STATE) -> None:
    """Write log rows (data/logs.py's columns) as a ROS 2 bag at `path`: a bare `.mcap` or `.db3` file, or a
    rosbag2 folder with sqlite3 storage for any other name. Per row, what a robot's bag holds: a JointState (position,
    velocity, and effort where every joint is actuated and its torque logged), an Odometry for a floating base, and
    the row's target on the targets topic as `targets_as` (any of the types the targets role takes; a row without a
    target sends none). Episodes follow each other 1 s apart in time (a gap `import_logs` splits at). Written beside
    `path`, then renamed."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    path, topics = Path(path), topics or dict(ROLES)
    if path.exists():
        raise BagError(f"bag '{path}' exists; give a new path")
    if targets_as not in TYPES["targets"]:
        raise BagError(f"targets go as {' or '.join(TYPES['targets'])}, not {targets_as}")
    msgs = store.types
    Time, Header = msgs["builtin_interfaces/msg/Time"], msgs["std_msgs/msg/Header"]
    State = msgs[JOINT_STATE]
    episodes = frame["episode"].to_numpy() if "episode" in frame else np.zeros(len(frame))
    times, offset, last_end = np.zeros(len(frame)), 1.0, None
    for e in pd.unique(episodes):  # each episode after the one before, 1 s apart
        rows = np.flatnonzero(episodes == e)
        t = frame["time"].to_numpy(dtype=float)[rows]
        if last_end is not None:
            offset = last_end + 1.0 - t[0]
        times[rows] = t + offset
        last_end = times[rows][-1]
    with_effort = set(actuated) == set(joints) and all(f"tau_{j}" in frame for j in joints)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        bag = tmp / "bag"
        plugin = StoragePlugin.MCAP if path.suffix == ".mcap" else StoragePlugin.SQLITE3
        with Writer(bag, version=9, storage_plugin=plugin) as writer:
            conn = {"joint_states": writer.add_connection(topics["joint_states"], JOINT_STATE, typestore=store),
                    "targets": writer.add_connection(topics["targets"], targets_as, typestore=store)}
            if floating:
                conn["odometry"] = writer.add_connection(topics["odometry"], ODOMETRY, typestore=store)
            for r in range(len(frame)):
                ns = int(round(times[r] * 1e9))
                header = Header(stamp=Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000), frame_id="base")
                row = frame.iloc[r]
                state = State(header=header, name=list(joints),
                              position=row[[f"q_{j}" for j in joints]].to_numpy(dtype=float),
                              velocity=row[[f"dq_{j}" for j in joints]].to_numpy(dtype=float),
                              effort=row[[f"tau_{j}" for j in joints]].to_numpy(dtype=float) if with_effort
                              else np.zeros(0))
                writer.write(conn["joint_states"], ns, store.serialize_cdr(state, JOINT_STATE))
                if floating:
                    writer.write(conn["odometry"], ns, store.serialize_cdr(_odometry_message(msgs, header, row),
                                                                           ODOMETRY))
                target = row[[f"target_{j}" for j in actuated]].to_numpy(dtype=float)
                if np.isfinite(target).all():
                    command = _target_message(msgs, targets_as, header, actuated, target)
                    writer.write(conn["targets"], ns, store.serialize_cdr(command, targets_as))
        if path.suffix in BAG_SUFFIXES:  # a bare storage file: the bag's one file
            (inner,) = bag.glob(f"*{path.suffix}")
            inner.replace(path)
        else:
            bag.replace(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
        layout = msgs["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
        return msgs[ARRAY](layout=layout, data=target)
    raise AssertionError(msgtype)  # write_bag checked it


def _odometry_message(msgs, header, row: pd.Series):
    """An Odometry with the row's base pose (world) and twist (base frame), covariances unknown (zero)."""
    Point, Quaternion, Vector3 = (msgs["geometry_msgs/msg/Point"], msgs["geometry_msgs/msg/Quaternion"],
                                  msgs["geometry_msgs/msg/Vector3"])
    pose = msgs["geometry_msgs/msg/Pose"](
        position=Point(*(float(row[f"base_pos_{a}"]) for a in "xyz")),
        orientation=Quaternion(*(float(row[f"base_quat_{a}"]) for a in "xyzw")))
    twist = msgs["geometry_msgs/msg/Twist"](linear=Vector3(*(float(row[f"base_lin_vel_{a}"]) for a in "xyz")),
                                           angular=Vector3(*(float(row[f"base_ang_vel_{a}"]) for a in "xyz")))
    return msgs[ODOMETRY](header=header, child_frame_id="base",
                          pose=msgs["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
                          twist=msgs["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)))

