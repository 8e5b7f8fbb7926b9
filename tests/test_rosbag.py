"""ROS 2 bags in (data/rosbag.py): a bag of the stand-in robot, in every storage a lab has (a bare MCAP or sqlite3
file, a rosbag2 folder) and with its targets in every message type the targets take, imports to exactly the
trajectories of the same recording; bags that cannot be a log of this robot are one-line errors, and reading one
runs nothing from it."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from conftest import dataset_arrays

from flashnerd.cli.main import main
from flashnerd.data.logs import import_logs, log_frame, read_log
from flashnerd.data.rosbag import ARRAY, ROLES, TRAJECTORY, BagError, topics_of
from flashnerd.data.rosbag_write import write_bag
from flashnerd.robots import get_robot

ANYMAL = get_robot("anymal_c")
JOINTS = list(ANYMAL.joint_names)  # ANYmal-C: every joint is actuated


@pytest.fixture
def recorded(worn_logs):
    return worn_logs


def _same_as_recorded(recorded, out):
    """The import of a bag equals the recording to the float32 rounding the Parquet log's import has too, and equals
    the Parquet log's import itself exactly."""
    if not (recorded / "from_parquet.h5").exists():
        import_logs([recorded / "log.parquet"], ANYMAL, recorded / "from_parquet.h5", traj_len=30)
    ref, log = dataset_arrays(recorded / "ref.h5"), dataset_arrays(recorded / "from_parquet.h5")
    got = dataset_arrays(out)
    for k in ref:
        assert got[k].shape == ref[k].shape and np.allclose(got[k], ref[k], atol=1e-6), k
        assert np.array_equal(got[k], log[k]), k


@pytest.mark.parametrize("name", ["log.mcap", "folder", "log.db3"])
def test_a_bag_of_the_stand_in_robot_imports_back_to_the_recorded_trajectories(recorded, name, tmp_path):
    """The MCAP bag `record --format logs` wrote, and the same rows as a rosbag2 folder and a bare sqlite3 file."""
    bag = recorded / name
    if name != "log.mcap":
        bag = tmp_path / name
        write_bag(bag, read_log(recorded / "log.parquet")[0], JOINTS, JOINTS, True)
    out = tmp_path / "imported.h5"
    assert main(["import-logs", str(bag), "--out", str(out), "--traj_len", "30"]) == 0
    _same_as_recorded(recorded, out)
    with h5py.File(out, "r") as f:
        assert f.attrs["segments"] == 6 and f.attrs["bag_rows_without_target_or_odometry"] == 0


@pytest.mark.parametrize("targets_as", [TRAJECTORY, ARRAY])
def test_targets_of_every_message_type_on_renamed_topics(recorded, targets_as, tmp_path, capsys):
    """Targets as a JointTrajectory's first point or a bare Float64MultiArray (no header: read at the bag's time) on
    topics of the lab's own names, given with --topics; without them the missing topic is named in one line."""
    topics = {"joint_states": "/anymal/joint_states", "odometry": "/state_estimator/odom", "targets": "/anymal/cmd"}
    bag = tmp_path / "lab.mcap"
    write_bag(bag, read_log(recorded / "log.parquet")[0], JOINTS, JOINTS, True, topics, targets_as)
    out = tmp_path / "imported.h5"
    argv = ["import-logs", str(bag), "--out", str(out), "--traj_len", "30"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "has no topic /joint_states for the joint_states" in err and "--topics joint_states=" in err, err
    assert len(err.splitlines()) == 1
    assert main([*argv, "--topics", ",".join(f"{k}={v}" for k, v in topics.items())]) == 0
    _same_as_recorded(recorded, out)


def test_rows_before_the_first_target_are_dropped_and_counted(recorded, tmp_path):
    frame = read_log(recorded / "log.parquet")[0]
    first = frame.index[frame["episode"] == 0][:2]
    frame.loc[first, [f"target_{j}" for j in JOINTS]] = np.nan  # the robot logged before its first command
    write_bag(tmp_path / "late.mcap", frame, JOINTS, JOINTS, True)
    result = import_logs([tmp_path / "late.mcap"], ANYMAL, tmp_path / "late.h5", traj_len=30)
    assert result["bag_rows_without_target_or_odometry"] == 2
    assert result["rows"] == len(frame) - 2 and result["trajectories"] == 5  # episode 0 is now 28 steps long


def test_a_fixed_base_robot_needs_no_odometry(tmp_path):
    cartpole = get_robot("cartpole")
    m, t = 2, 20
    rng = np.random.default_rng(0)
    qpos = np.cumsum(rng.normal(0, 0.01, (m, t + 1, 2)), axis=1)
    qvel = np.gradient(qpos, cartpole.control_dt, axis=1)
    frame = log_frame(cartpole, qpos, qvel, rng.normal(0, 0.1, (m, t, 1)))
    write_bag(tmp_path / "c.mcap", frame, ["slider", "hinge"], ["slider"], False)
    assert import_logs([tmp_path / "c.mcap"], cartpole, tmp_path / "c.h5", traj_len=t)["trajectories"] == m
    with h5py.File(tmp_path / "c.h5", "r") as f:
        assert np.allclose(f["qpos"][()], qpos, atol=1e-6)  # stored as float32


def _refused(argv, message, capsys):
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def _rewrite(src, dst, edit):
    """Copy the bag `src` to the MCAP `dst` message by message through `edit(topic, msg, stamp)`, which returns the
    (msg, stamp) to write, or None to leave the message out."""
    from rosbags.rosbag2 import Reader, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    folder = dst.with_suffix("")
    with Reader(src) as reader, Writer(folder, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {c.id: writer.add_connection(c.topic, c.msgtype, typestore=store) for c in reader.connections}
        for conn, stamp, raw in reader.messages():
            edited = edit(conn.topic, store.deserialize_cdr(raw, conn.msgtype), stamp)
            if edited is not None:
                writer.write(conns[conn.id], edited[1], store.serialize_cdr(edited[0], conn.msgtype))
    next(folder.glob("*.mcap")).replace(dst)


def _edited_database_refused(db, frame, sql, message, capsys):
    """The stand-in robot's bag as a bare database `db`, edited by `sql`, is refused in one line with `message`."""
    import sqlite3

    write_bag(db, frame, JOINTS, JOINTS, True)
    with sqlite3.connect(db) as con:
        con.execute(sql)
    _refused(["import-logs", str(db), "--out", str(db.with_suffix(".h5"))], message, capsys)
    assert not db.with_suffix(".h5").exists()


def test_bags_that_are_no_log_of_this_robot_are_one_line_errors(recorded, tmp_path, capsys):
    out = str(tmp_path / "o.h5")
    mcap = str(recorded / "log.mcap")
    # a topic of another type where the joint states should be
    _refused(["import-logs", mcap, "--out", out, "--topics", "joint_states=/odom,odometry=/joint_states"],
             "topic /odom carries nav_msgs/msg/Odometry, the joint_states must be sensor_msgs/msg/JointState", capsys)
    # another robot's bag
    _refused(["import-logs", mcap, "--out", out, "--robot", "cartpole"], "which the robot lacks", capsys)
    # not a bag at all, under a bag's names
    for name in ("junk.mcap", "junk.db3"):
        (tmp_path / name).write_bytes(b"\x89MCAP0\r\n" + bytes(range(256)) * 8)
        _refused(["import-logs", str(tmp_path / name), "--out", out], "cannot be read" if name == "junk.mcap"
                 else "is no sqlite3 database", capsys)
    # a recording cut short: the MCAP has no summary and no end
    cut = tmp_path / "cut.mcap"
    cut.write_bytes((recorded / "log.mcap").read_bytes()[:-3000])
    _refused(["import-logs", str(cut), "--out", out], "mcap recover", capsys)
    # trajectories of several points: which of them was the target is not known
    two = tmp_path / "two_points.mcap"
    write_bag(two, read_log(recorded / "log.parquet")[0], JOINTS, JOINTS, True, targets_as=TRAJECTORY)
    _rewrite(two, tmp_path / "two.mcap", lambda topic, m, t: (
        (m.points.append(m.points[0]) or m) if topic == ROLES["targets"] else m, t))
    _refused(["import-logs", str(tmp_path / "two.mcap"), "--out", out], "has 2 points", capsys)
    # flags that make no sense
    for topics, message in (("imu=/imu", "--topics takes role=/topic"), ("targets=/a,targets=/b", "at most once"),
                            ("targets=/joint_states", "gives /joint_states to the joint_states and the targets")):
        _refused(["import-logs", mcap, "--out", out, "--topics", topics], message, capsys)
    for flags in (["--topics", "targets=/cmd"], ["--stamps", "received"]):
        _refused(["import-logs", str(recorded / "log.parquet"), "--out", out, *flags], "no log given is a ROS 2 bag",
                 capsys)
    assert not (tmp_path / "o.h5").exists()
    with pytest.raises(BagError, match="targets go as"):
        write_bag(tmp_path / "x.mcap", read_log(recorded / "log.parquet")[0], JOINTS, JOINTS, True,
                  targets_as="std_msgs/msg/String")
    assert topics_of(None) == ROLES and topics_of("targets=/cmd")["targets"] == "/cmd"


def test_targets_stamped_by_another_clock_are_named_and_read_at_the_bags_time(recorded, tmp_path, capsys):
    """Commands stamped in another clock (a controller in simulated time) overlap no joint state: one line says so
    and how to read them; --stamps received reads every message at the time the bag received it."""
    bag = tmp_path / "clocks.mcap"
    write_bag(tmp_path / "same.mcap", read_log(recorded / "log.parquet")[0], JOINTS, JOINTS, True)

    def other_clock(topic, m, t):
        if topic == ROLES["targets"]:
            m.header.stamp.sec += 1_000_000
        return m, t

    _rewrite(tmp_path / "same.mcap", bag, other_clock)
    argv = ["import-logs", str(bag), "--out", str(tmp_path / "o.h5"), "--traj_len", "30"]
    _refused(argv, "do not overlap in time: their stamps come from different clocks", capsys)
    assert main([*argv, "--stamps", "received"]) == 0
    _same_as_recorded(recorded, tmp_path / "o.h5")


def test_hostile_bags_are_refused_before_they_are_read_without_bound(recorded, tmp_path, capsys):
    """A database with a view (it may compute without end), a compressed folder (its files decompress without a
    bound), a database whose messages are no bytes, and an MCAP chunk that inflates past its declared size."""

    from rosbags.rosbag2 import ReaderError, storage_mcap

    from flashnerd.data.rosbag import _bound_rosbags

    frame, out = read_log(recorded / "log.parquet")[0], str(tmp_path / "o.h5")
    _edited_database_refused(tmp_path / "view.db3", frame, "CREATE VIEW endless AS WITH RECURSIVE n(i) AS (SELECT 1 "
                             "UNION ALL SELECT i + 1 FROM n) SELECT i FROM n", "holds a view 'endless'", capsys)
    _edited_database_refused(tmp_path / "text.db3", frame, "UPDATE messages SET data = 'not a message'",
                             "cannot be read", capsys)
    folder = tmp_path / "folder"
    write_bag(folder, frame, JOINTS, JOINTS, True)
    meta = folder / "metadata.yaml"
    meta.write_text(meta.read_text().replace("compression_mode: ''", "compression_mode: file")
                    .replace("compression_format: ''", "compression_format: zstd"))
    _refused(["import-logs", str(folder), "--out", out], "is compressed (file mode)", capsys)

    _bound_rosbags()
    from backports import zstd

    bomb = zstd.compress(bytes(50_000_000))  # 50 MB of zeros in a few kB
    assert len(storage_mcap.DECOMPRESSORS["zstd"](bomb, 1000)) == 1001  # no more than declared (+1: then refused)
    with pytest.raises(ReaderError, match="more than the free memory"):
        storage_mcap.DECOMPRESSORS["zstd"](bomb, 10**15)


def test_what_would_read_without_bound_is_refused_before_rosbags_opens_it(recorded, tmp_path, capsys):
    """A FIFO under a bag's name (it would block), a folder listing a file twice, by a name SQLite reads as a URI, or
    repeating YAML nodes by alias (a few kB that parse into millions of objects), a database column computed when
    read, and a message far larger than a robot's."""
    import os

    frame, out = read_log(recorded / "log.parquet")[0], str(tmp_path / "o.h5")
    os.mkfifo(tmp_path / "pipe.mcap")
    _refused(["import-logs", str(tmp_path / "pipe.mcap"), "--out", out], "is no regular file", capsys)
    folder = tmp_path / "folder"
    write_bag(folder, frame, JOINTS, JOINTS, True)
    meta = folder / "metadata.yaml"
    text = meta.read_text()
    (name,) = [p.name for p in folder.glob("*.db3")]
    for edited, message in ((text.replace(f"- {name}", f"- {name}\n  - {name}"), "lists a file twice"),
                            (text.replace(f"- {name}", f"- {name}?mode=memory"), f"lists '{name}?mode=memory'"),
                            (text.replace(f"- {name}", f"- &f {name}\n  - *f"), "repeats nodes by alias"),
                            # an integer longer than Python converts (4,300 digits)
                            (text + "  huge: " + "9" * 5000 + "\n", "metadata.yaml is no rosbag2 metadata in plain "
                             "YAML (ValueError)")):
        assert edited != text
        meta.write_text(edited)
        _refused(["import-logs", str(folder), "--out", out], message, capsys)
    _edited_database_refused(tmp_path / "computed.db3", frame, "ALTER TABLE topics ADD COLUMN huge TEXT AS "
                             "(printf('%.*c', 1000000000, 'x'))", "holds a generated column 'topics.huge'", capsys)
    big = tmp_path / "big.mcap"
    _rewrite(recorded / "log.mcap", big, lambda topic, m, t: (
        (setattr(m, "name", list(m.name) * 1000) or m) if topic == ROLES["joint_states"] else m, t))
    _refused(["import-logs", str(big), "--out", out], "more than a joint_states message of a robot with 12 joints",
             capsys)


def test_reading_a_bag_runs_nothing_from_it(recorded, tmp_path, monkeypatch, capsys):
    """A rosbag2 folder whose metadata.yaml asks YAML to build a Python object (run a command) is refused by the
    safe loader; a bag's own message definitions are never registered (rosbags generates decoders from definitions
    by running code; only its built-in definitions decode a bag here)."""
    from rosbags.typesys.store import Typestore

    bag = tmp_path / "folder"
    write_bag(bag, read_log(recorded / "log.parquet")[0], JOINTS, JOINTS, True)
    sentinel = tmp_path / "ran"
    meta = bag / "metadata.yaml"
    meta.write_text(meta.read_text().replace("rosbag2_bagfile_information:\n", "rosbag2_bagfile_information:\n"
                                             f"  hook: !!python/object/apply:os.system ['touch {sentinel}']\n", 1))
    _refused(["import-logs", str(bag), "--out", str(tmp_path / "o.h5")], "no rosbag2 metadata in plain YAML", capsys)
    assert not sentinel.exists()

    def register(*args, **kwargs):
        raise AssertionError("a bag's message definitions were registered")

    monkeypatch.setattr(Typestore, "register", register)
    assert main(["import-logs", str(recorded / "log.mcap"), "--out", str(tmp_path / "ok.h5"), "--traj_len", "30"]) == 0


def test_odometry_is_interpolated_between_its_samples_and_its_gaps_leave_rows_out():
    """A base turning at a constant yaw rate, sampled every 10 ms with the quaternion's sign alternating: on a sample
    its values as they are, between two the linear position and the yaw between theirs; rows in a gap of the
    odometry (100 ms against its 10 ms step) are left out, a row on the sample after the gap kept."""
    from flashnerd.data.rosbag import _interpolated, _within_odometry

    t_odom = np.array([0, 10, 20, 30, 130, 140]) * 1_000_000  # ns; mean step 28 ms: a gap past 84 ms
    yaw = 0.5 * t_odom / 1e9 * 100  # rad: 50 rad/s, 0.5 rad per 10 ms
    sign = np.where(np.arange(len(t_odom)) % 2, -1.0, 1.0)  # q and -q are one orientation
    quat = sign[:, None] * np.stack([np.cos(yaw / 2), 0 * yaw, 0 * yaw, np.sin(yaw / 2)], 1)
    odom = np.concatenate([np.stack([t_odom / 1e9, 0 * yaw, 0 * yaw], 1), quat, np.zeros((len(t_odom), 6))], 1)
    t = np.array([10, 15, 25, 40, 60, 130, 135]) * 1_000_000
    keep = _within_odometry(t_odom, t)
    assert keep.tolist() == [True, True, True, False, False, True, True]
    cols = _interpolated("bag", t_odom, odom, t[keep])
    q = np.stack([cols[f"base_quat_{a}"] for a in "wxyz"], 1)
    assert np.array_equal(q[0], quat[1]) and np.array_equal(q[3], quat[4])  # on a sample: as logged, sign and all
    got_yaw = 2 * np.arctan2(q[:, 3], q[:, 0])
    want_yaw = 0.5 * t[keep] / 1e9 * 100
    assert np.allclose(np.angle(np.exp(1j * (got_yaw - want_yaw))), 0, atol=2e-3)  # nlerp of 0.5 rad: within 2 mrad
    assert np.allclose(cols["base_pos_x"], t[keep] / 1e9, rtol=0, atol=1e-12)
    # samples that arrive in bursts (1 ms, 19 ms, ...) and twice at one stamp are no gaps
    bursty = np.array([0, 1, 1, 20, 21, 21, 40, 41]) * 1_000_000
    assert _within_odometry(bursty, np.array([10, 30, 41]) * 1_000_000).all()
