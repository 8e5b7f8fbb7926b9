"""Robot logs in (data/logs.py): a log of the stand-in robot imports back to the trajectories it was made from, at
the control rate or resampled from a faster one; rows that are not finite are dropped and counted; bad logs are
one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import dataset_arrays

from flashnerd.cli.main import main
from flashnerd.data.dataset import load_dataset
from flashnerd.data.logs import LogError, import_logs, log_frame, read_log, write_log


@pytest.fixture
def recorded(worn_logs):
    return worn_logs


def test_a_recorded_log_imports_back_to_the_recorded_trajectories(recorded):
    out = recorded / "imported.h5"
    assert main(["import-logs", str(recorded / "log.parquet"), "--out", str(out), "--traj_len", "30"]) == 0
    ref, got = dataset_arrays(recorded / "ref.h5"), dataset_arrays(out)
    for k in ref:
        assert got[k].shape == ref[k].shape and np.allclose(got[k], ref[k], atol=1e-6), k
    data = load_dataset(out)
    assert data.attrs["source"] == "logs" and data.attrs["variants"] == ["anymal_c_worn"]
    assert data.attrs["non_finite_rows"] == 0 and data.attrs["segments"] == 6


def test_a_faster_log_is_resampled_to_the_control_step(recorded, anymal):
    """Midpoints added between the rows (states interpolated, targets held) must not change the import."""
    frame, variant = read_log(recorded / "log.parquet")
    mid = frame.copy()
    nxt = frame.groupby("episode").shift(-1)
    for c in frame.columns:
        if c.startswith(("q_", "dq_", "base_")):
            mid[c] = (frame[c] + nxt[c]) / 2
    mid["time"] = frame["time"] + anymal.control_dt / 2
    mid = mid[nxt["time"].notna()]
    fast = pd.concat([frame, mid]).sort_values(["episode", "time"], kind="stable").reset_index(drop=True)
    write_log(recorded / "fast.csv", fast)
    out = recorded / "fast.h5"
    import_logs([recorded / "fast.csv"], anymal, out, traj_len=30)
    ref, got = dataset_arrays(recorded / "ref.h5"), dataset_arrays(out)
    for k in ("qpos", "qvel", "ctrl"):
        assert np.allclose(got[k], ref[k], atol=1e-5), k


def test_rows_that_are_not_finite_are_dropped_counted_and_split_the_run(recorded, anymal):
    frame, _ = read_log(recorded / "log.parquet")
    one = frame[frame["episode"] == 0].drop(columns="episode").reset_index(drop=True)  # 31 rows, one run
    one.loc[10, "dq_LF_KFE"] = np.nan
    write_log(recorded / "holed.parquet", one)
    result = import_logs([recorded / "holed.parquet"], anymal, recorded / "holed.h5", traj_len=8)
    assert result["non_finite_rows"] == 1 and result["segments"] == 2
    assert result["trajectories"] == 1 + 2  # rows 0-9 give one 8-step trajectory, rows 11-30 two


def test_a_run_is_cut_into_trajectories_that_end_at_its_last_row(recorded, anymal):
    """A run that ends in a fall keeps the steps before it: a 30-step episode imported as 20-step trajectories is its
    steps 10-30, the remainder dropped at its start."""
    frame, _ = read_log(recorded / "log.parquet")
    write_log(recorded / "one.parquet", frame[frame["episode"] == 0])
    result = import_logs([recorded / "one.parquet"], anymal, recorded / "one.h5", traj_len=20)
    assert result["trajectories"] == 1
    ref, got = dataset_arrays(recorded / "ref.h5"), dataset_arrays(recorded / "one.h5")
    assert np.allclose(got["qpos"][0], ref["qpos"][0, 10:], atol=1e-6)
    assert np.allclose(got["ctrl"][0], ref["ctrl"][0, 10:], atol=1e-6)


def test_velocity_units_are_judged_over_the_whole_file(recorded, anymal):
    """A unit error is wrong in every row: one episode whose knee velocity reads 0.4 x its position's derivative (a
    nearly still joint, a noisy estimate) imports; the same factor over the whole file is refused."""
    frame, _ = read_log(recorded / "log.parquet")
    one = frame.copy()
    first = one["episode"] == 0
    one.loc[first, "dq_LF_KFE"] *= 0.4
    write_log(recorded / "one_off.parquet", one)
    assert import_logs([recorded / "one_off.parquet"], anymal, recorded / "one_off.h5", traj_len=30)["segments"] == 6
    every = frame.assign(dq_LF_KFE=frame["dq_LF_KFE"] * 0.4)
    write_log(recorded / "all_off.parquet", every)
    with pytest.raises(LogError, match="dq_LF_KFE is 0.4\\d* x the time derivative of its position"):
        import_logs([recorded / "all_off.parquet"], anymal, recorded / "all_off.h5", traj_len=30)


def _bad(recorded, edit):
    frame, _ = read_log(recorded / "log.parquet")
    return edit(frame.copy())


@pytest.mark.parametrize("edit, message", [
    (lambda f: f.drop(columns="base_quat_w"), "lacks column base_quat_w"),
    (lambda f: f.drop(columns=["q_RH_KFE"]), "has 11 q_<joint> columns, robot 'anymal_c' has 12 (missing: q_RH_KFE)"),
    (lambda f: f.assign(q_TAIL=0.0), "has 13 q_<joint> columns, robot 'anymal_c' has 12 (unknown: q_TAIL)"),
    (lambda f: f.assign(time=f["time"][::-1].to_numpy()), "time does not increase"),
    (lambda f: f.assign(**{c: np.degrees(f[c]) for c in f if c.startswith("dq_")}),
     "x the time derivative of its position; log it in rad/s"),
    (lambda f: f.assign(**{c: np.degrees(f[c]) for c in f if c.startswith(("q_", "dq_"))}),
     "outside the joint's range"),
    (lambda f: f.assign(q_LF_HAA="left"), "column q_LF_HAA holds"),  # Arrow's name of its string type
    # time in ns: resampled, each run would be 3e10 control steps (a 1e7 s span of two rows was killed for memory)
    (lambda f: f.assign(time=f["time"] * 1e9), "control steps of 0.02 s (more than 100 per row); log time in s"),
    # time in ms on a 1 kHz log is 20 control steps per row: the rate passes, and the positions move 1000x slower than
    # their logged velocities (too slowly to be judged on their own)
    (lambda f: f.assign(time=f["time"] * 100), "x the time derivative of its position; log it in rad/s"),
    # an estimator's zero orientation before it starts: normalized, it would be a NaN row
    (lambda f: f.assign(**{c: np.where(np.arange(len(f)) == 5, 0.0, f[c]) for c in f if c.startswith("base_quat")}),
     "the base orientation at time 0.1 s has norm 0; log unit quaternions"),
    # 2% off unit norm is no rounding (3 decimals stay within 1e-3): the same tolerance as a bag's odometry
    (lambda f: f.assign(**{c: np.where(np.arange(len(f)) == 5, 1.02 * f[c], f[c]) for c in f
                           if c.startswith("base_quat")}), "the base orientation at time 0.1 s has norm 1.02"),
    # a speed of 1e200 overflows the unit check's products: judged in one line, no numpy warning beside it
    (lambda f: f.assign(dq_LF_HAA=np.where(np.arange(len(f)) == 5, 1e200, f["dq_LF_HAA"])),
     "dq_LF_HAA is"),
])
@pytest.mark.filterwarnings("error::RuntimeWarning")  # a numpy warning would print lines beside the error
def test_bad_logs_are_one_line_errors(recorded, edit, message, capsys, tmp_path):
    path = tmp_path / "bad.parquet"
    write_log(path, _bad(recorded, edit))
    assert main(["import-logs", str(path), "--out", str(tmp_path / "out.h5")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out.h5").exists()


def test_quaternions_written_with_three_decimals_import(recorded, anymal, tmp_path):
    frame, _ = read_log(recorded / "log.parquet")
    quat = [c for c in frame if c.startswith("base_quat")]
    write_log(tmp_path / "rounded.parquet", frame.assign(**{c: frame[c].round(3) for c in quat}))
    import_logs([tmp_path / "rounded.parquet"], anymal, tmp_path / "rounded.h5", traj_len=30)
    assert (tmp_path / "rounded.h5").exists()


def test_a_file_that_is_not_a_log_is_a_one_line_error(tmp_path, capsys):
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1" + bytes(range(256)) * 4)
    assert main(["import-logs", str(junk), "--out", str(tmp_path / "o.h5")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot be read" in err and len(err.splitlines()) == 1
    with pytest.raises(LogError, match="must be .parquet or .csv"):
        read_log(junk.rename(tmp_path / "junk.txt"))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def test_a_parquet_footer_that_understates_its_rows_is_refused_and_the_row_groups_are_held_to_theirs(tmp_path,
                                                                                                        monkeypatch):
    """A footer's file-level row count is what a memory check would read, each row group's count what the reader
    allocates by: a file that declares 1 row over row groups of 200,000 is refused. Where both say 1, the reader
    keeps 1 row; and pages that decompress past the memory are refused before they are read, whatever the counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flashnerd.utils import host_memory

    n = 200_000
    honest = tmp_path / "honest.parquet"
    pq.write_table(pa.table({"time": np.zeros(n), "x": np.zeros(n)}), honest, row_group_size=n, compression="zstd",
                   use_dictionary=False)  # plain pages: 1.6 MB of zeros a column, a few KB on disk
    raw = bytes(honest.read_bytes())
    count = b"\x16" + _varint(2 * n)  # thrift compact: field 3 (num_rows), i64, zigzag varint
    one = bytes([0x82] + [0x80] * (len(count) - 3) + [0x00])  # 1, zigzagged, padded to the same length
    footer = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    file_level = raw.index(count, footer)  # FileMetaData's own count (field 3) precedes its row groups (field 4)
    lying = tmp_path / "lying.parquet"
    lying.write_bytes(raw[:file_level + 1] + one + raw[file_level + len(count):])
    assert pq.ParquetFile(lying).metadata.num_rows == 1 and pq.ParquetFile(lying).read().num_rows == n
    with pytest.raises(LogError, match="declares 1 rows and row groups of 200,000; it is corrupt") as err:
        read_log(lying)
    assert "\n" not in str(err.value)
    both = tmp_path / "both.parquet"
    both.write_bytes(raw.replace(count, b"\x16" + one))
    assert len(read_log(both)[0]) == 1
    # its one row passes a row count's check; its pages still decompress to 3.2 MB, past a machine with 2 MiB free
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 2 * 2**20)
    with pytest.raises(LogError, match="too large for this machine's memory"):
        read_log(both)


def test_a_log_of_a_fixed_base_robot_has_no_base_columns(cartpole, tmp_path):
    m, t = 2, 20
    rng = np.random.default_rng(0)
    qpos = np.cumsum(rng.normal(0, 0.01, (m, t + 1, 2)), axis=1)
    qvel = np.gradient(qpos, cartpole.control_dt, axis=1)
    frame = log_frame(cartpole, qpos, qvel, rng.normal(0, 0.1, (m, t, 1)))
    assert not any(c.startswith("base_") for c in frame) and {"q_slider", "q_hinge", "target_slider"} <= set(frame)
    write_log(tmp_path / "c.csv", frame)
    result = import_logs([tmp_path / "c.csv"], cartpole, tmp_path / "c.h5", traj_len=t)
    assert result["trajectories"] == m
    assert np.allclose(load_dataset(tmp_path / "c.h5").qpos.numpy(), qpos, atol=1e-6)


def test_rows_of_no_episode_are_dropped_and_counted(recorded, anymal):
    frame, _ = read_log(recorded / "log.parquet")
    frame = frame.astype({"episode": float})
    frame.loc[frame["episode"] == 2, "episode"] = np.nan  # one episode of six: its rows belong to no run
    write_log(recorded / "orphans.parquet", frame)
    result = import_logs([recorded / "orphans.parquet"], anymal, recorded / "orphans.h5", traj_len=30)
    assert result["non_finite_rows"] == int(frame["episode"].isna().sum()) > 0 and result["segments"] == 5


def test_logs_that_would_not_fit_in_memory_are_refused_before_they_are_read(recorded, anymal, tmp_path,
                                                                             monkeypatch):
    """A compressed Parquet file is refused on what its footer declares, not its size on disk, and resampling on the
    control steps it would make: here on a machine made to have 12 MB free."""
    from flashnerd.utils import host_memory

    zeros = tmp_path / "zeros.parquet"
    pd.DataFrame({"time": np.zeros(2_000_000)}).to_parquet(zeros, compression="zstd")  # 16 MB of zeros
    frame, _ = read_log(recorded / "log.parquet")
    slow = tmp_path / "slow.parquet"  # rows 1 s apart, 50 control steps each: ~4,600 steps of ~3.6 KB when resampled
    write_log(slow, frame.assign(time=frame["time"] * 50))
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 12 * 2**20)
    assert zeros.stat().st_size < 100_000
    with pytest.raises(LogError, match="too large for this machine's memory"):
        read_log(zeros)
    with pytest.raises(LogError, match="control steps so far, .* more than this machine's memory holds"):
        import_logs([slow], anymal, tmp_path / "slow.h5", traj_len=30)
    assert not (tmp_path / "slow.h5").exists()


def _with_metadata(src, dst, **metadata: bytes) -> None:
    """`src`'s Parquet log written again as `dst` with schema metadata entries replaced."""
    import pyarrow.parquet as pq

    table = pq.read_table(src)
    pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata}), dst)


@pytest.mark.parametrize("pandas_metadata", [
    b"{}", b"[]", b"[" * 5000 + b"]" * 5000,  # pandas' reader raised KeyError, TypeError, RecursionError
    b'{"columns": [{"name": null}], "index_columns": []}',  # AssertionError
    b'{"columns": [], "index_columns": [], "attributes": {"a": [' + b"0, " * 200_000 + b'0]}}',  # copied per column
])
def test_the_pandas_metadata_of_a_parquet_log_is_not_followed(recorded, anymal, pandas_metadata, tmp_path):
    """What a writer stored about its pandas frame (index, dtypes, attrs) is the file's word: the log's columns are
    read as they are, so the import equals the clean file's."""
    odd = tmp_path / "odd.parquet"
    _with_metadata(recorded / "log.parquet", odd, pandas=pandas_metadata)
    import_logs([odd], anymal, tmp_path / "odd.h5", traj_len=30)
    import_logs([recorded / "log.parquet"], anymal, tmp_path / "clean.h5", traj_len=30)
    odd_arrays, clean = dataset_arrays(tmp_path / "odd.h5"), dataset_arrays(tmp_path / "clean.h5")
    assert all(np.array_equal(odd_arrays[k], clean[k]) for k in clean)


def test_parquet_columns_that_hold_no_numbers_are_not_read_unless_the_format_names_them(recorded, anymal, tmp_path):
    """A text or binary column of a lab's own (notes, a mode) is left unread, whatever it would decompress to; one
    the import uses must hold numbers; two columns of one name are refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(recorded / "log.parquet")
    blob = pa.array([bytes(2**16)] * table.num_rows, type=pa.binary())  # 64 kB of zeros a row, little on disk
    pq.write_table(table.append_column("notes", blob), tmp_path / "notes.parquet", compression="zstd")
    assert (tmp_path / "notes.parquet").stat().st_size < 10 * 2**20
    frame, _ = read_log(tmp_path / "notes.parquet", used=["time"])
    assert "notes" not in frame and list(frame) == table.column_names
    text_time = table.set_column(table.column_names.index("time"), "time", pa.array(["0"] * table.num_rows))
    pq.write_table(text_time, tmp_path / "text_time.parquet")
    assert "time" not in read_log(tmp_path / "text_time.parquet")[0]  # a reader that uses no time
    with pytest.raises(LogError, match="column time holds string, not numbers"):
        import_logs([tmp_path / "text_time.parquet"], anymal, tmp_path / "t.h5", traj_len=30)
    pq.write_table(table.append_column("time", table.column("time")), tmp_path / "twice.parquet")
    with pytest.raises(LogError, match="has two columns named time; name each column once"):
        read_log(tmp_path / "twice.parquet")


def test_a_log_that_splits_into_more_pieces_than_allowed_is_refused(recorded, anymal, monkeypatch, tmp_path):
    """Every run and segment is a frame worked on apart: a file of one-row runs (an episode number per row, or every
    other row not finite) is refused at the bound, not imported for hours."""
    from flashnerd.data import logs

    frame, _ = read_log(recorded / "log.parquet")
    monkeypatch.setattr(logs, "MAX_PIECES", 50)
    write_log(tmp_path / "rows.parquet", frame.assign(episode=np.arange(len(frame))))
    with pytest.raises(LogError, match="has more than 50 episode numbers"):
        import_logs([tmp_path / "rows.parquet"], anymal, tmp_path / "rows.h5", traj_len=30)
    holes = frame.astype({"q_LF_HAA": float})
    holes.loc[holes.index[::2], "q_LF_HAA"] = np.nan
    write_log(tmp_path / "holes.parquet", holes)
    with pytest.raises(LogError, match="splits into more than 50 segments"):
        import_logs([tmp_path / "holes.parquet"], anymal, tmp_path / "holes.h5", traj_len=30)
    assert not any(tmp_path.glob("*.h5"))


@pytest.mark.skipif(not Path("/proc/self/pagemap").is_file(), reason="needs Linux's /proc")
def test_a_bag_folders_digest_reads_what_its_files_say_they_hold(tmp_path):
    """A bag's storage may be a link to where the data lives: the digest reads the file it links to, and no more of
    any file than its size (a link to /proc/self/pagemap says 0 bytes and reads ~256 GiB without end)."""
    from flashnerd.data.logs import _digest

    bag, copy = tmp_path / "bag", tmp_path / "copy"
    for folder in (bag, copy):
        folder.mkdir()
        (folder / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    (tmp_path / "elsewhere.mcap").write_bytes(b"x" * 1000)
    (bag / "bag_0.mcap").symlink_to(tmp_path / "elsewhere.mcap")
    (copy / "bag_0.mcap").write_bytes(b"x" * 1000)
    assert _digest(bag) == _digest(copy)
    (bag / "extra").symlink_to("/proc/self/pagemap")
    (copy / "extra").write_bytes(b"")
    assert _digest(bag) == _digest(copy)
    from flashnerd.cli.common import checkpoint_sha256  # the same bounded read, for a file a run's JSON names

    assert checkpoint_sha256("/proc/self/pagemap") == checkpoint_sha256(str(copy / "extra"))
