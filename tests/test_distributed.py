"""The long jobs under torchrun with two CPU processes (gloo): fit, record and train."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch
from conftest import TASK, stopping_source

from flashnerd.data.dataset import load_dataset
from flashnerd.data.record import record
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.robots import get_robot
from flashnerd.training.fit import FitConfig, Fitter

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread per process: two processes on two cores


def torchrun(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "flashnerd.cli.main", *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ddp") / "tiny.h5"
    record(get_robot("anymal_c"), num_worlds=6, steps=40, out=path, traj_len=20, seed=1, progress=False)
    return path


def test_two_process_fit_matches_one_process_with_the_same_global_batch(tiny_data, tmp_path):
    """Each rank computes its half of the same global batch; averaged gradients equal the single-process ones, so
    the weights after 6 steps agree to float32 round-off (stated tolerance 1e-5) and so do the validation losses."""
    proc = torchrun(["fit", "--data", str(tiny_data), "--out", "two.safetensors", "--max_steps", "6",
                     "--batch_size", "8", "--log_dir", "tb"], cwd=tmp_path)
    result = json.loads(proc.stdout.strip().splitlines()[-1])  # printed once, by rank 0
    assert len(proc.stdout.strip().splitlines()) == 1 and result["world_size"] == 2 and result["steps"] == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tb", "two.safetensors"]  # one checkpoint, no temp files
    assert len(list((tmp_path / "tb").iterdir())) == 1  # one TensorBoard file

    cfg = dataclasses.replace(FitConfig(), max_steps=6, batch_size=8)
    single = Fitter(tiny_data, cfg)
    single.fit(tmp_path / "one.safetensors", progress=False)
    one, two = (read_checkpoint(tmp_path / f) for f in ("one.safetensors", "two.safetensors"))
    worst = max((one["state_dict"][k] - two["state_dict"][k]).abs().max().item() for k in one["state_dict"])
    assert worst < 1e-5, worst
    for a, b in zip(one["history"], two["history"]):
        assert a["step"] == b["step"] and a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5)
    assert (two["step"], one["step"]) == (6, 6)
    # A checkpoint written under torchrun resumes in one process (any world size) and ends at the requested step.
    resumed = Fitter(tiny_data, dataclasses.replace(cfg, max_steps=8))
    resumed.resume(tmp_path / "two.safetensors")
    assert resumed.fit(tmp_path / "two.safetensors", progress=False)["steps"] == 8


def test_two_rank_record_merges_shards_with_distinct_seeds(tmp_path):
    proc = torchrun(["record", "--num_worlds", "5", "--steps", "30", "--traj_len", "10", "--seed", "3",
                     "--out", "merged.h5"], cwd=tmp_path)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["shards"] == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["merged.h5"]
    data = load_dataset(tmp_path / "merged.h5", get_robot("anymal_c"))
    with h5py.File(tmp_path / "merged.h5") as f:
        seeds, worlds = list(f.attrs["shard_seeds"]), int(f.attrs["num_worlds"])
    assert worlds == 5 and len(set(seeds)) == 2
    # 3 worlds x 3 trajectories + 2 worlds x 3 trajectories, minus any dropped
    assert data.num_trajectories == result["trajectories"] == 15 - result["dropped"]
    # the two shards are different data (different seeds), not one shard twice
    assert not torch.equal(data.ctrl[0], data.ctrl[9])


def test_two_rank_record_resumes_where_one_shard_finished_and_the_other_stopped(tmp_path):
    """A stop that left rank 0's shard complete and rank 1's first batch in its .parts folder: --resume keeps the
    one, finishes the other and merges what an uninterrupted run writes (it used to fail on the finished rank)."""
    from flashnerd.data.record import partial_path

    args = ["record", "--num_worlds", "5", "--steps", "30", "--traj_len", "10", "--seed", "3"]
    torchrun([*args, "--out", "whole.h5"], cwd=tmp_path)
    robot, kw = get_robot("anymal_c"), dict(steps=30, traj_len=10, progress=False)
    record(robot, num_worlds=3, out=tmp_path / "stopped.rank0.h5", seed=3, **kw)  # rank 0: 3 worlds, seed 3
    with pytest.raises(KeyboardInterrupt):  # rank 1: 2 worlds, its own seed
        record(robot, num_worlds=2, out=tmp_path / "stopped.rank1.h5", seed=3 + 100_003,
               source=stopping_source(robot, 2, at_batch=2), **kw)
    assert len(list(partial_path(tmp_path / "stopped.rank1.h5").glob("chunk_*.h5"))) == 1
    torchrun([*args, "--out", "stopped.h5", "--resume"], cwd=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stopped.h5", "whole.h5"]
    a, b = (load_dataset(tmp_path / f, robot) for f in ("whole.h5", "stopped.h5"))
    assert torch.allclose(a.qpos, b.qpos, atol=1e-4) and torch.equal(a.ctrl, b.ctrl)


def test_two_rank_train_writes_one_set_of_logs(tmp_path):
    proc = torchrun(["train", "--task", TASK, "--num_envs", "8", "--max_iterations", "2", "--seed", "1",
                     "--log_root", str(tmp_path), "--run_name", "ddp", "--eval_episodes", "2"], cwd=tmp_path)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["processes"] == 2 and set(summary["eval"]) == {"mujoco"}
    runs = list((tmp_path / "anymal_c_flat").iterdir())
    assert len(runs) == 1, runs  # rank 1 made no folder
    assert len(list(runs[0].glob("events.out.tfevents*"))) == 1 and (runs[0] / "model_1.pt").is_file()
    assert torch.load(runs[0] / "model_1.pt", weights_only=True)["iter"] == 1


def test_two_rank_train_stops_together_at_max_seconds(tmp_path):
    # rank 0's clock decides for both ranks (a rank that stopped alone would leave the other in a collective)
    proc = torchrun(["train", "--task", TASK, "--num_envs", "8", "--max_iterations", "3", "--max_seconds", "1e-6",
                     "--seed", "1", "--log_root", str(tmp_path), "--eval_episodes", "0"], cwd=tmp_path, timeout=300)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["iterations"] == 1 and summary["stopped_by"] == "max_seconds"
    (run,) = (tmp_path / "anymal_c_flat").iterdir()
    assert sorted(p.name for p in run.glob("model_*.pt")) == ["model_0.pt"]
