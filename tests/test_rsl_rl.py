"""RSL-RL wrapper semantics, a 2-iteration training smoke run, determinism, play/eval, and CLI errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from conftest import TASK
from tensordict import TensorDict

from flashnerd.cli.main import main
from flashnerd.data.dataset import load_dataset, load_datasets
from flashnerd.dynamics import make_dynamics
from flashnerd.envs.rsl_rl import RslRlVecEnvWrapper
from flashnerd.robots import get_robot


def test_wrapper_semantics():
    env = RslRlVecEnvWrapper(gym.make(TASK, num_envs=4))
    obs = env.get_observations()
    assert isinstance(obs, TensorDict) and obs.batch_size == torch.Size([4])
    assert set(obs.keys()) == {"policy", "critic"} and obs["policy"].shape == (4, 48)
    env.unwrapped.episode_length_buf[:] = torch.tensor([0, 0, 999, 999])
    obs, rew, dones, extras = env.step(torch.zeros(4, 12))
    assert dones.tolist() == [0, 0, 1, 1]
    assert extras["time_outs"].tolist() == [False, False, True, True]
    assert rew.shape == (4,)
    # rsl_rl writes random episode lengths through the property; they must land in the env.
    env.episode_length_buf = torch.tensor([5, 6, 7, 8])
    assert env.unwrapped.episode_length_buf.tolist() == [5, 6, 7, 8]
    env.close()


def _train(tmp_path: Path, run_name: str, seed: int = 3, eval_episodes: int = 0) -> Path:
    argv = ["train", "--task", TASK, "--num_envs", "8", "--max_iterations", "2", "--seed", str(seed),
            "--log_root", str(tmp_path), "--run_name", run_name, "--eval_episodes", str(eval_episodes)]
    assert main(argv) == 0
    runs = sorted((tmp_path / "anymal_c_flat").glob(f"*_{run_name}"))
    assert len(runs) == 1
    return runs[0]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("logs"), "smoke", eval_episodes=2)


def test_training_writes_checkpoint_params_and_events(trained_run):
    assert (trained_run / "model_1.pt").is_file()
    assert (trained_run / "params" / "env.yaml").is_file() and (trained_run / "params" / "agent.yaml").is_file()
    assert list(trained_run.glob("events.out.tfevents.*"))
    assert not list(trained_run.glob("*.tmp"))
    evaluation = json.loads((trained_run / "eval.json").read_text())
    assert list(evaluation) == ["mujoco"] and evaluation["mujoco"]["episodes"] == 2
    env_yaml = (trained_run / "params" / "env.yaml").read_text()
    assert "track_lin_vel_xy_exp" in env_yaml and "flashnerd.envs.mdp:" in env_yaml


def test_same_seed_gives_identical_weights(trained_run, tmp_path):
    again = _train(tmp_path, "again")
    a = torch.load(trained_run / "model_1.pt", weights_only=True)["actor_state_dict"]
    b = torch.load(again / "model_1.pt", weights_only=True)["actor_state_dict"]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    other = _train(tmp_path, "other", seed=4)
    c = torch.load(other / "model_1.pt", weights_only=True)["actor_state_dict"]
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_play_exports_and_eval_prints_metrics(trained_run, capsys):
    ckpt = str(trained_run / "model_1.pt")
    assert main(["play", "--task", TASK, "--num_envs", "2", "--checkpoint", ckpt,
                 "--steps", "5"]) == 0
    assert (trained_run / "exported" / "policy.pt").is_file()
    assert (trained_run / "exported" / "policy.onnx").is_file()
    jit = torch.jit.load(str(trained_run / "exported" / "policy.pt"))
    assert jit(torch.zeros(1, 48)).shape == (1, 12)
    capsys.readouterr()
    assert main(["eval", "--task", TASK, "--checkpoint", ckpt, "--episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("mean_return", "lin_vel_rms", "ang_vel_rms", "fall_rate", "mean_episode_length_s", "returns"):
        assert key in result
    assert result["dynamics"] == "mujoco" and result["episodes"] == 2
    assert 0.0 <= result["fall_rate"] <= 1.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--task", "FlashNeRD-Nope-v0"], "unknown task 'FlashNeRD-Nope-v0'"),
        (["train", "--task", TASK, "--dynamics", "nope", "--num_envs", "2"], "unknown dynamics backend 'nope'"),
        (["train", "--task", TASK, "--num_envs", "0"], "--num_envs must be a positive integer"),
        (["train", "--task", TASK, "--max_iterations", "-1"], "--max_iterations must be a positive integer"),
        (["train", "--task", TASK, "--device", "cuda:0"], "CUDA is not available"),
        (["eval", "--task", TASK, "--episodes", "0"], "--episodes must be a positive integer"),
        (["eval", "--task", TASK, "--checkpoint", "/nonexistent/model_1.pt"], "does not exist"),
        (["bench", "env", "--task", TASK, "--steps", "0"], "--steps must be a positive integer"),
    ],
)
def test_bad_cli_input_is_one_line_exit_2(argv, message, capsys, tmp_path):
    assert main([*argv, *(["--log_root", str(tmp_path)] if argv[0] != "bench" else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not list(tmp_path.rglob("*.pt"))


def test_corrupt_checkpoint_is_one_line_error(tmp_path, capsys):
    bad = tmp_path / "model_3.pt"
    bad.write_bytes(b"not a checkpoint")
    assert main(["eval", "--task", TASK, "--checkpoint", str(bad), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read policy checkpoint" in err[0]


def _junk_optimizer(ckpt: dict) -> None:
    ckpt["optimizer_state_dict"] = {"state": 5, "param_groups": 7}


def _moment_of_another_shape(ckpt: dict) -> None:
    state = ckpt["optimizer_state_dict"]["state"]
    state[next(iter(state))]["exp_avg"] = torch.zeros(3, 3)


def _optimizer_state_a_list(ckpt: dict) -> None:  # torch's load_state_dict calls state.items()
    ckpt["optimizer_state_dict"]["state"] = []


def _nan_actor(ckpt: dict) -> None:
    weights = ckpt["actor_state_dict"]
    weights[next(k for k in weights if k.endswith("weight"))].fill_(float("nan"))


def _nan_critic(ckpt: dict) -> None:
    weights = ckpt["critic_state_dict"]
    weights[next(k for k in weights if k.endswith("weight"))].fill_(float("nan"))


@pytest.mark.parametrize("edit, message, resumed", [
    (lambda c: c.update(iter="abc"), "its iteration count is 'abc', not a whole number >= 0", False),
    (lambda c: c.update(iter=-5), "its iteration count is '-5'", False),
    (lambda c: c.update(actor_state_dict=[1, 2]), "actor_state_dict is not a mapping", False),
    (_nan_actor, "holds non-finite values in actor_state_dict", False),
    # what only training reads: refused where a run resumes from it, not where a policy is evaluated
    (_junk_optimizer, "does not fit this task's policy", True),
    (_moment_of_another_shape, "holds an optimizer exp_avg of shape (3, 3)", True),
    (_nan_critic, "holds non-finite values in critic_state_dict", True),
    (lambda c: c.update({7: 0}), "its entries are not all named by text", False),
    (_optimizer_state_a_list, "does not fit this task's policy ('list' object has no attribute 'items')", True),
], ids=["iter_text", "iter_negative", "actor_list", "nan_actor", "optimizer_junk", "moment_shape", "nan_critic",
        "int_key", "optimizer_state_list"])
def test_a_crafted_policy_checkpoint_is_one_line_error(trained_run, edit, message, resumed, tmp_path, capsys):
    """Read with weights_only=True, a policy checkpoint runs no code; one whose plain fields, weights or optimizer
    state were edited is refused in one line too, before an evaluation (what acting reads) or a resumed run
    (everything) starts from it."""
    run = tmp_path / "anymal_c_flat" / trained_run.name
    shutil.copytree(trained_run, run)
    ckpt = torch.load(trained_run / "model_1.pt", weights_only=True)
    edit(ckpt)
    torch.save(ckpt, run / "model_1.pt")
    evaluate = ["eval", "--task", TASK, "--checkpoint", str(run / "model_1.pt"), "--num_envs", "2", "--episodes", "1",
                "--log_root", str(tmp_path)]
    resume = ["train", "--task", TASK, "--num_envs", "8", "--max_iterations", "3", "--log_root", str(tmp_path),
              "--run_name", "again", "--eval_episodes", "0", "--resume", "--load_run", run.name]
    assert main(resume if resumed else evaluate) == 2
    err = capsys.readouterr().err.strip()
    # train prints rsl_rl's observation sets before it loads the checkpoint; the error is one line after them
    assert message in err.splitlines()[-1] and "Traceback" not in err, err
    assert resumed or len(err.splitlines()) == 1, err
    if edit is _nan_critic:  # the actor is intact: the policy still acts
        assert main(evaluate) == 0


def test_a_bad_load_run_pattern_is_one_line_error(trained_run, capsys):
    assert main(["eval", "--task", TASK, "--load_run", "(", "--log_root", str(trained_run.parents[1])]) == 2
    err = capsys.readouterr().err.strip()
    assert "--load_run '(' is not a valid regex" in err and len(err.splitlines()) == 1, err


def test_console_script_exit_status():
    proc = subprocess.run([sys.executable, "-m", "flashnerd.cli.main", "eval", "--task", "Nope-v0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    from flashnerd.envs.registry import registered_tasks

    assert proc.stderr.strip() == ("flashnerd eval: error: unknown task 'Nope-v0'; registered tasks: "
                                   + ", ".join(registered_tasks()))
    assert "FlashNeRD-Velocity-Flat-Anymal-C-v0" in proc.stderr


def test_resume_ends_at_the_requested_iteration_count(tmp_path, capsys):
    first = _train(tmp_path, "part", seed=3)  # iterations 0 and 1 -> model_1.pt
    argv = ["train", "--task", TASK, "--num_envs", "8", "--max_iterations", "4", "--seed", "3",
            "--log_root", str(tmp_path), "--run_name", "resumed", "--eval_episodes", "0",
            "--resume", "--load_run", first.name]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    resumed = Path(summary["log_dir"])
    assert summary["checkpoint"].endswith("model_3.pt") and (resumed / "model_3.pt").is_file()
    assert torch.load(resumed / "model_3.pt", weights_only=True)["iter"] == 3
    before = torch.load(first / "model_1.pt", weights_only=True)["infos"]["train_seconds"]
    assert torch.load(resumed / "model_3.pt", weights_only=True)["infos"]["train_seconds"] > before > 0
    assert main([*argv[:6], "2", *argv[7:]]) == 2, "a run that already has 2 iterations cannot resume to 2"


def test_a_stage_resumes_from_its_last_checkpoint(tmp_path):
    """`train_policy(resume=True)` (the long stages of `bench reality-gap` and `improve`) continues a stopped run from
    its last `model_<it>.pt` up to the stage's iteration count, carrying the stopped run's training seconds; a run
    that had finished training returns its last checkpoint's policy untouched; without `resume` it starts afresh."""
    from flashnerd.envs.registry import task_cfgs
    from flashnerd.envs.rsl_rl import train_policy

    env_cfg, agent_cfg = task_cfgs(TASK, num_envs=4, seed=5)
    agent_cfg.num_steps_per_env, agent_cfg.max_iterations, agent_cfg.save_interval = 3, 4, 2
    log_dir = tmp_path / "stage"
    train_policy(TASK, env_cfg, agent_cfg, str(log_dir), 4)
    assert sorted(p.name for p in log_dir.glob("model_*.pt")) == ["model_0.pt", "model_2.pt", "model_3.pt"]
    (log_dir / "model_3.pt").unlink()  # stopped after the checkpoint of iteration 2: 3 iterations done
    before = torch.load(log_dir / "model_2.pt", weights_only=True)["infos"]["train_seconds"]
    runner, wall = train_policy(TASK, env_cfg, agent_cfg, str(log_dir), 4, resume=True)
    assert runner.resumed_at == 3 and runner.current_learning_iteration == 3 and wall > before > 0
    last = torch.load(log_dir / "model_3.pt", weights_only=True)
    assert last["iter"] == 3 and last["infos"]["train_seconds"] > before

    runner, wall = train_policy(TASK, env_cfg, agent_cfg, str(log_dir), 4, resume=True)  # nothing left to train
    assert runner.resumed_at == 4 and wall == pytest.approx(last["infos"]["train_seconds"], abs=0.5)
    weights = runner.alg.save()["actor_state_dict"]
    assert all(torch.equal(weights[k], v) for k, v in last["actor_state_dict"].items())
    runner, _ = train_policy(TASK, env_cfg, agent_cfg, str(log_dir), 1)
    assert runner.resumed_at == 0 and runner.current_learning_iteration == 0


def test_a_resumed_stage_spends_the_whole_runs_max_seconds(tmp_path):
    """`max_seconds` counts the stopped run's seconds too: a run the budget stopped resumes to no further iteration,
    and a larger budget continues it by the seconds it has left."""
    from flashnerd.envs.registry import task_cfgs
    from flashnerd.envs.rsl_rl import train_policy

    env_cfg, agent_cfg = task_cfgs(TASK, num_envs=4, seed=5)
    agent_cfg.num_steps_per_env, agent_cfg.max_iterations, agent_cfg.save_interval = 3, 6, 1
    log_dir = tmp_path / "stage"
    runner, _ = train_policy(TASK, env_cfg, agent_cfg, str(log_dir), 6, max_seconds=1e-6)
    assert runner.stopped_by_time and len(runner.full_curve()) == 1
    runner, _ = train_policy(TASK, env_cfg, agent_cfg, str(log_dir), 6, max_seconds=1e-6, resume=True)
    assert runner.resumed_at == 1 and runner.stopped_by_time and runner.current_learning_iteration == 0
    assert sorted(p.name for p in log_dir.glob("model_*.pt")) == ["model_0.pt"]
    runner, _ = train_policy(TASK, env_cfg, agent_cfg, str(log_dir), 6, max_seconds=1e6, resume=True)
    assert not runner.stopped_by_time and len(runner.full_curve()) == 6 and runner.curve_before
    assert runner.full_curve()[0] == runner.curve_before[0]


@pytest.mark.parametrize("infos, done, ok", [
    ({"curve": [[0.5, 1.0], [1.0, float("nan")]]}, 2, True), ({"curve": [[0.5, 1.0]]}, 2, False),
    ({"curve": [[1.0, 1.0], [0.5, 1.0]]}, 2, False), ({"curve": [[0.5, "1"], [1.0, 1.0]]}, 2, False),
    ({"curve": [[float("inf"), 1.0]]}, 1, False), ({"curve": [[-1.0, 1.0]]}, 1, False),
    ({"curve": [[True, 1.0]]}, 1, False), ({"curve": [[10**400, 1.0]]}, 1, False), ({"curve": [[0.5, 1]]}, 1, False),
    ({"curve": "x"}, 1, False), ({}, 0, False), (None, 0, False)])
def test_a_checkpoints_curve_is_read_only_when_whole_and_plain(infos, done, ok):
    from flashnerd.envs.rsl_rl import curve_in

    curve = curve_in(infos, done)
    assert (curve is not None) == ok
    if ok:
        assert len(curve) == done and curve[0] == (0.5, 1.0)


@pytest.mark.parametrize("machines, ok", [
    ([[0, "A"], [3, "B"]], True), ([[0, "A"]], True), ([[1, "A"]], False), ([[0, "A"], [0, "B"]], False),
    ([[0, "A"], [5, "B"]], False), ([[0, 1]], False), ([[0.0, "A"]], False), ([[True, "A"]], False),
    ([[0, "A" * 301]], False), ("A", False), (None, False)])
def test_a_checkpoints_machines_are_read_only_when_in_order_and_plain(machines, ok):
    from flashnerd.envs.rsl_rl import machines_in

    found = machines_in({"machines": machines}, 5)
    assert found == ([tuple(m) for m in machines] if ok else [])


@pytest.mark.parametrize("infos, seconds", [({"train_seconds": 2.5}, 2.5), ({"train_seconds": "2"}, 0.0),
                                             ({"train_seconds": float("nan")}, 0.0), ({"train_seconds": -1}, 0.0),
                                             ({"train_seconds": True}, 0.0), ({"train_seconds": 10**400}, 0.0),
                                             (None, 0.0), ([1.0], 0.0)])
def test_the_seconds_a_checkpoint_records_are_read_only_when_plain(infos, seconds):
    from flashnerd.envs.rsl_rl import seconds_in

    assert seconds_in(infos) == seconds


def test_max_seconds_stops_after_the_iteration_that_spends_them(tmp_path, capsys):
    argv = ["train", "--task", TASK, "--num_envs", "8", "--max_iterations", "5", "--seed", "3",
            "--log_root", str(tmp_path), "--eval_episodes", "0"]
    assert main([*argv, "--run_name", "short", "--max_seconds", "1e-6"]) == 0  # spent by the first iteration
    short = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert short["iterations"] == 1 and short["stopped_by"] == "max_seconds"
    assert short["checkpoint"].endswith("model_0.pt")
    assert torch.load(short["checkpoint"], weights_only=True)["iter"] == 0
    assert list(Path(short["log_dir"]).glob("events.out.tfevents.*"))
    assert main([*argv, "--run_name", "long", "--max_seconds", "1e6"]) == 0  # never spent: every iteration
    long = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert long["iterations"] == 5 and long["stopped_by"] == "max_iterations"
    assert long["checkpoint"].endswith("model_4.pt")
    assert main([*argv, "--max_seconds", "0"]) == 2
    assert "--max_seconds must be a finite number > 0, got 0.0" in capsys.readouterr().err


def test_policy_driven_recording_replays_and_drops_interrupted_trajectories(trained_run, tmp_path, capsys):
    """`record --task --checkpoint`: the stored controls are what the backend received (an exact replay), and a
    trajectory whose world was reset by the task (a fall under heavy action noise) is dropped, not stored cut; the
    steps before a fall are kept as a trajectory that ends at the fall (reaching back into the previous batch, in
    place of the world's trajectory there), and no two trajectories share a step."""
    out = tmp_path / "policy.h5"
    argv = ["record", "--task", TASK, "--checkpoint", str(trained_run / "model_1.pt"), "--num_worlds", "16",
            "--steps", "90", "--traj_len", "30", "--action_noise", "3.0", "--seed", "2", "--out", str(out)]
    assert main(argv) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["trajectories"] + info["interrupted"] + info["dropped"] + info["replaced"] == 48 + info["fall_ending"]
    assert info["interrupted"] > 0 and info["replaced"] > 0  # falls under this noise, some after a clean batch
    data = load_dataset(out, get_robot("anymal_c"))
    assert data.attrs["source"] == "policy" and data.num_trajectories == info["trajectories"] > 0
    assert data.attrs["fall_ending"] == info["fall_ending"]
    frames = data.qpos[:, 1:].reshape(-1, data.qpos.shape[-1])  # (M*T, nq) every trajectory's states after the first
    assert len(torch.unique(frames, dim=0)) == len(frames)  # overlapping trajectories would repeat states exactly
    dyn = make_dynamics("mujoco", get_robot("anymal_c"), data.num_trajectories)
    dyn.reset(torch.arange(data.num_trajectories), data.qpos[:, 0], data.qvel[:, 0])
    for t in range(data.traj_len):
        dyn.step(data.ctrl[:, t])
        err = (dyn.state().qpos - data.qpos[:, t + 1]).abs().max().item()
        assert err < 1e-3, (t, err)  # a cut trajectory (reset inside) would jump by metres here
    dyn.close()
    # The datasets combine for fitting; another trajectory length is refused in one line.
    both = load_datasets([out, out])
    assert both.num_trajectories == 2 * data.num_trajectories
    other = tmp_path / "other.h5"
    assert main(argv[:-2] + ["--traj_len", "20", "--out", str(other)]) == 0
    with pytest.raises(ValueError, match="same --traj_len"):
        load_datasets([out, other])


def test_a_policy_recording_resumes_only_with_its_task_policy_noise_and_backend(trained_run, tmp_path, capsys,
                                                                              monkeypatch):
    """An unfinished policy-driven recording names its task, the policy file's digest, the action noise, the
    overrides and the backend; a resume with another of them is a one-line error, and the dataset carries them."""
    from flashnerd.cli.common import checkpoint_sha256
    from flashnerd.data.record import PolicySource, partial_path

    out, policy = tmp_path / "p.h5", trained_run / "model_1.pt"
    argv = ["record", "--task", TASK, "--checkpoint", str(policy), "--num_worlds", "4", "--steps", "40",
            "--traj_len", "20", "--seed", "2", "--out", str(out)]
    start, starts = PolicySource.start_trajectory, []

    def stopped_at_the_second_batch(self) -> None:
        starts.append(self)
        if len(starts) == 2:
            raise KeyboardInterrupt
        start(self)

    monkeypatch.setattr(PolicySource, "start_trajectory", stopped_at_the_second_batch)
    assert main(argv) == 130 and partial_path(out).is_dir()
    monkeypatch.setattr(PolicySource, "start_trajectory", start)
    capsys.readouterr()
    assert main(argv) == 2 and len(list(partial_path(out).glob("chunk_*.h5"))) == 1  # afresh would delete it
    err = capsys.readouterr().err.strip()
    assert "add --resume" in err and len(err.splitlines()) == 1, err
    other_policy = tmp_path / "other.pt"
    shutil.copy(policy, other_policy)
    other_policy.write_bytes(other_policy.read_bytes() + b"\0")  # another file's digest, the same policy loads
    capsys.readouterr()
    for change, named in ((["--action_noise", "0.1"], "action_noise"), (["--checkpoint", str(other_policy)],
                                                                          "policy_sha256"),
                          (["agent.policy.init_noise_std=0.5"], "overrides")):
        changed = [*argv, "--resume", *change]
        assert main(changed) == 2
        err = capsys.readouterr().err.strip()
        assert f"other settings: {named}=" in err and len(err.splitlines()) == 1, err
    assert main([*argv, "--resume"]) == 0 and not partial_path(out).exists()
    attrs = load_dataset(out, get_robot("anymal_c")).attrs
    assert (attrs["task"], attrs["policy_sha256"], attrs["action_noise"], attrs["backend"], attrs["overrides"]) == (
        TASK, checkpoint_sha256(str(policy)), 0.3, "mujoco", "[]")


def test_train_killed_mid_run_resumes_to_the_requested_iteration_count(tmp_path):
    """SIGKILL (no handler runs) after a few saved iterations; --resume ends at --max_iterations in all."""
    import random
    import signal
    import time

    def cmd(iterations: int, run_name: str) -> list[str]:
        return [sys.executable, "-m", "flashnerd.cli.main", "train", "--task", TASK, "--num_envs", "8",
                "--max_iterations", str(iterations), "--save_interval", "2", "--seed", "3", "--log_root",
                str(tmp_path), "--run_name", run_name, "--eval_episodes", "0"]

    proc = subprocess.Popen(cmd(400, "killed"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while not list(tmp_path.glob("anymal_c_flat/*_killed/model_4.pt")) and time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        time.sleep(0.2)
    time.sleep(random.uniform(0.0, 2.0))  # a random point after the first checkpoints
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    run = next(tmp_path.glob("anymal_c_flat/*_killed"))
    last = max(int(p.stem.split("_")[1]) for p in run.glob("model_*.pt"))
    assert last >= 4 and torch.load(run / f"model_{last}.pt", weights_only=True)["iter"] == last
    target = last + 3
    resumed = subprocess.run(cmd(target, "resumed") + ["--resume", "--load_run", run.name], capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["checkpoint"].endswith(f"model_{target - 1}.pt")
    assert torch.load(summary["checkpoint"], weights_only=True)["iter"] == target - 1


def test_debug_flag_shows_the_traceback_instead_of_one_line():
    with pytest.raises(ValueError, match="unknown task"):
        main(["--debug", "train", "--task", "FlashNeRD-Nope-v0"])
