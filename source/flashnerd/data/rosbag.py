"""Robot logs as ROS 2 bags: a rosbag2 folder (its `metadata.yaml` with sqlite3 or MCAP storage) or a bare `.mcap` or
`.db3` file, read with the `rosbags` package into the rows of the log format (data/logs.py), which `import_logs`
then checks, resamples and cuts like any Parquet log (docs/reference/robot_logs.md).

Topics, by role (each renamed with `--topics role=/name`):

    joint_states  /joint_states    sensor_msgs/msg/JointState: one log row per message, every joint's position and
                                   velocity by name (effort: the measured torque)
    odometry      /odom            nav_msgs/msg/Odometry: a floating base's pose in the world and its twist in the
                                   base frame (REP 105)
    targets       /joint_commands  the position targets sent: sensor_msgs/msg/JointState (position by name),
                                   trajectory_msgs/msg/JointTrajectory (one point) or
                                   std_msgs/msg/Float64MultiArray (the actuated joints in the robot's order)

A sample's time is its header stamp (when it was measured), or the time the bag received it (`stamps="received"`,
and always for a message without a header or with a zero stamp). The odometry is interpolated at each joint-state row
(positions and velocities linearly, the orientation by a normalized lerp in one hemisphere) and each row holds the
last target stamped at or before it; rows before the first target, outside the odometry's span or in a gap of it are
dropped and counted.

A bag comes from someone else, so reading one runs nothing from it and is bounded. Only the message types above are
decoded, with the ROS 2 definitions built into `rosbags` (which generates decoders from type definitions: the
definitions a bag carries are never registered). Before `rosbags` sees a bag, checks with plain tools refuse in one
line what is no bag or would read without bound: a special file, a folder whose metadata.yaml is not small plain
YAML without aliases, is compressed, or lists files that are not its own regular files, and a database holding
anything but plain tables (a view or a generated column can compute without end). Then `rosbags` parses it in a
child process with a memory and a time limit (utils/sandbox.py), with MCAP chunks decompressed to at most the size
they declare, messages larger than a robot's refused before they are decoded, and the QoS profiles (unused) not
parsed; the child hands back the messages' numbers only.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path, PurePath

import numpy as np
import pandas as pd
import yaml

from flashnerd.data.log_columns import BASE_COLUMNS, QUAT_TOLERANCE
from flashnerd.utils.host_memory import fits_in_memory
from flashnerd.utils.sandbox import BoundedRunError, run_bounded

BAG_SUFFIXES = (".mcap", ".db3")
ROLES = {"joint_states": "/joint_states", "odometry": "/odom", "targets": "/joint_commands"}
JOINT_STATE = "sensor_msgs/msg/JointState"
ODOMETRY = "nav_msgs/msg/Odometry"
TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
ARRAY = "std_msgs/msg/Float64MultiArray"
TYPES = {"joint_states": (JOINT_STATE,), "odometry": (ODOMETRY,), "targets": (JOINT_STATE, TRAJECTORY, ARRAY)}
STAMPS = ("header", "received")
ODOMETRY_GAP = 3.0  # odometry samples further apart than this x their mean step leave the rows between them
MESSAGE_OVERHEAD = 200  # bytes of Python objects per message kept, beside its numbers
MEMORY_CHECK_EVERY = 4096  # messages between checks of what is kept against the free memory
MAX_METADATA_BYTES = 1 << 20  # a rosbag2 metadata.yaml lists topics and files: far less than this
MAX_FILES = 10_000  # storage files a rosbag2 folder may list
MESSAGE_BYTES = (65_536, 1_024)  # a message may hold this many bytes, plus this many per joint of the robot
CPU_SECONDS = (30, 2)  # the parse may take this many CPU seconds, plus this many per MB of the bag
REPAIR = ("a bag a recorder left unfinished is repaired by `mcap recover` (MCAP) or `ros2 bag reindex` (a folder); "
          "otherwise record or convert it again")


class BagError(ValueError):
    """A bag that cannot be read as a robot log, with a one-line reason."""


def is_bag(path: str | Path) -> bool:
    """Whether `path` names a ROS 2 bag: a folder with a metadata.yaml, or a .mcap or .db3 file."""
    path = Path(path)
    return path.suffix in BAG_SUFFIXES or (path.is_dir() and (path / "metadata.yaml").is_file())


def topics_of(text: str | None) -> dict[str, str]:
    """The topic of every role: `text` ("role=/topic[,role=/topic]", None: the defaults) over `ROLES`; an unknown
    role, a role given twice, one topic for two roles or a malformed entry is a one-line `BagError`."""
    topics, given = dict(ROLES), set()
    for item in (text or "").split(","):
        if not item:
            continue
        role, sep, topic = item.partition("=")
        if not sep or role not in ROLES or not topic.startswith("/") or role in given:
            raise BagError(f"--topics takes role=/topic[,role=/topic] with each of the roles {', '.join(ROLES)} at "
                           f"most once, got '{item}'")
        topics[role] = topic
        given.add(role)
    shared = [t for t in set(topics.values()) if list(topics.values()).count(t) > 1]
    if shared:
        roles = [r for r, t in topics.items() if t == shared[0]]
        raise BagError(f"--topics gives {shared[0]} to the {' and the '.join(roles)}; each role needs a topic of its "
                       "own")
    return topics


# --- checks before rosbags opens a file ---------------------------------------------------------------------------

def _regular(path: Path, what: str) -> int:
    """Size of `path` if it is a regular file (a FIFO or a device would block or never end), else a `BagError`."""
    try:
        info = os.stat(path)
    except OSError as err:
        raise BagError(f"{what} '{path}' cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise BagError(f"{what} '{path}' is no regular file")
    return info.st_size


def _preflight(path: Path) -> int:
    """Refuse, in one line, what is no bag or would make `rosbags` read without bound (see the module doc), with
    plain tools; return the bytes of the bag's storage."""
    if not path.is_dir():
        size = _regular(path, "bag")
        if path.suffix == ".db3":
            _check_database(path)
        return size
    meta = path / "metadata.yaml"
    if _regular(meta, "metadata") > MAX_METADATA_BYTES:
        raise BagError(f"bag '{path}': its metadata.yaml is larger than {MAX_METADATA_BYTES >> 20} MiB, no rosbag2 "
                       "metadata")
    try:
        text = meta.read_text()
        if any(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text)):
            raise BagError(f"bag '{path}': its metadata.yaml repeats nodes by alias, which rosbag2 never writes")
        info = yaml.safe_load(text)["rosbag2_bagfile_information"]
        mode = str(info.get("compression_mode") or "").lower()
        storage = str(info.get("storage_identifier") or "")
        files = info.get("relative_file_paths") or []
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise TypeError("relative_file_paths")
    except BagError:
        raise
    except (yaml.YAMLError, OSError, UnicodeDecodeError, RecursionError, TypeError, KeyError, AttributeError,
            ValueError) as err:  # ValueError: an integer of more digits than Python converts
        raise BagError(f"bag '{path}': metadata.yaml is no rosbag2 metadata in plain YAML "
                       f"({type(err).__name__}); {REPAIR}") from None
    if mode not in ("", "none"):
        raise BagError(f"bag '{path}' is compressed ({mode} mode); decompress it first (`ros2 bag convert` with "
                       "an output of no compression): compressed folders decompress without a bound")
    odd = [f for f in files if PurePath(f).name != f or any(c in f for c in "?#%") or f in (".", "..")]
    if odd or len(set(files)) != len(files) or len(files) > MAX_FILES:
        which = f"'{odd[0][:60]}'" if odd else "a file twice" if len(set(files)) != len(files) else "too many files"
        raise BagError(f"bag '{path}': its metadata.yaml lists {which}; a rosbag2 folder lists each of its files "
                       "once, by plain name")
    size = 0
    for name in files:
        size += _regular(path / name, "bag file")
        if storage != "mcap":  # sqlite3, the default: rosbags opens every listed file as a database
            _check_database(path / name)
    return size


def _check_database(db: Path) -> None:
    """A rosbag2 sqlite3 database holds plain tables and their indexes alone: a view, a virtual table or a generated
    column computes when it is read, without a bound."""
    if not fits_in_memory(3 * _regular(db, "bag")):
        raise BagError(f"bag '{db}' is too large for this machine's memory; split it (`ros2 bag convert`)")
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        try:
            objects = con.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
            other = [(t, n) for t, n, sql in objects if t not in ("table", "index")
                     or (t == "table" and str(sql or "").upper().startswith("CREATE VIRTUAL"))]
            plain = [n for t, n, _ in objects if t == "table"] if not other else []  # then their columns
            for n in plain:
                hidden = con.execute("SELECT name FROM pragma_table_xinfo(?) WHERE hidden IN (2, 3)", (n,))
                other += [("generated column", f"{n}.{c}") for (c,) in hidden.fetchall()]
        finally:
            con.close()
    except sqlite3.Error as err:
        raise BagError(f"bag '{db}' is no sqlite3 database ({str(err)[:80]}); {REPAIR}") from None
    if other:
        raise BagError(f"bag '{db}' holds a {other[0][0]} '{str(other[0][1])[:60]}'; a rosbag2 database holds plain "
                       "tables alone (a view or a computed column can compute without end when read)")


def _bound_rosbags() -> None:
    """In the parsing child: MCAP chunks decompress to at most the size they declare (every frame of a chunk), and
    only when that fits in the free memory (`rosbags` inflates a chunk whole before comparing: a small file could
    fill the memory); QoS profiles, which this reader never uses, are not parsed (YAML of any size in every topic)."""
    import lz4.frame
    from rosbags.rosbag2 import ReaderError, reader, storage_mcap, storage_sqlite3

    try:
        from compression import zstd  # Python 3.14
    except ImportError:
        from backports import zstd

    def bounded(make):
        def run(data: bytes, size: int) -> bytes:
            if not fits_in_memory(2 * size):
                raise ReaderError(f"a chunk declares {size:,} bytes once decompressed, more than the free memory")
            out, rest = b"", data
            while rest and len(out) <= size:  # a chunk may hold several frames; none past the declared size
                d = make()
                out += d.decompress(rest, max_length=size + 1 - len(out))
                rest = d.unused_data if d.eof else b""
            return out  # longer or shorter than declared: rosbags' size check refuses it

        return run

    storage_mcap.DECOMPRESSORS.update(lz4=bounded(lz4.frame.LZ4FrameDecompressor),
                                      zstd=bounded(zstd.ZstdDecompressor))
    for module in (reader, storage_mcap, storage_sqlite3):
        if hasattr(module, "parse_qos"):
            module.parse_qos = lambda _: []


# --- reading ------------------------------------------------------------------------------------------------------

def _stamp_ns(msg, received: int, stamps: str) -> int:
    """The message's header stamp in ns, or `received` (the bag's time) with stamps="received", for a message
    without a header, or with a zero stamp."""
    header = getattr(msg, "header", None)
    if stamps == "received" or header is None:
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
        which = f"'{str(unknown[0])[:60]}', which the robot lacks" if unknown else f"no '{missing[0]}'"
        raise BagError(f"{where}: {what} names {len(names)} joints with {which}; the robot's are "
                       f"{', '.join(wanted)[:200]}")
    return np.asarray([values[index[n]] for n in wanted], dtype=float)


class _Numbers:
    """What one role's messages give, kept as numbers only: (stamp ns, array) per message, counted in bytes."""

    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.rows: list[np.ndarray] = []
        self.nbytes = 0

    def add(self, stamp: int, row: np.ndarray) -> None:
        self.stamps.append(stamp)
        self.rows.append(row)
        self.nbytes += row.nbytes + MESSAGE_OVERHEAD

    def sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """Stamps (K,) ns and rows (K, n), in time order (a bag holds messages in the order they were received)."""
        t = np.asarray(self.stamps, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        return t[order], np.stack(self.rows)[order]


def _joint_state_row(where: str, m, joints: list[str], actuated: list[str], topic: str) -> np.ndarray:
    """[q (nj), dq (nj), tau (nu), 1] of a JointState message, or [q, dq, NaN (nu), 0] where it carries no effort."""
    q = _by_name(where, list(m.name), m.position, joints, "a joint state's position")
    if len(m.velocity) == 0:
        raise BagError(f"{where}: the joint states on {topic} carry no velocity; publish velocity with position (the "
                       "model needs both)")
    dq = _by_name(where, list(m.name), m.velocity, joints, "a joint state's velocity")
    tau, has_effort = np.full(len(actuated), np.nan), len(m.effort) == len(m.name)
    if has_effort:
        effort = _by_name(where, list(m.name), m.effort, joints, "a joint state's effort")
        tau = effort[[joints.index(a) for a in actuated]]
    return np.concatenate([q, dq, tau, [float(has_effort)]])


def _target_row(where: str, msgtype: str, m, actuated: list[str], topic: str) -> np.ndarray:
    """The targets (nu,) of a message on the targets topic, in the robot's actuated order."""
    if msgtype == JOINT_STATE:
        return _by_name(where, list(m.name), m.position, actuated, "a target's position")
    if msgtype == TRAJECTORY:
        if len(m.points) != 1:
            raise BagError(f"{where}: a JointTrajectory on {topic} has {len(m.points)} points; the targets are read "
                           "from trajectories of one point (the target sent)")
        return _by_name(where, list(m.joint_names), m.points[0].positions, actuated, "a trajectory's point")
    if len(m.data) != len(actuated):
        raise BagError(f"{where}: a Float64MultiArray on {topic} holds {len(m.data)} targets, the robot has "
                       f"{len(actuated)} actuated joints ({', '.join(actuated)[:120]}, in that order)")
    return np.asarray(m.data, dtype=float)


def _odometry_row(m) -> np.ndarray:
    """[position (3), quaternion wxyz (4), linear (3) and angular (3) twist] of an Odometry message."""
    p, o, v = m.pose.pose.position, m.pose.pose.orientation, m.twist.twist
    return np.asarray([p.x, p.y, p.z, o.w, o.x, o.y, o.z, v.linear.x, v.linear.y, v.linear.z,
                       v.angular.x, v.angular.y, v.angular.z], dtype=float)


def _bag_arrays(path: str, topics: dict[str, str], joints: list[str], actuated: list[str], floating: bool,
                stamps: str) -> dict[str, np.ndarray]:
    """In the parsing child: the numbers of every role's messages, decoded with rosbags' built-in definitions, as
    `<role>_t` (K,) ns and `<role>` (K, n) arrays in time order. Whatever the parsers raise is a one-line
    `BagError`."""
    try:
        return _read_messages(Path(path), topics, joints, actuated, floating, stamps)
    except BagError:
        raise
    except Exception as err:  # noqa: BLE001  parsers of a file from someone else: whatever they raise is its fault
        first = str(err).strip().splitlines()[0][:120] if str(err).strip() else ""
        raise BagError(f"bag '{path}' cannot be read ({type(err).__name__}: {first}); {REPAIR}") from None


def _read_messages(path: Path, topics: dict[str, str], joints: list[str], actuated: list[str], floating: bool,
                   stamps: str) -> dict[str, np.ndarray]:
    """`_bag_arrays`' work: the roles' topics checked, then every message on them size-checked, decoded and kept as
    numbers."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    _bound_rosbags()
    store = get_typestore(Stores.ROS2_HUMBLE)
    where = f"bag '{path}'"
    needed = [r for r in ROLES if floating or r != "odometry"]
    out = {r: _Numbers() for r in needed}
    largest = MESSAGE_BYTES[0] + MESSAGE_BYTES[1] * len(joints)  # bytes: a robot's message is far smaller
    with Reader(path) as reader:
        role_of, declared = {}, 0
        for role in needed:
            topic = topics[role]
            conns = [c for c in reader.connections if c.topic == topic]
            if not conns:
                have = ", ".join(sorted({c.topic for c in reader.connections}))[:200] or "none"
                raise BagError(f"{where} has no topic {topic} for the {role} (its topics: {have}); name the right one "
                               f"with --topics {role}=/topic")
            wrong = [c.msgtype for c in conns if c.msgtype not in TYPES[role]]
            if wrong:
                raise BagError(f"{where}: topic {topic} carries {str(wrong[0])[:100]}, the {role} must be "
                               f"{' or '.join(TYPES[role])}")
            if len({c.msgtype for c in conns}) > 1:
                raise BagError(f"{where}: topic {topic} carries {len({c.msgtype for c in conns})} message types; "
                               "record each on a topic of its own")
            role_of.update({c.id: role for c in conns})
            declared += sum(int(c.msgcount) for c in conns)
        read = 0
        for conn, received, raw in reader.messages(connections=[c for c in reader.connections if c.id in role_of]):
            role = role_of[conn.id]
            if len(raw) > largest:
                raise BagError(f"{where}: a message on {topics[role]} holds {len(raw):,} bytes, more than a "
                               f"{role} message of a robot with {len(joints)} joints ({largest:,} at most)")
            msg = store.deserialize_cdr(raw, conn.msgtype)
            stamp = _stamp_ns(msg, received, stamps)
            if not 0 < stamp < 2**63:
                raise BagError(f"{where}: a message on {topics[role]} is stamped {stamp} ns, outside the times a "
                               "bag holds")
            if role == "joint_states":
                out[role].add(stamp, _joint_state_row(where, msg, joints, actuated, topics[role]))
            elif role == "targets":
                out[role].add(stamp, _target_row(where, conn.msgtype, msg, actuated, topics[role]))
            else:
                out[role].add(stamp, _odometry_row(msg))
            read += 1
            if read % MEMORY_CHECK_EVERY == 0 and not fits_in_memory(3 * sum(n.nbytes for n in out.values())):
                raise BagError(f"{where}: its messages hold more numbers than this machine's memory takes at once "
                               f"({read:,} read); split it into several bags")
        if read == 0 and declared > 0:
            raise BagError(f"{where} declares {declared:,} messages on these topics but none could be read; {REPAIR}")
    arrays = {}
    for role, numbers in out.items():
        if not numbers.rows:
            raise BagError(f"{where}: topic {topics[role]} holds no message for the {role}")
        arrays[f"{role}_t"], arrays[role] = numbers.sorted()
    return arrays


def read_bag(path: str | Path, joints: list[str], actuated: list[str], floating: bool,
             topics: dict[str, str] | None = None, stamps: str = "header") -> tuple[pd.DataFrame, dict[str, int]]:
    """The log rows (data/logs.py's columns, one per joint-state message, `time` in s from the first) of the bag at
    `path` for a robot with `joints` (every joint, actuated or not), `actuated` joints (the targets' order) and a
    floating base or not, with message times read as `stamps` says (header or received); and counts of the rows
    dropped. The bag is checked, then parsed within a memory and a time limit (see the module doc); every problem
    is a one-line `BagError`."""
    path, topics = Path(path), topics or dict(ROLES)
    if stamps not in STAMPS:
        raise BagError(f"stamps must be one of {', '.join(STAMPS)}, got '{stamps}'")
    if not path.exists():
        raise FileNotFoundError(f"bag '{path}' does not exist")
    size = _preflight(path)
    cpu = CPU_SECONDS[0] + CPU_SECONDS[1] * size // 2**20
    try:
        a = run_bounded(_bag_arrays, (str(path), topics, joints, actuated, floating, stamps), cpu_seconds=cpu,
                        wall_seconds=2 * cpu + 30)
    except BoundedRunError as err:
        if err.raised:  # the reader's own one-line reason
            raise BagError(str(err)) from None
        raise BagError(f"bag '{path}' cannot be read ({err}); {REPAIR}") from None
    t, states = a["joint_states_t"], a["joint_states"]  # (R,), (R, 2 nj + nu + 1)
    tt, targets = a["targets_t"], a["targets"]  # (K,), (K, nu)
    odom = (a["odometry_t"], a["odometry"]) if floating else None  # (M,), (M, 13)
    where, nj = f"bag '{path}'", len(joints)
    _check_same_clock(where, topics, t, tt, odom)
    keep = t >= tt[0]  # (R,) a row before the first target has nothing to hold
    if odom is not None:
        keep &= _within_odometry(odom[0], t)
    rows = np.flatnonzero(keep)
    repeated = np.r_[False, np.diff(t[rows]) == 0]  # the same stamp twice: the first is kept
    rows = rows[~repeated]
    if not len(rows):
        raise BagError(f"{where}: no joint state lies after the first target"
                       + (" and within the odometry" if floating else "") + "; record them together")
    t_rows = t[rows]
    cols: dict[str, np.ndarray] = {"time": (t_rows - t_rows[0]) / 1e9}
    if odom is not None:
        cols.update(_interpolated(where, *odom, t_rows))
    held = np.searchsorted(tt, t_rows, side="right") - 1  # (R',) the last target at or before each row
    for i, name in enumerate(joints):
        cols[f"q_{name}"], cols[f"dq_{name}"] = states[rows, i], states[rows, nj + i]
    tau = states[rows, 2 * nj:-1]  # (R', nu)
    for i, name in enumerate(actuated):
        cols[f"target_{name}"] = targets[held, i]
    if states[:, -1].all():  # every joint state carried effort (NaN where none was measured yet)
        for i, name in enumerate(actuated):
            cols[f"tau_{name}"] = tau[:, i]
    counts = {"bag_rows_without_target_or_odometry": int((~keep).sum()), "bag_repeated_stamps": int(repeated.sum())}
    return pd.DataFrame(cols), counts


def _check_same_clock(where: str, topics: dict[str, str], t: np.ndarray, tt: np.ndarray, odom) -> None:
    """The joint states must overlap the targets (and the odometry) in time: spans apart mean two clocks (header
    stamps in simulated time, receive times in wall time, or a message type without a header)."""
    spans = {"targets": tt} | ({"odometry": odom[0]} if odom is not None else {})
    for role, other in spans.items():
        if other[-1] < t[0] or other[0] > t[-1]:
            raise BagError(f"{where}: the joint states ({t[0] / 1e9:.3f}-{t[-1] / 1e9:.3f} s) and the {role} on "
                           f"{topics[role]} ({other[0] / 1e9:.3f}-{other[-1] / 1e9:.3f} s) do not overlap in time: "
                           "their stamps come from different clocks; read every message at the time the bag received "
                           "it with --stamps received")


def _within_odometry(t_odom: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(R,) whether each row time lies within the odometry's span and not in a gap of it (two samples around it
    further apart than ODOMETRY_GAP x its mean step between distinct stamps, which allows for samples that arrive
    in bursts), or on a sample."""
    inside = (t >= t_odom[0]) & (t <= t_odom[-1])
    at = np.searchsorted(t_odom, t, side="left")  # (R,) first sample at or after
    on_sample = t_odom[np.minimum(at, len(t_odom) - 1)] == t  # (R,)
    steps = np.diff(t_odom)
    if not (steps > 0).any():
        return inside & on_sample
    step = steps.sum() / (steps > 0).sum()  # the mean step between distinct stamps: bursts and repeats average out
    hi = np.clip(at, 1, len(t_odom) - 1)  # (R,)
    return inside & (on_sample | (t_odom[hi] - t_odom[hi - 1] <= ODOMETRY_GAP * step))


def _interpolated(where: str, t_odom: np.ndarray, odom: np.ndarray, t: np.ndarray) -> dict[str, np.ndarray]:
    """The base columns of data/logs.py at times `t` (R,) ns within the odometry's span (samples at `t_odom` (M,),
    rows `odom` (M, 13) as `_odometry_row` gives them): a sample's own values where a row falls on it (its
    quaternion's sign kept), else linear between the two around it (the quaternion a normalized lerp towards the
    later one's sign in the earlier one's hemisphere)."""
    norm = np.linalg.norm(odom[:, 3:7], axis=1)  # (M,)
    off = ~(np.abs(norm - 1.0) <= QUAT_TOLERANCE)  # (M,) NaN is off too
    if off.any():
        raise BagError(f"{where}: the odometry has an orientation of norm {norm[off][0]:g}; "
                       "publish unit quaternions")
    lo = np.clip(np.searchsorted(t_odom, t, side="right") - 1, 0, len(t_odom) - 1)  # (R,) the sample at or before
    hi = np.minimum(lo + 1, len(t_odom) - 1)  # (R,)
    w = np.where(hi > lo, (t - t_odom[lo]) / np.maximum(t_odom[hi] - t_odom[lo], 1), 0.0)[:, None]  # (R, 1) [0, 1)
    values = (1 - w) * odom[lo] + w * odom[hi]  # (R, 13)
    q = odom[:, 3:7]
    towards = np.where((q[lo] * q[hi]).sum(1, keepdims=True) < 0, -q[hi], q[hi])  # (R, 4) same hemisphere
    quat = (1 - w) * q[lo] + w * towards  # (R, 4)
    values[:, 3:7] = np.where(w > 0, quat / np.linalg.norm(quat, axis=1, keepdims=True), q[lo])
    return {name: values[:, k] for k, name in enumerate(BASE_COLUMNS)}
