"""Record -> dataset -> fit -> checkpoint -> learned backend, on tiny data; bad files give one-line errors."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest
import torch
from conftest import stopping_source
from safetensors.torch import save_file

from flashnerd.cli.main import main
from flashnerd.data.dataset import load_dataset
from flashnerd.data.record import fall_ending, partial_path, record
from flashnerd.dynamics import make_dynamics
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.robots import RobotSpec
from flashnerd.training.fit import FitConfig, Fitter


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, ):
    from flashnerd.robots import get_robot

    root = tmp_path_factory.mktemp("tiny")
    path = root / "tiny.h5"
    info = record(get_robot("anymal_c"), num_worlds=6, steps=40, out=path, traj_len=20, seed=1,
                  progress=False)
    return root, path, info


@pytest.fixture(scope="module")
def tiny_ckpt(tiny):
    root, path, _ = tiny
    out = root / "flashnerd.safetensors"
    cfg = dataclasses.replace(FitConfig(), max_steps=4, batch_size=8, ar_batch_size=4, window=8, eval_every=2)
    Fitter(path, cfg).fit(out, progress=False)
    return out


def test_a_stop_of_the_process_does_not_spend_the_fit_budget(tiny, tmp_path):
    """A step that a stop falls into (here: 1.5 s asleep, then the SIGCONT that ends a real stop, sent to itself)
    counts as long as the step before it in the seconds the budget reads; without the signal the same sleep is a slow
    step and counts in full. The fourth and fifth steps are compared: the first ones warm up."""
    _, path, _ = tiny
    cfg = dataclasses.replace(FitConfig(), max_steps=5, time_budget_s=10**6, batch_size=8, ar_batch_size=4,
                              window=8, eval_every=10**6, contact_head_steps=0)
    for stopped in (True, False):
        fitter = Fitter(path, cfg)
        step_fn, counted = fitter._step_fn, []  # train_seconds as each step starts

        def slow_fifth_call(fitter=fitter, step_fn=step_fn, counted=counted, stopped=stopped):
            counted.append(fitter.train_seconds)
            if len(counted) == 5:
                time.sleep(1.5)
                if stopped:
                    os.kill(os.getpid(), signal.SIGCONT)
            return step_fn()

        fitter._step_fn = slow_fifth_call
        fitter.fit(tmp_path / f"m_{stopped}.safetensors", progress=False)
        fourth, fifth = counted[4] - counted[3], fitter.train_seconds - counted[4]  # seconds counted for each step
        if stopped:
            assert fifth <= fourth + 1e-9, (fourth, fifth)  # the two sums of the same float
        else:
            assert fifth > 1.5 and fifth > fourth, (fourth, fifth)


def test_record_round_trip_replays_in_the_simulator(anymal, tiny):
    _, path, info = tiny
    assert info["trajectories"] == 12 and info["transitions"] == 240 and info["dropped"] == 0
    data = load_dataset(path, anymal)
    assert data.qpos.shape == (12, 21, 19) and data.ctrl.shape == (12, 20, 12)
    assert data.attrs["robot"] == "anymal_c" and data.attrs["model_hash"] == anymal.model_hash()
    assert data.attrs["state_layout"]["joint_pos"] == [10, 22]
    # Replaying the stored controls from the stored first state reproduces the stored trajectory.
    dyn = make_dynamics("mujoco", anymal, 12)
    dyn.reset(torch.arange(12), data.qpos[:, 0], data.qvel[:, 0])
    for t in range(20):
        dyn.step(data.ctrl[:, t])
    err = (dyn.state().qpos - data.qpos[:, 20]).abs().max().item()
    assert err < 2e-3, err
    dyn.close()


def test_fall_ending_trajectories_join_two_batches_at_the_right_steps():
    """The trajectory that ends in a fall holds the T steps into the state the world fell into (stored after the
    resetting step), across the batch boundary: arrays hold their global step index, so every kept entry is known in
    closed form."""
    import numpy as np

    t, n = 5, 7
    states = np.arange(t + 1, dtype=np.float32)[None, :, None].repeat(n, 0)  # (N, T+1, 1) global state index
    steps = np.arange(t, dtype=np.float32)[None, :, None, None].repeat(n, 0)  # (N, T, 1, 1) a 4-d step array
    prev, now = {"qpos": states, "ctrl": steps}, {"qpos": states + t, "ctrl": steps + t}
    prev_resets, resets = np.zeros((n, t), bool), np.zeros((n, t), bool)
    resets[0, 2] = True  # falls at step 2 into state 8: states 3..8, steps 3..7
    resets[1, 0] = True  # falls at once: states 1..6
    resets[2, 3], prev_resets[2, 3] = True, True  # reset in the previous batch at step 3: state 4 follows it
    resets[3, 3], prev_resets[3, 2] = True, True  # reset before step 3 there: states 4..9
    resets[4, 1], resets[4, 3] = True, True  # two falls: the first one counts, states 2..7
    resets[5, 4], prev_resets[5, 1] = True, True  # falls at the last step: this batch's own states 5..10
    # world 6 never falls
    out, worlds, overlap = fall_ending(prev, prev_resets, now, resets)
    assert worlds.tolist() == [0, 1, 3, 4, 5] and overlap.tolist() == [True, True, True, True, False]
    start = np.array([3, 1, 4, 2, 5])[:, None]
    assert np.array_equal(out["qpos"][..., 0], start + np.arange(t + 1))
    assert np.array_equal(out["ctrl"][..., 0, 0], start + np.arange(t))
    none, kept, _ = fall_ending(prev, prev_resets, now, np.zeros((n, t), bool))
    assert len(kept) == 0 and none["qpos"].shape == (0, t + 1, 1) and none["ctrl"].shape == (0, t, 1, 1)


def test_truncated_foreign_and_missing_datasets_are_refused(anymal, tiny, tmp_path):
    _, path, _ = tiny
    cut = tmp_path / "cut.h5"
    raw = path.read_bytes()
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        load_dataset(cut, anymal)
    other = tmp_path / "other.h5"
    shutil.copy(path, other)
    with h5py.File(other, "a") as f:
        f.attrs["robot"] = "franka"
    with pytest.raises(ValueError, match="recorded for robot 'franka', not 'anymal_c'"):
        load_dataset(other, anymal)
    with h5py.File(other, "a") as f:
        f.attrs["robot"] = "anymal_c"
        f.attrs["model_hash"] = "0000"
    with pytest.raises(ValueError, match="another version of the 'anymal_c' model"):
        load_dataset(other, anymal)
    with h5py.File(other, "a") as f:
        f.attrs["model_hash"] = anymal.model_hash()
        f.attrs["format_version"] = 99
    with pytest.raises(ValueError, match="format version 99, newer than this flashnerd reads"):
        load_dataset(other, anymal)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset(tmp_path / "nope.h5", anymal)
    assert not list(tmp_path.glob("*.tmp"))


def test_checkpoint_carries_config_normalizers_and_hash(tiny_ckpt, anymal):
    ckpt = read_checkpoint(tiny_ckpt)
    assert ckpt["kind"] == "flashnerd" and ckpt["robot"] == "anymal_c" and ckpt["model_hash"] == anymal.model_hash()
    assert set(ckpt["input_normalizer"]) == {"mean", "std"} and ckpt["step"] == 4
    assert ckpt["model_config"]["input_dim"] == ckpt["representation"]["layout"]["contact"][1]


def test_learned_backend_reset_leaves_other_worlds_unchanged(anymal, tiny_ckpt):
    def run(reset_world: bool) -> torch.Tensor:
        dyn = make_dynamics("flashnerd", anymal, 5, checkpoint=tiny_ckpt)
        ctrl = torch.tensor(anymal.default_joint_pos).repeat(5, 1)
        for t in range(12):
            if reset_world and t == 6:
                dyn.reset(torch.tensor([3]), dyn.state().qpos[3:4].clone(), torch.zeros(1, 18))
            dyn.step(ctrl)
        return dyn.state().qpos.clone()

    a, b = run(False), run(True)
    keep = [0, 1, 2, 4]
    assert torch.equal(a[keep], b[keep])
    assert not torch.equal(a[3], b[3])


def test_mismatched_checkpoints_are_clear_errors(anymal, tiny_ckpt, tmp_path):
    with pytest.raises(ValueError, match="holds a 'flashnerd' model; the 'nerd' backend"):
        make_dynamics("nerd", anymal, 2, checkpoint=tiny_ckpt)
    other = dataclasses.replace(anymal, name="anymal_b")
    with pytest.raises(ValueError, match="is for robot 'anymal_c', not 'anymal_b'"):
        make_dynamics("flashnerd", other, 2, checkpoint=tiny_ckpt)
    junk = tmp_path / "junk.safetensors"
    save_file({"weights": torch.ones(1)}, junk)  # a valid safetensors file that is not ours
    with pytest.raises(ValueError, match="is not a FlashNeRD dynamics checkpoint"):
        make_dynamics("flashnerd", anymal, 2, checkpoint=junk)
    assert isinstance(other, RobotSpec)


def test_fit_resume_continues_the_step_count(tiny, tiny_ckpt, tmp_path):
    _, path, _ = tiny
    out = tmp_path / "resumed.safetensors"
    shutil.copy(tiny_ckpt, out)
    cfg = dataclasses.replace(FitConfig(), max_steps=6, batch_size=8, ar_batch_size=4, window=8, eval_every=2)
    fitter = Fitter(path, cfg)
    fitter.resume(out)
    assert fitter.step == 4
    result = fitter.fit(out, progress=False)
    assert result["steps"] == 6 and read_checkpoint(out)["step"] == 6


def test_fit_init_starts_from_a_checkpoint_on_other_data(tiny, tiny_ckpt, tmp_path, capsys):
    """--init: the checkpoint's weights and normalizers, the new data re-expressed in them, a fresh step count."""
    from flashnerd.robots import get_robot

    other = tmp_path / "other.h5"
    record(get_robot("anymal_c"), num_worlds=6, steps=40, out=other, traj_len=20, seed=2, progress=False)
    cfg = dataclasses.replace(FitConfig(), max_steps=2, batch_size=8, ar_batch_size=4, window=8, eval_every=2)
    fitter = Fitter(other, cfg)
    raw_x = fitter.x_norm.denormalize(fitter.xn_tr)  # the new data in physical units
    raw_y = fitter.y_norm.denormalize(fitter.yn_va)
    fitter.init_from(tiny_ckpt)
    ckpt = read_checkpoint(tiny_ckpt)
    assert torch.equal(fitter.x_norm.mean, ckpt["input_normalizer"]["mean"])
    assert not torch.equal(fitter.x_norm.mean, Fitter(other, cfg).x_norm.mean)  # the data's own statistics differ
    assert torch.allclose(fitter.x_norm.denormalize(fitter.xn_tr), raw_x, atol=1e-4)
    assert torch.allclose(fitter.y_norm.denormalize(fitter.yn_va), raw_y, atol=1e-4)
    assert all(torch.equal(a, ckpt["state_dict"][k]) for k, a in fitter.model.state_dict().items())
    assert fitter.step == 0 and fitter.fit(tmp_path / "init.safetensors", progress=False)["steps"] == 2


def test_fit_resume_continues_an_adaptation_and_refuses_other_settings_or_data(tiny, tiny_ckpt, tmp_path, capsys):
    """--resume compares every setting and the data with the stopped fit's; only how long it runs may change. A fit
    started with --init resumes with it (its learning rate and patience are --init's)."""
    _, path, _ = tiny
    out = tmp_path / "adapted.safetensors"
    argv = ["fit", "--data", str(path), "--out", str(out), "--init", str(tiny_ckpt), "--batch_size", "8",
            "--ar_batch_size", "4", "--contact_head_steps", "0"]
    assert main([*argv, "--max_steps", "2"]) == 0
    capsys.readouterr()
    copy = tmp_path / "copy.h5"
    shutil.copy(path, copy)
    for change, named in ((["--seed", "1"], "seed 1 (the stopped fit: 0)"), (["--lr", "0.001"], "lr 0.001"),
                          (["--data", str(copy)], "data"), (["--batch_size", "16"], "batch_size 16")):
        assert main([*argv, "--max_steps", "4", "--resume", *change]) == 2
        err = capsys.readouterr().err.strip()
        assert named in err and "give the same ones" in err and len(err.splitlines()) == 1, err
    without_init = [a for a in argv if a not in ("--init", str(tiny_ckpt))]
    assert main([*without_init, "--max_steps", "4", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "init ''" in err and "lr 0.001 (the stopped fit: 0.0003)" in err and "patience 0" in err
    assert main([*argv, "--max_steps", "4", "--resume"]) == 0  # the same settings, two more steps
    assert read_checkpoint(out)["step"] == 4
    # an adaptation written by improve or reality-gap (no --mix_data) resumes with fit's own defaults
    from flashnerd.cli.fit import adapt_model

    refit = tmp_path / "refit.safetensors"
    fitter, _ = adapt_model(path, tiny_ckpt, refit, time_budget_s=0.2, seed=0, device="cpu", contact_head_steps=0)
    steps = str(read_checkpoint(refit)["step"] + 2)
    assert main(["fit", "--data", str(path), "--out", str(refit), "--init", str(tiny_ckpt), "--resume",
                 "--max_steps", steps, "--contact_head_steps", "0"]) == 0, capsys.readouterr().err


def test_evaluate_model_and_bench_model_cli(tiny, tiny_ckpt, capsys):
    _, path, _ = tiny
    assert main(["evaluate-model", "--checkpoint", str(tiny_ckpt), "--data", str(path), "--horizons", "1,15"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(res["nrmse"]) == {"1", "15"} and res["rollouts"] == 12
    assert res["nrmse"]["1"] < res["nrmse"]["15"] * 10
    assert main(["bench", "model", "--batch", "4", "--min_seconds", "0.05"]) == 0
    bench = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(bench["steps_per_s"]) == {"flashnerd", "nerd"} and "4" in bench["ratio"] and bench["machine"]
    roof = bench["roofline"]["flashnerd"]["4"]
    assert roof["fraction"] == pytest.approx(roof["achieved_gflops"] / roof["matmul_gflops"], rel=0.05)
    assert roof["achieved_gflops"] == pytest.approx(roof["flops_per_step"] * bench["steps_per_s"]["flashnerd"]["4"]
                                                    / 1e9, rel=0.05, abs=0.01)


def test_roofline_counts_the_streaming_step_flops_in_closed_form():
    """FlashNeRD's step: embed, per block the packed in-projection, q.k over the S+1 ring slots (the current frame
    among them), weights over their S+1 values, the out-projection; the readout and the skip path. 2 FLOPs per
    multiply-add."""
    from flashnerd.models.flashnerd import FLASHNERD_SIZES
    from flashnerd.training.benchmark import model_roofline

    i, o = 60, 40
    c = FLASHNERD_SIZES["cpu"]
    C, S, L, R, F = c["n_embd"], c["span"], c["n_layer"], c["readout_hidden"], int(c["ff_mult"] * c["n_embd"])
    per_block = C * (3 * C + 2 * F) + 2 * (S + 1) * C + (C + F) * C  # q.K, w.V: H heads x (S+1) slots x D each
    expected = 2 * (i * C + L * per_block + 2 * C * R + R * o + i * o)
    roof = model_roofline("flashnerd", i, o, 8, steps_per_s=1000.0, min_seconds=0.01)
    assert roof["flops_per_step"] == expected
    assert roof["achieved_gflops"] == pytest.approx(expected * 1000.0 / 1e9, abs=0.01) and roof["matmul_gflops"] > 0


@pytest.mark.slow
def test_fitting_lowers_validation_loss_tenfold(tmp_path):
    from flashnerd.robots import get_robot

    path = tmp_path / "small.h5"
    record(get_robot("anymal_c"), num_worlds=64, steps=400, out=path, traj_len=100, seed=3,
           progress=False)
    cfg = dataclasses.replace(FitConfig(), max_steps=1500, ar_weight=0.0, eval_every=250)
    result = Fitter(path, cfg).fit(tmp_path / "f.safetensors", progress=False)
    assert result["val_loss_final"] < result["val_loss_initial"] / 10


def test_train_on_the_learned_model_then_evaluate_in_mujoco(tiny_ckpt, tmp_path, capsys):
    argv = ["train", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--dynamics", "flashnerd",
            "--dynamics_checkpoint", str(tiny_ckpt), "--num_envs", "4", "--max_iterations", "2",
            "--eval_episodes", "2", "--log_root", str(tmp_path)]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["dynamics"] == "flashnerd"
    assert set(summary["eval"]) == {"flashnerd", "mujoco"}
    for metrics in summary["eval"].values():
        assert metrics["fall_rate"] >= 0.0 and metrics["lin_vel_rms"] >= 0.0


def test_bench_ppo_writes_json_and_plot(tiny_ckpt, tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "ppo", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--dynamics", "mujoco,flashnerd",
            "--dynamics_checkpoint", f"flashnerd={tiny_ckpt}", "--num_envs", "4", "--max_iterations", "2",
            "--eval_episodes", "2", "--out_dir", str(out)]
    assert main(argv) == 0
    data = json.loads((out / "bench_ppo.json").read_text())
    assert set(data["backends"]) == {"mujoco", "flashnerd"}
    assert data["backends"]["flashnerd"]["dynamics_checkpoint"] == str(Path(tiny_ckpt).resolve())
    assert "dynamics_checkpoint" not in data["backends"]["mujoco"]
    for r in data["backends"].values():
        assert r["seconds_per_iteration"] > 0 and len(r["curve"]) == 2 and "mean_return" in r["eval_mujoco"]
        halves = r["collect_seconds_per_iteration"] + r["learn_seconds_per_iteration"]
        assert r["collect_seconds_per_iteration"] > 0 and halves == pytest.approx(r["seconds_per_iteration"])
    assert (out / "bench_ppo.png").stat().st_size > 10_000


def test_bench_ppo_seeds_mujoco_curve_time_to_target_and_resume(tiny_ckpt, tmp_path, capsys):
    """Two seeds per backend, every saved policy evaluated in MuJoCo; the time to target is read off those curves;
    --resume trains only the runs the JSON lacks, and refuses a file of other settings."""
    out = tmp_path / "bench"
    argv = ["bench", "ppo", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--dynamics", "mujoco,flashnerd",
            "--dynamics_checkpoint", f"flashnerd={tiny_ckpt}", "--num_envs", "4", "--max_iterations", "2",
            "--eval_episodes", "2", "--out_dir", str(out), "--seeds", "3,4", "--eval_every", "1",
            "--target_fraction", "0.5"]
    assert main(argv) == 0
    path = out / "bench_ppo.json"
    data = json.loads(path.read_text())
    runs = data["backends"]
    assert set(runs) == {"mujoco/seed3", "mujoco/seed4", "flashnerd/seed3", "flashnerd/seed4"}
    assert runs["mujoco/seed3"]["curve"][0][1] != runs["mujoco/seed4"]["curve"][0][1]  # the seeds differ
    for key, r in runs.items():
        assert key == f"{r['backend']}/seed{r['seed']}"
        # model_0 after the first iteration, then the final policy: at the curve's accumulated times
        assert [t for t, _ in r["mujoco_curve"]] == [r["curve"][0][0], r["curve"][1][0]]
        assert r["mujoco_curve"][-1][1] == r["eval_mujoco"]["mean_return"]
    tt = data["time_to_target"]
    reference = sum(runs[k]["eval_mujoco"]["mean_return"] for k in ("mujoco/seed3", "mujoco/seed4")) / 2
    assert tt["reference_return"] == pytest.approx(reference)
    if reference > 0:
        assert tt["target_return"] == pytest.approx(0.5 * reference)
        for key, r in runs.items():
            reached = [t for t, ret in r["mujoco_curve"] if ret >= tt["target_return"]]
            assert tt["seconds"][key] == (reached[0] if reached else None)
    else:  # no gain to take a fraction of
        assert tt["target_return"] is None and set(tt["seconds"].values()) == {None}

    del runs["flashnerd/seed4"]
    path.write_text(json.dumps(data))
    assert main(argv + ["--resume"]) == 0
    resumed = json.loads(path.read_text())["backends"]
    assert set(resumed) == {"mujoco/seed3", "mujoco/seed4", "flashnerd/seed3", "flashnerd/seed4"}
    for key in ("mujoco/seed3", "mujoco/seed4", "flashnerd/seed3"):  # kept as they were, not trained again
        assert resumed[key]["curve"] == runs[key]["curve"]
    capsys.readouterr()
    assert main([*argv, "--max_iterations", "3", "--resume"]) == 2
    assert "other iterations" in capsys.readouterr().err
    assert main([*argv, "--seeds", "3", "--resume"]) == 2  # the file holds seed-4 runs this grid does not make
    assert "holds run 'mujoco/seed4'" in capsys.readouterr().err
    broken = json.loads(path.read_text())
    del broken["backends"]["flashnerd/seed3"]["curve"]
    path.write_text(json.dumps(broken))
    assert main([*argv, "--resume"]) == 2  # a run without its curve: one line, nothing trained
    err = capsys.readouterr().err
    assert "run 'flashnerd/seed3'" in err and "lacks curve" in err and len(err.strip().splitlines()) == 1
    for field, value in (("eval_mujoco", 5), ("mujoco_curve", [[0.0, "high"]]), ("total_seconds", None)):
        wrong = json.loads(json.dumps(data))
        wrong["backends"]["mujoco/seed3"][field] = value
        path.write_text(json.dumps(wrong))
        assert main([*argv, "--resume"]) == 2  # a kept run of the wrong shape: one line before any training
        err = capsys.readouterr().err
        assert f"holds a {field} that is not what bench ppo writes" in err and len(err.strip().splitlines()) == 1


def test_bench_ppo_run_stopped_midway_resumes_from_its_last_policy_with_its_curve(tmp_path, capsys, monkeypatch):
    """A PPO run stopped after its iteration-1 checkpoint (the JSON never got it): --resume trains iterations 2 and 3
    only, and the run's record holds the whole curve on one clock (the first two points those of the stopped run, as
    its checkpoint saved them), every saved policy evaluated, and the halves of all four iterations."""
    out = tmp_path / "bench"
    argv = ["bench", "ppo", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--dynamics", "mujoco", "--num_envs", "4",
            "--max_iterations", "4", "--eval_episodes", "2", "--out_dir", str(out), "--eval_every", "1"]
    assert main(argv) == 0
    whole = json.loads((out / "bench_ppo.json").read_text())["backends"]["mujoco"]
    run_dir = out / "bench_ppo" / "mujoco"  # <out_dir>/<name>/<run>
    saved = torch.load(run_dir / "model_1.pt", weights_only=True)["infos"]
    assert str(saved["curve"]) == str(whole["curve"][:2])  # str: a return is NaN before an episode ends
    assert saved["collect_seconds"] > 0 and saved["learn_seconds"] > 0
    (out / "bench_ppo.json").unlink()
    for it in (2, 3):  # stopped before these were saved
        (run_dir / f"model_{it}.pt").unlink()
    import flashnerd.envs.rsl_rl as rsl_rl_module

    monkeypatch.setattr(rsl_rl_module, "describe_machine", lambda device: "Another CPU")  # resumed elsewhere
    assert main(argv + ["--resume"]) == 0
    monkeypatch.undo()
    resumed = json.loads((out / "bench_ppo.json").read_text())["backends"]["mujoco"]
    assert resumed["resumed_at"] == 2 and resumed["iterations"] == 4 and "resumed_at" not in whole
    assert "machines" not in whole and resumed["machine"] == f"{whole['machine']} and Another CPU"
    assert resumed["machines"] == [{"from_iteration": 0, "machine": whole["machine"]},
                                   {"from_iteration": 2, "machine": "Another CPU"}]
    assert str(resumed["curve"][:2]) == str(saved["curve"])
    seconds = [t for t, _ in resumed["curve"]]
    assert len(seconds) == 4 and seconds == sorted(seconds) and seconds[2] > seconds[1]
    assert [t for t, _ in resumed["mujoco_curve"]] == seconds
    assert torch.load(run_dir / "model_3.pt", weights_only=True)["infos"]["train_seconds"] == pytest.approx(
        seconds[-1], abs=1e-3)
    halves = 4 * (resumed["collect_seconds_per_iteration"] + resumed["learn_seconds_per_iteration"])
    assert halves == pytest.approx(seconds[-1], rel=1e-6)
    # a stopped run whose last policy has no curve (an older flashnerd's) is a one-line error before any training,
    # not a curve with a gap; so is one saved past this run's iterations (another run's folder)
    (out / "bench_ppo.json").unlink()
    ckpt = torch.load(run_dir / "model_1.pt", weights_only=True)
    del ckpt["infos"]["curve"]
    (run_dir / "model_3.pt").unlink()
    torch.save(ckpt, run_dir / "model_2.pt")
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 2
    err = capsys.readouterr().err
    assert "is no policy this run stopped at" in err and len(err.strip().splitlines()) == 1
    assert not (run_dir / "model_3.pt").exists() and not (out / "bench_ppo.json").exists()  # nothing trained
    assert main([*argv[:9], "2", *argv[10:], "--resume"]) == 2  # --max_iterations 2: model_2.pt lies past it
    assert "more iterations than 2" in capsys.readouterr().err
    # the first run stopped before the JSON held the settings: its checkpoint tells other flags apart
    (run_dir / "model_2.pt").unlink()
    assert main([*argv[:11], "3", *argv[12:], "--resume"]) == 2  # --eval_episodes 3 (model_1.pt: 2)
    assert "other settings" in capsys.readouterr().err and not (run_dir / "model_2.pt").exists()
    # a fresh run (no --resume) clears a stopped run's policies first, so a later --resume cannot pick them up
    torch.save(ckpt, run_dir / "model_7.pt")
    assert main([*argv[:9], "2", *argv[10:]]) == 0
    assert sorted(p.name for p in run_dir.glob("model_*.pt")) == ["model_0.pt", "model_1.pt"]


def test_time_to_target_reads_the_reference_and_each_runs_own_target_off_the_curves():
    """Closed form on crafted curves: the reference is the mean final MuJoCo return of the mujoco runs; each run's own
    target is the fraction of its own final return (none for a final return <= 0); per backend the spread."""
    from flashnerd.cli.bench.ppo import time_to_target

    def run(backend: str, final: float, curve: list) -> dict:
        return {"backend": backend, "eval_mujoco": {"mean_return": final}, "mujoco_curve": curve}

    results = {"mujoco/seed1": run("mujoco", 20.0, [[10, 5.0], [20, 18.0], [30, 20.0]]),
               "mujoco/seed2": run("mujoco", 10.0, [[10, 9.5], [20, 8.0], [30, 10.0]]),
               "flashnerd/seed1": run("flashnerd", 16.0, [[5, 15.0], [10, 14.0], [15, 16.0]]),
               "flashnerd/seed2": run("flashnerd", -1.0, [[5, -3.0], [10, -1.0]]),
               # ends below its first saved policy: that policy meets 90% of its final return at once (no gain)
               "nerd/seed1": run("nerd", 3.0, [[3, 3.5], [10, 2.0], [20, 3.0]])}
    tt = time_to_target(results, 0.9)
    assert tt["reference_return"] == 15.0 and tt["target_return"] == pytest.approx(13.5)
    assert tt["seconds"] == {"mujoco/seed1": 20, "mujoco/seed2": None, "flashnerd/seed1": 5, "flashnerd/seed2": None,
                             "nerd/seed1": None}
    assert tt["own_seconds"] == {"mujoco/seed1": 20, "mujoco/seed2": 10, "flashnerd/seed1": 5, "flashnerd/seed2": None,
                                 "nerd/seed1": None}
    assert tt["no_gain"] == ["nerd/seed1"]
    assert tt["by_backend"]["mujoco"] == {"runs": 2, "keys": ["mujoco/seed1", "mujoco/seed2"], "final_mean": 15.0,
                                          "final_min": 10.0, "final_max": 20.0, "own_seconds": [20, 10],
                                          "own_seconds_mean": 15}
    flash = tt["by_backend"]["flashnerd"]
    assert flash["final_mean"] == 7.5 and flash["own_seconds"] == [5, None] and flash["own_seconds_mean"] is None
    assert tt["by_backend"]["nerd"]["own_seconds"] == [None]


def test_time_to_target_takes_a_named_reference_run_and_groups_shac_apart():
    """--target_reference flashnerd: the target is a fraction of the PPO-on-flashnerd runs' mean final return; SHAC
    runs of the same backend form their own group (backend:shac), and old runs without an algo count as PPO."""
    from flashnerd.cli.bench.ppo import time_to_target

    def run(backend: str, algo: str | None, final: float, curve: list) -> dict:
        return {"backend": backend, "eval_mujoco": {"mean_return": final}, "mujoco_curve": curve,
                **({"algo": algo} if algo else {})}

    results = {"flashnerd/seed1": run("flashnerd", None, 20.0, [[10, 5.0], [20, 20.0]]),
               "flashnerd/seed2": run("flashnerd", "ppo", 10.0, [[10, 9.0], [20, 10.0]]),
               "flashnerd:shac/seed1": run("flashnerd", "shac", 14.0, [[3, 13.5], [6, 14.0]])}
    tt = time_to_target(results, 0.9, reference="flashnerd")
    assert tt["reference"] == "flashnerd" and tt["reference_return"] == 15.0
    assert tt["seconds"] == {"flashnerd/seed1": 20, "flashnerd/seed2": None, "flashnerd:shac/seed1": 3}
    assert set(tt["by_backend"]) == {"flashnerd", "flashnerd:shac"}
    assert tt["by_backend"]["flashnerd:shac"]["runs"] == 1 and tt["by_backend"]["flashnerd"]["runs"] == 2


def test_bench_ppo_shac_run_beside_ppo_evaluated_as_often_and_resumed_into_a_ppo_file(tiny_ckpt, tmp_path, capsys,
                                                                                       monkeypatch):
    """`flashnerd:shac` trains SHAC (its own world count and iterations) and is recorded like a PPO run: its curve
    has one point per SHAC iteration, its policy is evaluated in MuJoCo as many times as the PPO run's, at the same
    fractions of the run, the final point being the final evaluation. The evaluations count as no training time and
    leave the training's random streams alone: the same run without them has the same training curve and final
    policy. A PPO-only file resumed with a SHAC run gains it and keeps its PPO run; SHAC on MuJoCo, an unknown
    algorithm, SHAC flags without a SHAC run and a reference that is no run are one-line errors."""
    import time

    from flashnerd.cli.bench import ppo as bench_ppo

    out = tmp_path / "bench"
    base = ["bench", "ppo", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--dynamics_checkpoint",
            f"flashnerd={tiny_ckpt}", "--num_envs", "4", "--max_iterations", "2", "--eval_episodes", "2",
            "--eval_every", "1"]
    assert main([*base, "--out_dir", str(out), "--dynamics", "flashnerd"]) == 0
    path = out / "bench_ppo.json"
    ppo_run = json.loads(path.read_text())["backends"]["flashnerd"]
    real = bench_ppo._reference_evaluator
    pause = 4.0  # far above a tiny SHAC iteration even on a loaded machine

    def slow(args, env_cfg):  # an evaluation that takes long: none of it may show in the training time
        evaluate = real(args, env_cfg)
        return lambda policy: (time.sleep(pause), evaluate(policy))[1]

    monkeypatch.setattr(bench_ppo, "_reference_evaluator", slow)
    shac = ["--shac_num_envs", "3", "--shac_iterations", "6", "--shac_horizon", "3", "--target_reference", "flashnerd"]
    assert main([*base, "--out_dir", str(out), "--dynamics", "flashnerd,flashnerd:shac", *shac, "--resume"]) == 0
    monkeypatch.undo()
    data = json.loads(path.read_text())
    assert data["shac"] == {"num_envs": 3, "iterations": 6, "horizon": 3}
    assert data["backends"]["flashnerd"]["curve"] == ppo_run["curve"]  # kept, not trained again
    r = data["backends"]["flashnerd:shac"]
    assert (r["backend"], r["algo"], r["num_envs"]) == ("flashnerd", "shac", 3)
    times = [t for t, _ in r["curve"]]
    assert len(times) == 6 and all(0 < b - a < pause for a, b in zip(times, times[1:]))
    # PPO (2 iterations, every 1): after iteration 1 of 2, then the final; SHAC: after iteration 3 of 6, then the final
    assert len(ppo_run["mujoco_curve"]) == len(r["mujoco_curve"]) == 2
    assert [t for t, _ in r["mujoco_curve"]] == pytest.approx([times[2], times[5]])
    assert r["mujoco_curve"][-1][1] == r["eval_mujoco"]["mean_return"]
    assert data["time_to_target"]["reference"] == "flashnerd"
    assert set(data["time_to_target"]["by_backend"]) == {"flashnerd", "flashnerd:shac"}
    # the final policy, in rsl_rl's checkpoint layout
    assert (out / "bench_ppo" / "flashnerd_shac" / "model_5.pt").is_file()

    plain = tmp_path / "plain"  # the same SHAC run without evaluations along the way
    assert main([*base[:-2], "--out_dir", str(plain), "--dynamics", "flashnerd:shac", *shac[:-2]]) == 0
    alone = json.loads((plain / "bench_ppo.json").read_text())["backends"]["flashnerd:shac"]
    assert [x for _, x in alone["curve"]] == pytest.approx([x for _, x in r["curve"]], nan_ok=True)
    assert alone["eval_mujoco"] == r["eval_mujoco"]
    capsys.readouterr()
    for runs, message in (("mujoco:shac", "'mujoco' is not one"), ("flashnerd:sac", "names algorithm 'sac'"),
                          ("flashnerd,flashnerd:ppo", "names run 'flashnerd' twice")):
        assert main([*base, "--out_dir", str(out), "--dynamics", runs]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    assert main([*base, "--out_dir", str(out), "--dynamics", "flashnerd", "--shac_horizon", "8"]) == 2
    assert "--dynamics names none" in capsys.readouterr().err
    assert main([*base, "--out_dir", str(out), "--dynamics", "flashnerd", "--target_reference", "nerd"]) == 2
    assert "is none of the runs" in capsys.readouterr().err


def _fit_cmd(data, out, tmp_path, max_steps: int = 100000) -> list[str]:
    """A `flashnerd fit` subprocess command on the tiny dataset (batch 8)."""
    return [sys.executable, "-m", "flashnerd.cli.main", "fit", "--data", str(data), "--out", str(out),
            "--max_steps", str(max_steps), "--batch_size", "8", "--log_dir", str(tmp_path / "tb")]


def test_ctrl_c_during_fit_saves_a_resumable_checkpoint(tiny, tmp_path):
    _, path, _ = tiny
    out = tmp_path / "interrupted.safetensors"
    proc = subprocess.Popen(_fit_cmd(path, out, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(out, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)  # a loaded 2-core machine can take minutes to save and exit
    assert proc.returncode == 130 and "interrupted" in err
    ckpt = read_checkpoint(out)
    assert ckpt["step"] >= 100 and not list(tmp_path.glob("*.tmp"))
    cfg = dataclasses.replace(FitConfig(), max_steps=ckpt["step"] + 2, batch_size=8)
    fitter = Fitter(path, cfg)
    fitter.resume(out)
    assert fitter.fit(out, progress=False)["steps"] == ckpt["step"] + 2


def test_ctrl_c_under_patience_keeps_the_best_step_in_out(tiny, tmp_path, monkeypatch):
    """Under early stopping `out` holds the best validated step; Ctrl-C after it must not write later weights over
    it (a resume continues from the best)."""
    _, path, _ = tiny
    cfg = dataclasses.replace(FitConfig(), max_steps=6, batch_size=8, ar_batch_size=4, window=8, eval_every=2,
                              patience=5, contact_head_steps=0)
    fitter, out = Fitter(path, cfg), tmp_path / "patient.safetensors"
    take_step = fitter._train_step

    def stopped_at_step_3(writer) -> None:
        if fitter.step == 3:
            raise KeyboardInterrupt
        take_step(writer)

    monkeypatch.setattr(fitter, "_train_step", stopped_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        fitter.fit(out, progress=False)
    assert fitter.step == 3 and read_checkpoint(out)["step"] in (0, 2)  # a validated step, not the third


def test_fit_without_resume_refuses_an_out_that_holds_a_stopped_fit(tiny, tmp_path, capsys, monkeypatch):
    """A stopped fit's checkpoint is not written over by a fit started afresh (one line naming --resume); --resume
    finishes it, and a finished fit is an output like any other."""
    _, path, _ = tiny
    out = tmp_path / "stopped.safetensors"
    argv = ["fit", "--data", str(path), "--out", str(out), "--max_steps", "4", "--batch_size", "8",
            "--ar_batch_size", "4", "--contact_head_steps", "0", "--log_dir", str(tmp_path / "tb")]
    take_step = Fitter._train_step

    def stopped_at_step_3(self, writer) -> None:
        if self.step == 3:
            raise KeyboardInterrupt
        take_step(self, writer)

    monkeypatch.setattr(Fitter, "_train_step", stopped_at_step_3)
    assert main(argv) == 130
    monkeypatch.undo()
    stopped = out.read_bytes()
    assert read_checkpoint(out)["fit_complete"] is False
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "stopped at step 3" in err and "--resume" in err and len(err.splitlines()) == 1, err
    assert out.read_bytes() == stopped
    assert main([*argv, "--resume"]) == 0
    assert read_checkpoint(out)["step"] == 4 and read_checkpoint(out)["fit_complete"] is True
    assert main([*argv, "--seed", "1"]) == 0  # a finished fit is written over
    assert read_checkpoint(out)["fit_config"]["seed"] == 1


def test_interrupted_record_resumes_to_the_uninterrupted_dataset(anymal, tmp_path):
    """Ctrl-C keeps every complete batch in <out>.parts/; --resume finishes it, equal to an uninterrupted recording."""
    kw = dict(num_worlds=6, steps=100, traj_len=20, seed=4, progress=False)
    ref = tmp_path / "ref.h5"
    record(anymal, out=ref, **kw)
    out = tmp_path / "resumed.h5"
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C while the third batch starts
        record(anymal, out=out, source=stopping_source(anymal, 6, at_batch=3), **kw)
    parts = partial_path(out)
    assert not out.exists() and [p.name for p in sorted(parts.glob("chunk_*.h5"))] == ["chunk_000000.h5",
                                                                                       "chunk_000001.h5"]
    with h5py.File(parts / "chunk_000001.h5") as f:
        assert f["qpos"].shape[0] == 6
    with pytest.raises(ValueError, match="other settings: seed=4"):
        record(anymal, out=out, resume=True, **{**kw, "seed": 5})
    info = record(anymal, out=out, resume=True, **kw)
    assert info["trajectories"] == 30 and not parts.exists()
    a, b = load_dataset(ref, anymal), load_dataset(out, anymal)
    assert torch.allclose(a.qpos, b.qpos, atol=1e-4) and torch.equal(a.ctrl, b.ctrl)
    with pytest.raises(ValueError, match="no unfinished recording"):
        record(anymal, out=out, resume=True, **kw)


def _wait_for(path, proc, seconds: float = 180.0) -> None:
    """Wait until `proc` writes `path`; on failure kill it, so that no orphan keeps a core busy after the test."""
    deadline = time.time() + seconds
    while not path.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    if not path.exists():
        message = proc.stderr.read()[-2000:] if proc.poll() is not None else f"no {path.name} in {seconds} s"
        proc.kill()
        proc.wait()
        raise AssertionError(message)


def test_ctrl_c_during_record_keeps_complete_batches_and_resume_finishes(tmp_path):
    out = tmp_path / "big.h5"
    cmd = [sys.executable, "-m", "flashnerd.cli.main", "record", "--num_worlds", "4", "--steps", "6000",
           "--traj_len", "50", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parts = partial_path(out)
    _wait_for(parts / "chunk_000000.h5", proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the recording finished before the interrupt arrived")
    assert proc.returncode == 130 and "interrupted" in err
    assert not out.exists() and parts.is_dir()
    done = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    info = json.loads(done.stdout.strip().splitlines()[-1])
    assert info["trajectories"] + info["dropped"] == 4 * 120 and not parts.exists()
    assert load_dataset(out).num_trajectories == info["trajectories"]


def test_record_killed_at_a_random_point_resumes_to_the_uninterrupted_dataset(tmp_path):
    """SIGKILL (no handler runs) at a random moment, also while a batch file is being written: only whole batches
    survive, and --resume ends with exactly the dataset an uninterrupted run writes."""
    cmd = [sys.executable, "-m", "flashnerd.cli.main", "record", "--num_worlds", "8", "--steps", "1200",
           "--traj_len", "20", "--seed", "3"]
    ref = tmp_path / "ref.h5"
    subprocess.run(cmd + ["--out", str(ref)], check=True, capture_output=True, timeout=300)
    out = tmp_path / "killed.h5"
    proc = subprocess.Popen(cmd + ["--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parts = partial_path(out)
    _wait_for(parts / "chunk_000002.h5", proc)
    time.sleep(random.uniform(0.0, 0.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    if out.exists():
        pytest.skip("the recording finished before the kill arrived")
    done = subprocess.run(cmd + ["--out", str(out), "--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    a, b = load_dataset(ref), load_dataset(out)
    assert torch.allclose(a.qpos, b.qpos, atol=1e-4) and torch.equal(a.ctrl, b.ctrl) and not parts.exists()


def test_fit_killed_mid_run_resumes_to_the_requested_step_count(tiny, tmp_path):
    _, path, _ = tiny
    out = tmp_path / "killed.safetensors"
    proc = subprocess.Popen(_fit_cmd(path, out, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(out, proc)
    time.sleep(random.uniform(0.0, 2.0))  # a random point after the first checkpoint
    proc.send_signal(signal.SIGKILL)  # no handler runs: only what was already renamed into place survives
    proc.communicate(timeout=60)
    step = read_checkpoint(out)["step"]
    target = step + 3
    done = subprocess.run(_fit_cmd(path, out, tmp_path, max_steps=target) + ["--resume"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["steps"] == target
    assert read_checkpoint(out)["step"] == target


@pytest.mark.parametrize("poison_value", [float("nan"), 1e6])
def test_a_diverging_world_is_reset_alone(tiny_ckpt, poison_value):
    """A world whose state turns NaN, or finite at an impossible speed (a weak model's worlds drift off to 1e6 m),
    earns nothing, is terminated and reset alone; the others go on exactly as without it."""
    import gymnasium as gym

    def run(poison: bool):
        env = gym.make("FlashNeRD-Velocity-Flat-Anymal-C-Play-v0", num_envs=4, dynamics="flashnerd",
                       checkpoint=str(tiny_ckpt), seed=5).unwrapped
        env.reset(seed=5)
        logs = []
        for t in range(6):
            if poison and t == 3:
                qvel = env.state.qvel[1:2].clone()
                qvel[:, 0] = poison_value
                env.dyn.set_qvel(torch.tensor([1]), qvel)
            obs, rew, terminated, truncated, extras = env.step(torch.zeros(4, 12))
            assert torch.isfinite(rew).all() and all(torch.isfinite(v).all() for v in obs.values())
            assert rew.abs().max() < 10.0 and (not poison or t != 3 or rew[1] == 0.0)
            logs.append((terminated.clone(), extras["log"]))
        return env.state.qpos.clone(), env.episode_length_buf.clone(), logs

    clean_q, _, _ = run(False)
    bad_q, lengths, logs = run(True)
    terminated, log = logs[3]
    assert terminated.tolist() == [False, True, False, False]
    assert int(log["Episode_Termination/non_finite_state"]) == 1
    assert lengths[1] == 2 and torch.isfinite(bad_q).all()
    keep = [0, 2, 3]
    assert torch.equal(clean_q[keep], bad_q[keep])


def test_short_trajectories_are_a_clear_fit_error(tmp_path):
    from flashnerd.robots import get_robot

    path = tmp_path / "short.h5"
    record(get_robot("anymal_c"), num_worlds=2, steps=5, out=path, traj_len=5, progress=False)
    with pytest.raises(ValueError, match="has 5-step trajectories; the autoregressive loss needs 12"):
        Fitter(path, FitConfig())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["fit", "--data", "{tmp}/missing.h5", "--out", "{tmp}/m.safetensors"], "does not exist"),
        (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors"], "truncated or corrupt"),
        (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors", "--max_steps", "0"], "--max_steps must be"),
        (["evaluate-model", "--checkpoint", "{tmp}/junk.h5", "--data", "{tmp}/junk.h5"], "cannot read checkpoint"),
        (["export-model", "--checkpoint", "{tmp}/missing.safetensors", "--out", "{tmp}/m.safetensors"],
         "does not exist"),
        (["record", "--num_worlds", "0", "--out", "{tmp}/r.h5"], "--num_worlds must be a positive integer"),
        (["record", "--robot", "spot", "--out", "{tmp}/r.h5"], "unknown robot 'spot'"),
        (["bench", "model", "--batch", "16,abc"], "--batch must be comma-separated integers"),
        (["record", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--action_noise", "nan", "--out", "{tmp}/r.h5"],
         "--action_noise must be a finite number >= 0"),
        (["record", "--checkpoint", "{tmp}/m.pt", "--out", "{tmp}/r.h5"], "add --task TASK"),
        (["record", "--resume", "--out", "{tmp}/r.h5"], "no unfinished recording"),
        (["fit", "--data", "{tmp}/junk.h5", "--out", "{tmp}/m.safetensors", "--ar_batch_size", "0"],
         "--ar_batch_size must be"),
        (["compare-video", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--video_length", "0"],
         "--video_length must be a positive integer"),
    ],
)
def test_bad_pipeline_input_is_one_line_exit_2(argv, message, tmp_path, capsys):
    (tmp_path / "junk.h5").write_bytes(b"definitely not hdf5")
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not list(tmp_path.glob("*.safetensors")) and not list(tmp_path.glob("r.h5*"))


def test_rwm_dual_autoregression_feeds_back_its_own_predictions(tiny):
    """The forecast frames the GRU reads are built from the model's sampled predictions, not the recorded frames:
    the history part equals the data exactly, the forecast part is far from it (teacher forcing plus the 0.02
    feedback noise would stay within a few hundredths)."""
    _, path, _ = tiny
    cfg = dataclasses.replace(FitConfig(), model="rwm", ar_history=8, ar_steps=4, ar_batch_size=6, batch_size=4)
    fitter = Fitter(path, cfg)
    seen = []
    forward_dist = fitter.model.forward_dist
    fitter.model.forward_dist = lambda x, h0=None: (seen.append(x.detach().clone()), forward_dist(x, h0))[1]
    state = fitter.gen.get_state()
    loss = fitter.autoregressive_loss(fitter.train, fitter.xn_tr)
    assert torch.isfinite(loss) and len(seen) == cfg.ar_steps
    fitter.gen.set_state(state)
    xn = fitter.xn_tr
    traj, tt = fitter._sample_windows(xn.shape[0], xn.shape[1], cfg.ar_history + cfg.ar_steps, cfg.ar_batch_size,
                                      fitter.gen)
    last = seen[-1]  # (b, hist + steps - 1, I)
    assert torch.equal(last[:, :cfg.ar_history], xn[traj, tt[:, :cfg.ar_history]])
    forecast_true = xn[traj, tt[:, cfg.ar_history:cfg.ar_history + cfg.ar_steps - 1]]
    assert (last[:, cfg.ar_history:] - forecast_true).abs().mean() > 0.2
    loss.backward()
    assert fitter.model.log_std.weight.grad.abs().sum() > 0  # sampling is reparameterized: the std head learns
