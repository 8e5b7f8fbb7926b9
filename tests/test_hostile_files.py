"""Files from strangers: every command that reads a checkpoint refuses a crafted one in one line, and no code in
it runs (each hostile pickle would create a marker file when unpickled)."""

from __future__ import annotations

import json
import os
import pickle
import re
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import TASK

from flashnerd.cli.main import main
from flashnerd.data.record import record
from flashnerd.models.checkpoint import convert_pickled, model_from_checkpoint, read_checkpoint, save_checkpoint
from flashnerd.robots import get_robot


class _RunsCode:
    """Unpickling this calls os.system: the canonical hostile checkpoint."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """{flavor: path} of files that run code when unpickled, plus a tiny real dataset and the marker path."""
    root = tmp_path_factory.mktemp("hostile")
    marker = root / "code_ran"
    payload = {"format": "flashnerd-dynamics", "format_version": 1, "actor_state_dict": _RunsCode(str(marker)),
               "iter": 0}
    files = {"torch_zip": root / "evil.pt", "bare_pickle": root / "bare.pt", "disguised": root / "evil.safetensors"}
    torch.save(payload, files["torch_zip"])
    files["bare_pickle"].write_bytes(pickle.dumps(payload))
    files["disguised"].write_bytes(files["torch_zip"].read_bytes())
    data = root / "tiny.h5"
    record(get_robot("anymal_c"), num_worlds=2, steps=32, out=data, traj_len=16, seed=1, progress=False)
    return root, marker, files, data


def _commands(evil: str, data: str, out: str) -> list[list[str]]:
    """Every command that reads a dynamics or a policy checkpoint, pointed at `evil`."""
    small = ["--num_envs", "2"]
    return [
        ["evaluate-model", "--checkpoint", evil, "--data", data],
        ["export-model", "--checkpoint", evil, "--out", f"{out}/x.safetensors"],
        ["convert-checkpoint", evil, "--out", f"{out}/x.safetensors"],
        ["fit", "--data", data, "--out", f"{out}/x.safetensors", "--init", evil, "--max_steps", "2"],
        ["train", "--task", TASK, "--dynamics", "flashnerd", "--dynamics_checkpoint", evil, *small,
         "--max_iterations", "1", "--log_root", out],
        ["train", "--task", TASK, "--resume", "--checkpoint", evil, *small, "--max_iterations", "1",
         "--log_root", out],
        ["play", "--task", TASK, "--checkpoint", evil, *small, "--log_root", out],
        ["eval", "--task", TASK, "--checkpoint", evil, *small, "--episodes", "1", "--log_root", out],
        ["record", "--task", TASK, "--checkpoint", evil, "--num_worlds", "2", "--steps", "4", "--traj_len", "4",
         "--out", f"{out}/r.h5"],
        ["plan", "--dynamics", "flashnerd", "--dynamics_checkpoint", f"flashnerd={evil}", "--platforms", "0",
         "--out", f"{out}/plan.json"],
        ["bench", "ppo", "--task", TASK, "--dynamics", "flashnerd", "--dynamics_checkpoint", f"flashnerd={evil}",
         *small, "--max_iterations", "1", "--out_dir", out],
        ["bench", "finetune", "--task", "FlashNeRD-Roll-Flat-Microduck-v0", "--pretrained", evil, *small,
         "--out_dir", out],
    ]


@pytest.mark.parametrize("flavor", ["torch_zip", "bare_pickle", "disguised"])
def test_no_command_runs_code_from_a_checkpoint(hostile, flavor, tmp_path, capsys):
    _, marker, files, data = hostile
    for argv in _commands(str(files[flavor]), str(data), str(tmp_path)):
        code = main(argv)
        err = capsys.readouterr().err.strip()
        assert code != 0, argv
        assert len(err.splitlines()) == 1 and "Traceback" not in err, (argv, err)
        assert not marker.exists(), f"code from the file ran under {argv[:2]}"
        assert not [p for p in tmp_path.rglob("*") if p.is_file()], (argv, list(tmp_path.rglob("*")))


def test_a_policy_whose_entries_decompress_past_the_memory_is_refused(tmp_path, monkeypatch, capsys):
    """torch writes zip entries stored and reads deflated ones too: a small file can declare gigabytes. Here 8 MB of
    zeros deflated to a few KB, on a machine made to have 4 MB free."""
    import zipfile

    from flashnerd.utils import host_memory

    plain, bomb = tmp_path / "plain.pt", tmp_path / "bomb.pt"
    torch.save({"model_state_dict": {"w": torch.zeros(2**21)}, "iter": 0}, plain)
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    assert bomb.stat().st_size < 100_000
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 4 * 2**20)
    assert main(["eval", "--task", TASK, "--checkpoint", str(bomb), "--num_envs", "2", "--episodes", "1",
                 "--log_root", str(tmp_path / "logs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "decompress to 8 MiB, more than this machine's memory holds" in err and len(err.splitlines()) == 1, err
    monkeypatch.undo()
    assert torch.load(bomb, weights_only=True)["model_state_dict"]["w"].numel() == 2**21  # what torch would read


def _doubled(levels: int) -> list:
    """A list of 2^levels leaves that pickles in a few hundred bytes: each level names the one below twice."""
    node: list = [0.0]
    for _ in range(levels):
        node = [node, node]
    return node


def _nested(depth: int) -> list:
    node: list = []
    for _ in range(depth):
        node = [node]
    return node


@pytest.mark.parametrize("payload, message", [
    ({"model_state_dict": {"w": torch.zeros(1).expand(10**6, 10**6)}, "iter": 0},
     r"a tensor of shape \(1000000, 1000000\) repeats its 4 stored bytes by overlapping strides \(0, 0\)"),
    ({"model_state_dict": {}, "optimizer_state_dict": {"state": {0: {"extra": _doubled(19)}}}, "iter": 0},
     "it holds more than 262,144 values, counting a shared one each time it appears"),
    ({"model_state_dict": {}, "infos": _nested(200), "iter": 0}, "its containers nest more than 64 deep"),
    ({"model_state_dict": {"w": torch.eye(3).to_sparse()}, "iter": 0}, "a tensor of layout torch.sparse_coo"),
])
def test_a_small_pickle_that_declares_a_huge_tree_is_refused_before_any_copy(payload, message, tmp_path, capsys):
    """What a few KB of plain pickle can declare: a zero-stride view of one number (terabytes once cloned), a list
    named twice at each of 19 levels (2^19 leaves once copied; the optimizer's load deep-copies), nesting past any
    checkpoint's. Each is refused in one line by the commands that read policies and convert checkpoints."""
    bad = tmp_path / "bad.pt"
    torch.save(payload, bad)
    assert bad.stat().st_size < 20_000
    for argv in (["eval", "--task", TASK, "--checkpoint", str(bad), "--num_envs", "2", "--episodes", "1",
                  "--log_root", str(tmp_path / "logs")],
                 ["convert-checkpoint", str(bad), "--out", str(tmp_path / "x.safetensors")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and re.search(message, err), (argv, err)
    assert not (tmp_path / "x.safetensors").exists()


def test_legacy_checkpoint_is_refused_with_the_command_that_converts_it(tmp_path):
    legacy = tmp_path / "old.pt"
    ckpt = read_checkpoint("checkpoints/cartpole/rwm.safetensors")
    torch.save({"format": "flashnerd-dynamics", "format_version": 1, **ckpt}, legacy)
    with pytest.raises(ValueError, match="flashnerd convert-checkpoint"):
        read_checkpoint(legacy)
    convert_pickled(legacy, tmp_path / "new.safetensors")
    again = read_checkpoint(tmp_path / "new.safetensors")
    assert all(torch.equal(again["state_dict"][k], v) for k, v in ckpt["state_dict"].items())
    assert again["metrics"] == ckpt["metrics"] and again["model_config"] == ckpt["model_config"]


def test_a_pickle_that_builds_objects_is_not_converted(hostile, tmp_path):
    _, marker, files, _ = hostile
    with pytest.raises(ValueError, match="refusing to load checkpoint .* posix.system"):
        convert_pickled(files["torch_zip"], tmp_path / "x.safetensors")
    assert not marker.exists() and not (tmp_path / "x.safetensors").exists()


def _rewrite(path, out, **changes) -> None:
    """`path` saved again with some payload fields replaced (a crafted but well-formed safetensors file)."""
    ckpt = read_checkpoint(path)
    ckpt.update(changes)
    save_checkpoint(out, ckpt)


@pytest.mark.parametrize("change, message", [
    ({"model_config": {"input_dim": 10**9, "output_dim": 10**9}}, "out of range"),
    ({"model_config": {"input_dim": 7, "output_dim": 10}}, "do not match its model config|does not build"),
    ({"kind": "transformer9000"}, "unknown model kind"),
    ({"control_dt": float("nan")}, "control_dt"),
    ({"robot": 3}, "field 'robot'"),
    ({"state_dict": {}}, "do not match its model config"),
    ({"model_config": {"input_dim": 7, "output_dim": 5, "n_head": 0}}, "does not build|out of range|unexpected"),
    ({"model_config": {"input_dim": 7, "output_dim": 5, "n_layer": 10**8}}, "out of range"),
    ({"representation": {"num_joints": 1}}, "lacks a layout"),
    ({"step": "many"}, "field 'step' is not a number"),
    ({"ensemble": 10**6}, "field 'ensemble'"),
    ({"ensemble": "4"}, "field 'ensemble'"),
    ({"ensemble": 3}, "do not match its model config"),  # one model's weights claimed as 3 members
    ({"ensemble_shared": True}, "field 'ensemble_shared'"),
    ({"ensemble_shared": "2"}, "field 'ensemble_shared'"),
    ({"ensemble_shared": 65}, "field 'ensemble_shared'"),
    ({"ensemble_shared": 1}, "does not build"),  # layers shared by the members of one model
    ({"ensemble": 3, "ensemble_shared": 1}, "does not build"),  # RWM members share no layers
    # 64 members of 5,000 blocks each were built as Python objects (minutes, many GB) before any shape was compared
    ({"model_config": {"input_dim": 7, "output_dim": 5, "n_layer": 5000}, "ensemble": 64}, "asks for 5000 layers"),
    ({"step": float("inf")}, "field 'step' is not a number of at least 0"),  # the suite's int() raised OverflowError
    ({"history": [1]}, "its history is not a list of validations"),  # the suite read history[-1]["val_loss"]
    ({"input_normalizer": {"mean": torch.zeros(9), "std": torch.zeros(9)}}, "input_normalizer.std holds values that"),
    ({"fit_config": [1, 2]}, "field 'fit_config' is not a dict"),  # `fit --init` and the suite's card read these
    ({"metrics": [0.1]}, "field 'metrics' is not a dict"),
])
def test_crafted_safetensors_fields_are_one_line_errors(change, message, tmp_path):
    out = tmp_path / "crafted.safetensors"
    _rewrite("checkpoints/cartpole/rwm.safetensors", out, **change)
    with pytest.raises(ValueError, match=message):
        model_from_checkpoint(read_checkpoint(out))


def test_a_checkpoint_whose_header_length_starts_like_a_pickle_still_reads(tmp_path):
    """A safetensors file opens with its header length (8 bytes, little endian): when that is 128 mod 256 its first
    byte is 0x80, a pickle's first byte. Such a checkpoint is still read as the safetensors file it is."""
    import struct

    ckpt = read_checkpoint("checkpoints/cartpole/rwm.safetensors")
    path = tmp_path / "c.safetensors"
    for pad in range(2048):
        save_checkpoint(path, {**ckpt, "pad": "x" * pad})
        if path.read_bytes()[0] == 0x80:
            break
    assert path.read_bytes()[0] == 0x80 and struct.unpack("<Q", path.read_bytes()[:8])[0] % 256 == 128
    assert read_checkpoint(path)["pad"] == "x" * pad


def test_non_float_and_oddly_keyed_weights_are_refused(tmp_path):
    ckpt = read_checkpoint("checkpoints/cartpole/rwm.safetensors")
    name = next(iter(ckpt["state_dict"]))
    for bad in ({**ckpt["state_dict"], name: ckpt["state_dict"][name].to(torch.complex64)},
                {0: ckpt["state_dict"][name]}):
        save_checkpoint(tmp_path / "odd.safetensors", {**ckpt, "state_dict": bad})
        with pytest.raises(ValueError, match="is not a named float tensor"):
            read_checkpoint(tmp_path / "odd.safetensors")


def test_weights_of_a_float8_type_are_refused_in_one_line(tmp_path):
    """float8 counts as floating point, but torch checks no float8 for finiteness: refused by its type."""
    ckpt = read_checkpoint("checkpoints/cartpole/rwm.safetensors")
    name = next(iter(ckpt["state_dict"]))
    eight = {**ckpt["state_dict"], name: ckpt["state_dict"][name].to(torch.float8_e4m3fn)}
    save_checkpoint(tmp_path / "f8.safetensors", {**ckpt, "state_dict": eight})
    with pytest.raises(ValueError, match=f"stores state_dict.{name} as torch.float8_e4m3fn; FlashNeRD checkpoints"):
        read_checkpoint(tmp_path / "f8.safetensors")


def test_non_finite_weights_are_refused(tmp_path):
    ckpt = read_checkpoint("checkpoints/cartpole/rwm.safetensors")
    name = next(iter(ckpt["state_dict"]))
    ckpt["state_dict"][name] = torch.full_like(ckpt["state_dict"][name], float("nan"))
    save_checkpoint(tmp_path / "nan.safetensors", ckpt)
    with pytest.raises(ValueError, match="non-finite"):
        read_checkpoint(tmp_path / "nan.safetensors")


def test_truncated_and_garbage_headers_are_one_line_errors(tmp_path):
    good = open("checkpoints/cartpole/rwm.safetensors", "rb").read()
    cases = {"truncated": good[: len(good) // 2], "garbage": b"\x00" * 64,
             "huge_header": struct.pack("<Q", 2**60) + b"{}",
             "not_ours": struct.pack("<Q", 2) + b"{}"}
    for name, blob in cases.items():
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(blob)
        with pytest.raises(ValueError) as err:
            read_checkpoint(path)
        assert "\n" not in str(err.value), name


def test_safetensors_round_trip_keeps_the_optimizer_state_usable(tmp_path):
    """Int-keyed optimizer state survives the JSON tree, so a resumed Adam continues where it stopped."""
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    save_checkpoint(tmp_path / "o.safetensors", {"optimizer": opt.state_dict(), "rng": torch.get_rng_state()})
    from safetensors import safe_open  # the raw file: the payload reads back even without our field checks
    with safe_open(str(tmp_path / "o.safetensors"), "pt") as f:
        meta = json.loads(f.metadata()["payload"])
    assert "__int_keys__" in meta["optimizer"]["state"]
    fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    from flashnerd.models.checkpoint import _decode
    with safe_open(str(tmp_path / "o.safetensors"), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    fresh.load_state_dict(_decode(meta, tensors)["optimizer"])
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


# --- datasets: validated where they are read --------------------------------------------------------------------


def _copy_with(src, dst, edit) -> None:
    """Copy an HDF5 dataset and apply `edit(h5file)` to the copy."""
    import shutil

    shutil.copy(src, dst)
    with h5py.File(dst, "a") as f:
        edit(f)


def test_non_finite_and_non_unit_quaternion_trajectories_are_dropped_and_counted(hostile, tmp_path):
    from flashnerd.data.dataset import load_dataset

    _, _, _, data = hostile
    clean = load_dataset(data)
    assert clean.attrs["dropped_on_read"] == {"non_finite": 0, "quaternion": 0}

    def poison(f):
        qvel, qpos = f["qvel"][()], f["qpos"][()]
        qvel[0, 3] = float("nan")  # one NaN velocity in trajectory 0
        qpos[1, 5, 3:7] = [2.0, 0.0, 0.0, 0.0]  # a base quaternion of length 2 in trajectory 1
        f["qvel"][...], f["qpos"][...] = qvel, qpos

    _copy_with(data, tmp_path / "bad.h5", poison)
    bad = load_dataset(tmp_path / "bad.h5")
    assert bad.attrs["dropped_on_read"] == {"non_finite": 1, "quaternion": 1}
    assert bad.num_trajectories == clean.num_trajectories - 2
    assert torch.equal(bad.qpos, clean.qpos[2:]) and bool(torch.isfinite(bad.qvel).all())


def _all_nan(f):
    f["qvel"][...] = float("nan")


def _narrow(f):
    q = f["qpos"][()][..., :-1]
    del f["qpos"]
    f.create_dataset("qpos", data=q)


def _other_dt(f):
    f.attrs["control_dt"] = 0.01


def _text(f):
    del f["ctrl"]
    f.create_dataset("ctrl", data=[b"a", b"b"])


def _group(f):
    del f["ctrl"]
    f.create_group("ctrl")


def _huge(f):  # a few KB on disk that declare ~7 TB of float32
    del f["qpos"]
    f.create_dataset("qpos", shape=(10**8, 1000, 19), dtype="f4", chunks=(1, 1000, 19), compression="gzip")


def _bad_version(f):
    f.attrs["format_version"] = float("inf")


def _link_loop(f):  # a soft link to itself: HDF5 gives up after 16 hops with a RuntimeError
    del f["qpos"]
    f["qpos"] = h5py.SoftLink("/qpos")


def _external_link(f):  # qpos read from another file, which the user never named
    other = Path(f.filename).with_name("elsewhere.h5")
    with h5py.File(other, "w") as g:
        g["q"] = f["qpos"][()]
    del f["qpos"]
    f["qpos"] = h5py.ExternalLink(str(other), "q")


def _external_storage(f):  # an array whose bytes are those of another file (here /dev/zero)
    shape = f["qpos"].shape
    del f["qpos"]
    f.create_dataset("qpos", shape=shape, dtype="f4", external=[("/dev/zero", 0, h5py.h5f.UNLIMITED)])


def _torque_from_elsewhere(f):  # an optional array (torque labels) whose bytes are another file's
    other = Path(f.filename).with_name("secret.bin")
    shape = f["ctrl"].shape
    other.write_bytes(np.arange(int(np.prod(shape)), dtype="<f4").tobytes())
    del f["torque"]
    f.create_dataset("torque", shape=shape, dtype="<f4", external=[(str(other), 0, h5py.h5f.UNLIMITED)])


def _torque_linked(f):  # the same array behind an external link
    other = Path(f.filename).with_name("elsewhere_torque.h5")
    with h5py.File(other, "w") as g:
        g["t"] = np.ones(f["ctrl"].shape, dtype="f4")
    del f["torque"]
    f["torque"] = h5py.ExternalLink(str(other), "t")


def _deep_layout(f):  # JSON nested past Python's recursion limit
    f.attrs["state_layout"] = "[" * 100_000 + "]" * 100_000


def _huge_chunk(f):  # a small array in one chunk of 512 MiB (unwritten here: the refusal reads no data)
    shape = f["qpos"].shape
    del f["qpos"]
    f.create_dataset("qpos", shape=shape, maxshape=(None, None, None), chunks=(1, 1, 2**27), dtype="f4",
                     compression="gzip")


def _fewer_controls(f):
    ctrl = f["ctrl"][()][:1]
    del f["ctrl"]
    f.create_dataset("ctrl", data=ctrl)


@pytest.mark.parametrize("edit, message", [
    (_group, "as a group, not an array"),
    (_huge, "more than this machine can hold"),
    (_bad_version, "corrupt format_version"),
    (_all_nan, "holds no usable trajectory"),
    (_narrow, "stores (nq, nv, nu)"),
    (_other_dt, "control_dt 0.01"),
    (_text, "stores ctrl as 1-d"),
    (_link_loop, "stores qpos as an HDF5 SoftLink"),
    (_external_link, "stores qpos as an HDF5 ExternalLink"),
    (_external_storage, "keeps the data of qpos in other files"),
    (_torque_from_elsewhere, "keeps the data of torque in other files"),
    (_torque_linked, "stores torque as an HDF5 ExternalLink"),
    (_deep_layout, "corrupt state_layout attribute"),
    (_fewer_controls, "inconsistent shapes"),
    (_huge_chunk, "stores qpos in chunks of 512 MiB, each decompressed whole"),
])
def test_malformed_datasets_are_refused_by_every_reader(hostile, tmp_path, capsys, edit, message):
    _, _, _, data = hostile
    bad = tmp_path / "bad.h5"
    _copy_with(data, bad, edit)
    out = tmp_path / "out"
    for argv in (["fit", "--data", str(bad), "--out", f"{out}/m.safetensors", "--max_steps", "2"],
                 ["evaluate-model", "--checkpoint", "checkpoints/anymal_c/flashnerd.safetensors", "--data", str(bad)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, (argv, err)
    assert not out.exists()


def test_a_shard_with_odd_attributes_or_arrays_is_a_one_line_error_when_resumed_or_merged(tmp_path):
    """A torchrun recording's shard is a file in the user's folder: an attribute stored as an array, arrays of
    another layout than the first shard's (or the file truncated) are refused in one line where --resume checks it
    and where the shards are merged."""
    from flashnerd.data.record import finished_recording, merge_recordings

    shard = tmp_path / "r.rank0.h5"
    record(get_robot("cartpole"), num_worlds=2, steps=8, traj_len=4, seed=3, out=shard, progress=False)
    expected = {"seed": 3, "num_worlds": 2, "steps": 8, "traj_len": 4}
    assert finished_recording(shard, expected)
    with h5py.File(shard, "a") as f:
        f.attrs["seed"] = np.array([3, 4])  # compared with an int it made numpy's "truth value is ambiguous"
        f.attrs["num_worlds"] = np.array([2, 2])
    with pytest.raises(ValueError, match=r"was made with other settings: seed=\[3, 4\] \(now 3\)"):
        finished_recording(shard, expected)
    with pytest.raises(ValueError, match=r"shard '.*r.rank0.h5' has a corrupt num_worlds attribute \(\[2, 2\]\)"):
        merge_recordings([shard], tmp_path / "r.h5", [3])
    assert shard.is_file() and not (tmp_path / "r.h5").exists()
    other = tmp_path / "r.rank1.h5"  # a second shard of another layout (one control more per step)
    record(get_robot("cartpole"), num_worlds=2, steps=8, traj_len=4, seed=4, out=other, progress=False)
    with h5py.File(shard, "a") as f:
        f.attrs["num_worlds"] = 2
    with h5py.File(other, "a") as f:
        ctrl = f["ctrl"][()]
        del f["ctrl"]
        f["ctrl"] = np.concatenate([ctrl, ctrl], axis=-1)
    with pytest.raises(ValueError, match="r.rank1.h5' does not hold arrays of the layout of '.*r.rank0.h5'"):
        merge_recordings([shard, other], tmp_path / "r.h5", [3, 4])
    assert shard.is_file() and other.is_file() and not (tmp_path / "r.h5").exists()
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(ValueError, match="is truncated or corrupt"):
        finished_recording(shard, expected)


def test_a_big_endian_dataset_reads_as_the_same_trajectories(hostile, tmp_path):
    """Arrays written on a big-endian machine (or by a tool that chose that order) are data like any other."""
    from flashnerd.data.dataset import load_dataset

    _, _, _, data = hostile

    def swap(f):
        for name in ("qpos", "qvel", "ctrl"):
            value = f[name][()]
            del f[name]
            f.create_dataset(name, data=value.astype(value.dtype.newbyteorder(">")))

    _copy_with(data, tmp_path / "big.h5", swap)
    big, native = load_dataset(tmp_path / "big.h5"), load_dataset(data)
    assert torch.equal(big.qpos, native.qpos) and torch.equal(big.ctrl, native.ctrl)


def test_a_fit_that_turns_non_finite_stops_and_keeps_the_last_good_checkpoint(hostile, tmp_path):
    import dataclasses

    from flashnerd.training.fit import FitConfig, FitDiverged, Fitter

    _, _, _, data = hostile
    cfg = dataclasses.replace(FitConfig(), max_steps=6, batch_size=8, ar_batch_size=4, window=8, eval_every=2)
    fitter = Fitter(data, cfg)
    step = fitter._train_step

    def poisoned(writer):  # from step 3 on, one weight is NaN (what an exploding update leaves)
        step(writer)
        if fitter.step >= 3:
            next(fitter.model.parameters()).data.fill_(float("nan"))

    fitter._train_step = poisoned
    out = tmp_path / "m.safetensors"
    with pytest.raises(FitDiverged, match="keeps step 2"):
        fitter.fit(out, progress=False)
    kept = read_checkpoint(out)
    assert kept["step"] == 2 and all(bool(torch.isfinite(v).all()) for v in kept["state_dict"].values())
    assert not list(tmp_path.glob("*.tmp"))


def test_a_non_finite_metric_is_never_shipped(tmp_path):
    from flashnerd.models.checkpoint import export_for_inference

    with pytest.raises(ValueError, match=r"nrmse\.100"):
        export_for_inference("checkpoints/cartpole/rwm.safetensors", tmp_path / "x.safetensors",
                             {"nrmse": {"1": 0.1, "100": float("nan")}})
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("marker", ["__tensor__", "__int_keys__"])
def test_a_mapping_keyed_like_the_formats_markers_is_refused_before_anything_is_written(tmp_path, capsys, marker):
    """A metric or a config that is a mapping of one key named like the format's tensor or int-key marker would read
    back as something else (or not at all): export and convert refuse it in one line and write nothing."""
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps({"nrmse": {"1": 0.1, "10": {marker: "nope"}}}))
    out = tmp_path / "out"
    assert main(["export-model", "--checkpoint", "checkpoints/cartpole/rwm.safetensors", "--out",
                 str(out / "x.safetensors"), "--metrics", str(metrics)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"is a mapping whose only key is '{marker}', which the checkpoint format reserves" in err
    assert len(err.splitlines()) == 1 and not [f for f in out.rglob("*") if f.is_file()]
    legacy = tmp_path / "old.pt"
    ckpt = read_checkpoint("checkpoints/cartpole/rwm.safetensors")
    torch.save({**ckpt, "format": "flashnerd-dynamics", "format_version": 1, "fit_config": {"note": {marker: "x"}}},
               legacy)
    assert main(["convert-checkpoint", str(legacy), "--out", str(out / "y.safetensors")]) == 2
    assert "fit_config/note' is a mapping whose only key" in capsys.readouterr().err
    assert not [f for f in out.rglob("*") if f.is_file()]


def test_a_model_whose_config_sizes_a_huge_per_world_state_is_refused_before_building_it(tmp_path, monkeypatch,
                                                                                         capsys):
    """A valid checkpoint whose attention span is 16,384 frames keeps 64 MiB of KV cache per world: the backend
    measures one world's state and refuses a world count that would not fit, in one line, before allocating it."""
    from flashnerd.dynamics import make_dynamics
    from flashnerd.utils import host_memory

    ckpt = read_checkpoint("checkpoints/cartpole/flashnerd.safetensors")
    ckpt["model_config"]["span"] = 16384
    ckpt["state_dict"] = {k: torch.zeros(*v.shape[:-1], 16385) if k.endswith("lag_bias") else v
                          for k, v in ckpt["state_dict"].items()}
    wide = tmp_path / "wide.safetensors"
    save_checkpoint(wide, ckpt)
    assert wide.stat().st_size < 5 * 2**20
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 2**30)
    with pytest.raises(ValueError, match=r"keeps 64\.0 MiB of state per world .* 64 worlds need 4\.0 GiB, more than "
                                         r"80% of the 1\.0 GiB free; use at most 12 worlds") as err:
        make_dynamics("flashnerd", get_robot("cartpole"), 64, checkpoint=str(wide))
    assert "\n" not in str(err.value)
    make_dynamics("flashnerd", get_robot("cartpole"), 12, checkpoint=str(wide)).close()  # what it says fits


@pytest.fixture(scope="module")
def fitted(hostile, tmp_path_factory):
    """A checkpoint of a fit in progress (optimizer, RNG, step and history) on the tiny dataset."""
    _, _, _, data = hostile
    out = tmp_path_factory.mktemp("fitted") / "m.safetensors"
    assert main(["fit", "--data", str(data), "--out", str(out), "--max_steps", "2", "--contact_head_steps", "0",
                 "--log_dir", str(out.parent / "tb")]) == 0
    return out


def _moment_of_another_shape(ckpt) -> None:
    state = ckpt["optimizer"]["state"]
    state[next(iter(state))]["exp_avg"] = torch.zeros(3, 3)


def _first_state(ckpt, value=None):
    """The first parameter's optimizer state, or set it to `value`."""
    state = ckpt["optimizer"]["state"]
    if value is not None:
        state[next(iter(state))] = value
    return state[next(iter(state))]


RESUME_CASES = {
    "exported": (lambda c: c.pop("optimizer"), "lacks optimizer, so it cannot be resumed"),
    "moment_shape": (_moment_of_another_shape, "optimizer exp_avg of shape (3, 3)"),
    "lr_text": (lambda c: c["optimizer"]["param_groups"][0].update(lr="fast"), "optimizer setting lr=fast"),
    # each of these passes torch's load_state_dict and failed at the first step
    "state_list": (lambda c: _first_state(c, []), "an optimizer state of type list"),
    "moment_0d": (lambda c: _first_state(c, {**_first_state(c), "exp_avg": torch.tensor(0.0)}),
                  "optimizer exp_avg of shape ()"),
    "capturable": (lambda c: c["optimizer"]["param_groups"][0].update(capturable=True),
                   "optimizer setting capturable=True"),
    "amsgrad_unkept": (lambda c: c["optimizer"]["param_groups"][0].update(amsgrad=True), "not Adam's"),
    "history_text": (lambda c: c.update(history="x"), "field 'history' is not a list"),
    "rng_floats": (lambda c: c.update(rng=torch.zeros(3)), "its step, train_seconds, rng or history"),
    "rng_of_a_gpu": (lambda c: c.update(rng=torch.zeros(16, dtype=torch.uint8)), "ran on another kind of device"),
    "rng_content": (lambda c: c.update(rng=torch.zeros_like(c["rng"])), "random-generator state is not one torch"),
    "normalizer_keys": (lambda c: c.update(input_normalizer={"foo": torch.zeros(3)}),
                        "weights or normalizers do not fit"),
    "fit_config_text": (lambda c: c.update(fit_config="x"), "field 'fit_config' is not a dict"),
    "data_list": (lambda c: c.update(data=[1]), "field 'data' is not a dict"),
    "init_number": (lambda c: c["fit_config"].update(init=7), "init '' (the stopped fit: 7)"),
    "other_seed": (lambda c: c["fit_config"].update(seed=3), "seed 0 (the stopped fit: 3)"),
}


@pytest.mark.parametrize("case", RESUME_CASES)
def test_a_fit_resumes_only_from_intact_training_state(fitted, hostile, case, tmp_path, capsys):
    """`fit --resume` on an exported checkpoint (no optimizer) or one whose training state was edited is a one-line
    error before any step, and the checkpoint is left as it was."""
    edit, message = RESUME_CASES[case]
    ckpt = read_checkpoint(fitted)
    edit(ckpt)
    out = tmp_path / "m.safetensors"
    save_checkpoint(out, ckpt)
    before = out.read_bytes()
    assert main(["fit", "--data", str(hostile[3]), "--out", str(out), "--resume", "--max_steps", "4",
                 "--contact_head_steps", "0", "--log_dir", str(tmp_path / "tb")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert out.read_bytes() == before


DEEP_JSON = "[" * 100_000 + "]" * 100_000  # nested past Python's recursion limit: json.loads raises RecursionError


def test_walks_over_json_from_files_take_any_depth():
    """The checks that walk a file's JSON use a stack, not recursion: 100,000 levels deep is no stack overflow."""
    from flashnerd.models.checkpoint import non_finite
    from flashnerd.utils.hints import nesting_depth

    deep: list = [float("nan")]
    for _ in range(100_000):
        deep = [deep]
    assert nesting_depth({"a": deep}) == 100_002
    assert non_finite({"a": deep, "b": [1.0, float("inf")]}) == ["a" + "[0]" * 100_001, "b[1]"]


def test_json_nested_too_deeply_is_a_one_line_error_wherever_it_is_read(hostile, tmp_path, capsys):
    """Metrics to ship, a stopped run's state, an interrupted recording's settings, a robot log's variant metadata
    and a dataset's contact-body names: JSON from a file, each refused in one line (or, for the labels, left out)."""
    from flashnerd.cli.common import CLIError, run_state
    from flashnerd.data.dataset import load_dataset
    from flashnerd.data.logs import log_frame, write_log

    def refused(argv: list[str], message: str) -> None:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err

    metrics, out = tmp_path / "metrics.json", tmp_path / "x.safetensors"
    # past the recursion limit; a list (it was shipped as the card's metrics); a card nested deeper than any
    # evaluate-model writes (just below the limit of json's reader it overflowed the stack of the walks after it)
    for text in (DEEP_JSON, "[1, 2]", '{"nrmse": {"1": ' + "[" * 20 + "]" * 20 + "}}"):
        metrics.write_text(text)
        refused(["export-model", "--checkpoint", "checkpoints/cartpole/rwm.safetensors", "--out", str(out),
                 "--metrics", str(metrics)], "is not the JSON of `flashnerd evaluate-model`")
    assert not out.exists()

    state = tmp_path / "state.json"
    state.write_text(DEEP_JSON)
    with pytest.raises(CLIError, match="is not readable JSON"):
        run_state(state, {}, True, {"rounds": []})
    state.write_text('{"settings": {}, "rounds": 5}')
    with pytest.raises(CLIError, match="holds rounds as a int, not the list this command writes"):
        run_state(state, {}, True, {"rounds": []})

    parts = tmp_path / "r.h5.parts"
    parts.mkdir()
    (parts / "settings.json").write_text(DEEP_JSON)
    refused(["record", "--robot", "cartpole", "--num_worlds", "2", "--steps", "4", "--traj_len", "4", "--out",
             str(tmp_path / "r.h5"), "--resume"], "has no readable settings.json")

    _, _, _, data = hostile
    clean = load_dataset(data)
    with h5py.File(data, "r") as f:
        frame = log_frame(get_robot("anymal_c"), f["qpos"][()], f["qvel"][()], f["ctrl"][()])
    write_log(tmp_path / "log.parquet", frame, variant=DEEP_JSON)
    refused(["import-logs", str(tmp_path / "log.parquet"), "--out", str(tmp_path / "logs.h5")],
            "has corrupt flashnerd.variant metadata")

    _copy_with(data, tmp_path / "deep.h5", lambda f: f.attrs.__setitem__("contact_bodies", DEEP_JSON))
    assert clean.touching is not None and load_dataset(tmp_path / "deep.h5").touching is None


# --- flags: used or refused ----------------------------------------------------------------------------------------

FLAG_CASES = [
    (["train", "--task", TASK, "--checkpoint", "{tmp}/junk.pt", "--num_envs", "2"], "add --resume"),
    (["train", "--task", TASK, "--load_run", "x", "--num_envs", "2"], "add --resume"),
    (["train", "--task", TASK, "--experiment_name", "../escape", "--num_envs", "2"], "--experiment_name must be"),
    (["train", "--task", TASK, "--run_name", "a/b", "--num_envs", "2"], "--run_name must be"),
    (["train", "--task", TASK, "--log_root", "/proc/nope", "--num_envs", "2"], "cannot be written"),
    (["train", "--task", TASK, "--dynamics", "mujoco", "--dynamics_checkpoint", "{tmp}/x.safetensors",
      "--num_envs", "2"], "--dynamics_checkpoint applies to"),
    (["play", "--task", TASK, "--video_length", "10"], "add --video"),
    (["play", "--task", TASK, "--video", "--steps", "5"], "with --video the rollout is --video_length"),
    (["record", "--out", "{tmp}/r.h5", "--action_noise", "0.3"], "add --task TASK"),
    (["record", "--out", "{tmp}/r.h5", "--log_root", "logs"], "add --task TASK"),
    (["record", "--out", "{tmp}/r.h5", "--steps", "3", "--traj_len", "5"], "shorter than one trajectory"),
    (["record", "--out", "/proc/nope/r.h5", "--steps", "4", "--traj_len", "4"], "cannot be written"),
    (["record", "--out", "{tmp}/junk.h5/r.h5", "--steps", "4", "--traj_len", "4"], "is not a folder"),
    (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors", "--max_rows", "4"], "--contacts rows only"),
    (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors", "--lr", "-1"], "--lr must be"),
    (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors", "--lr", "nan"], "--lr must be"),
    (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors", "--time_budget", "-5"], "--time_budget"),
    (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors", "--ar_weight", "-1"], "--ar_weight"),
    (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors", "--size", "huge"], "--size 'huge'"),
    (["fit", "--data", "{tmp}/junk.h5", "--out", "/proc/nope/m.safetensors"], "cannot be written"),
    (["plan", "--record_per_call", "3"], "add --record_rollouts"),
    (["plan", "--dynamics", "mujoco", "--dynamics_checkpoint", "flashnerd=x.safetensors"], "not among --dynamics"),
    (["bench", "ppo", "--task", TASK, "--dynamics", "mujoco", "--dynamics_checkpoint", "nerd=x.safetensors"],
     "not among --dynamics"),
    (["plan", "--dynamics", "mujoco", "--dynamics_checkpoint", "mujoco=x.safetensors"], "--dynamics_checkpoint needs"),
    (["plan", "--reward_weights", "height=nan"], "must be a finite number"),
    (["bench", "suite", "--checkpoint_dir", "{tmp}/junk.h5"], "is a file; give a folder"),
    (["bench", "ppo", "--task", TASK, "--out_dir", "{tmp}/junk.h5/runs"], "is not a folder"),
    (["evaluate-model", "--checkpoint", "checkpoints/anymal_c/flashnerd.safetensors", "--data", "{tmp}/junk.h5",
      "--horizons", "1,a"], "--horizons must be"),
    (["compare-video", "--task", TASK, "--out", "{tmp}/junk.h5/x.mp4"], "is not a folder"),
    (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors", "--log_dir", "{tmp}/junk.h5/tb"],
     "is not a folder"),
    (["record", "--out", "{tmp}", "--steps", "4", "--traj_len", "4"], "is a folder; give a file path"),
]


@pytest.mark.parametrize("argv, message", FLAG_CASES, ids=[" ".join(c[0][:2] + c[0][-2:]) for c in FLAG_CASES])
def test_a_flag_without_effect_or_a_bad_value_is_a_one_line_error(argv, message, tmp_path, capsys):
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    before = set(tmp_path.rglob("*"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main([*argv, *(["--log_root", str(tmp_path)] if argv[0] in ("train", "play") and "--log_root" not in argv
                          else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert set(tmp_path.rglob("*")) == before


# --- memory: a run that cannot fit is refused before it starts, with the estimate -----------------------------------


def test_world_axis_bytes_counts_each_world_tensor_once():
    from flashnerd.envs.memory import world_axis_bytes

    class Holder:
        def __init__(self, n):
            self.state = torch.zeros(n, 3)  # 12 bytes a world
            self.view = self.state[:, :2]  # the same storage: not counted again
            self.table = {"per_world": torch.zeros(n, dtype=torch.float64)}  # 8 bytes a world
            self.constant = torch.zeros(5)  # no world axis

    assert world_axis_bytes(Holder(7), 7) == 7 * (12 + 8)


@pytest.mark.parametrize("members", [1, 3])
def test_world_axis_bytes_counts_model_caches_on_their_world_axis(members):
    """FlashNeRD's ring buffers (L, S+1, B, H, D), an ensemble's with its members in front, and the frame counts."""
    from flashnerd.envs.memory import world_axis_bytes
    from flashnerd.models import Ensemble, FlashNeRD, FlashNeRDConfig

    cfg = FlashNeRDConfig(10, 6, n_layer=2, n_head=2, n_embd=16, span=3)
    model = FlashNeRD(cfg) if members == 1 else Ensemble([FlashNeRD(cfg) for _ in range(members)])

    class Holder:
        def __init__(self, n):
            self.cache = model.init_cache(n)

    per_world = members * 2 * cfg.n_layer * (cfg.span + 1) * cfg.n_embd * 4 + 8  # keys and values, float32; count
    assert world_axis_bytes(Holder(8), 8) == 8 * per_world


def test_env_bytes_scale_with_the_world_count():
    """What the probe measures is per world: an env of 32 worlds holds 4x the world-axis bytes of one of 8."""
    import dataclasses

    import gymnasium as gym

    from flashnerd.envs.memory import world_axis_bytes
    from flashnerd.envs.registry import task_cfgs

    env_cfg, _ = task_cfgs(TASK, num_envs=8)
    sizes = []
    for n in (8, 32):
        env = gym.make(TASK, cfg=dataclasses.replace(env_cfg, num_envs=n)).unwrapped
        env.step(torch.zeros(n, env.num_actions))
        sizes.append(world_axis_bytes(env, n))
        env.close()
    assert sizes[0] > 0 and sizes[1] == 4 * sizes[0], sizes


@pytest.mark.parametrize("argv", [
    ["train", "--task", TASK, "--num_envs", str(10**9)],
    ["train", "--task", TASK, "--num_envs", str(10**9), "--dynamics", "flashnerd"],
    ["record", "--num_worlds", str(10**9), "--out", "{tmp}/r.h5"],
    ["bench", "ppo", "--task", TASK, "--dynamics", "mujoco", "--num_envs", str(10**9), "--out_dir", "{tmp}/bench"],
])
def test_a_run_that_cannot_fit_is_refused_with_its_estimate(argv, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main([*argv, *(["--log_root", str(tmp_path)] if argv[0] == "train" else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs about" in err and "available" in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.iterdir())


def test_a_failed_allocation_is_one_line_and_other_runtime_errors_are_not_hidden(monkeypatch, capsys):
    """torch reports a failed CPU allocation as a RuntimeError (a size a file declared, a world count too large):
    the CLI says so in one line with the world count to lower; any other RuntimeError is a bug and keeps its
    traceback."""
    import flashnerd.cli.eval as eval_cli

    monkeypatch.setattr(eval_cli, "run", lambda args: torch.empty(10**14))  # 400 TB
    assert main(["eval", "--task", TASK, "--num_envs", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "out of memory" in err and "can't allocate memory" in err, err
    assert "with 3 worlds; lower --num_envs" in err

    def broken(args):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(eval_cli, "run", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        main(["eval", "--task", TASK])
