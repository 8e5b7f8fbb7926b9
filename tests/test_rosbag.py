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
from flashnerd.data.rosbag import ARRAY, ROLES, TRAJECTORY, BagError, topics_of, write_bag
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


def test_bags_that_are_no_log_of_this_robot_are_one_line_errors(recorded, tmp_path, capsys):
    out = str(tmp_path / "o.h5")
    mcap = str(recorded / "log.mcap")
    # a topic of another type where the joint states should be
    _refused(["import-logs", mcap, "--out", out, "--topics", "joint_states=/odom"],
             "topic /odom carries nav_msgs/msg/Odometry, the joint_states must be sensor_msgs/msg/JointState", capsys)
    # another robot's bag
    _refused(["import-logs", mcap, "--out", out, "--robot", "cartpole"], "which the robot lacks", capsys)
    # not a bag at all, under a bag's names
    for name in ("junk.mcap", "junk.db3"):
        (tmp_path / name).write_bytes(b"\x89MCAP0\r\n" + bytes(range(256)) * 8)
        _refused(["import-logs", str(tmp_path / name), "--out", out], "cannot be read", capsys)
    # flags that make no sense
    _refused(["import-logs", mcap, "--out", out, "--topics", "imu=/imu"], "--topics takes role=/topic", capsys)
    _refused(["import-logs", str(recorded / "log.parquet"), "--out", out, "--topics", "targets=/cmd"],
             "no log given is a ROS 2 bag", capsys)
    assert not (tmp_path / "o.h5").exists()
    with pytest.raises(BagError, match="targets go as"):
        write_bag(tmp_path / "x.mcap", read_log(recorded / "log.parquet")[0], JOINTS, JOINTS, True,
                  targets_as="std_msgs/msg/String")
    assert topics_of(None) == ROLES and topics_of("targets=/cmd")["targets"] == "/cmd"


def test_reading_a_bag_runs_nothing_from_it(recorded, tmp_path, monkeypatch, capsys):
    """A rosbag2 folder whose metadata.yaml asks YAML to build Python objects is refused (safe YAML); a bag's own
    message definitions are never registered (rosbags generates decoders from definitions by running code; only its
    built-in definitions decode a bag here)."""
    from rosbags.typesys.store import Typestore

    bag = tmp_path / "folder"
    write_bag(bag, read_log(recorded / "log.parquet")[0], JOINTS, JOINTS, True)
    sentinel = tmp_path / "ran"
    meta = bag / "metadata.yaml"
    meta.write_text(f"!!python/object/apply:os.system ['touch {sentinel}']\n" + meta.read_text())
    _refused(["import-logs", str(bag), "--out", str(tmp_path / "o.h5")], "cannot be read", capsys)
    assert not sentinel.exists()

    def register(*args, **kwargs):
        raise AssertionError("a bag's message definitions were registered")

    monkeypatch.setattr(Typestore, "register", register)
    assert main(["import-logs", str(recorded / "log.mcap"), "--out", str(tmp_path / "ok.h5"), "--traj_len", "30"]) == 0
