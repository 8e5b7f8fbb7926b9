"""Microduck forward roll: the roll tracker and rewards on hand-built states (upright, inverted, landed)."""

from __future__ import annotations

import math
import shutil

import gymnasium as gym
import pytest
import torch

import flashnerd_tasks  # noqa: F401  (registers the ids)
from flashnerd.utils.math import quat_from_euler_xyz
from flashnerd_tasks.roll import microduck as roll

TASK = "FlashNeRD-Roll-Flat-Microduck-v0"


def _env(num_envs: int = 3):
    env = gym.make(TASK, num_envs=num_envs).unwrapped
    env.cfg.events.pop("reset_mid_roll")  # every world starts standing
    env.reset(seed=0)
    return env


def _write_state(env, pitch: float, pitch_rate: float, height: float | None = None) -> None:
    n = env.num_envs
    qpos = torch.as_tensor(env.dyn.default_qpos(), dtype=torch.float32).repeat(n, 1)
    z = torch.zeros(n)
    qpos[:, 3:7] = quat_from_euler_xyz(z, torch.full((n,), pitch), z)
    if height is not None:
        qpos[:, 2] = height
    qvel = torch.zeros(n, env.dyn.nv)
    qvel[:, 4] = pitch_rate  # body-frame pitch rate
    env.dyn.reset(torch.arange(n), qpos, qvel)
    env._update_derived(joint_acc=False)


def test_pitch_rate_pays_only_until_the_roll_is_complete():
    env = _env()
    _write_state(env, pitch=0.0, pitch_rate=3.0, height=0.3)
    tracker = env.trackers["roll"]
    tracker.progress[:] = torch.tensor([0.0, 3.0, 2 * math.pi])
    assert torch.allclose(roll.pitch_rate_while_rolling(env), torch.tensor([3.0, 3.0, 0.0]))
    _write_state(env, pitch=0.0, pitch_rate=-2.0, height=0.3)  # pitching backwards earns nothing
    tracker.progress[:] = 0.0
    assert torch.equal(roll.pitch_rate_while_rolling(env), torch.zeros(3))
    env.close()


def test_upright_and_inverted():
    env = _env()
    _write_state(env, pitch=0.0, pitch_rate=0.0)
    assert env.trackers["roll"].upright().all()
    _write_state(env, pitch=math.pi, pitch_rate=0.0, height=0.3)
    assert not env.trackers["roll"].upright().any()
    _write_state(env, pitch=math.radians(30), pitch_rate=0.0, height=0.3)  # beyond the 25 degree cone
    assert not env.trackers["roll"].upright().any()
    env.close()


def test_progress_integrates_the_pitch_rate_and_a_landing_counts_once():
    env = _env(2)
    _write_state(env, pitch=0.0, pitch_rate=4.0, height=0.4)  # airborne, pitching forward at 4 rad/s
    env.trackers["roll"].reset(torch.arange(2))
    env.step(torch.zeros(2, 14))
    assert torch.allclose(env.trackers["roll"].progress, torch.full((2,), 4.0 * env.step_dt), rtol=0.15)

    _write_state(env, pitch=0.0, pitch_rate=0.0)  # standing on both feet
    tracker = env.trackers["roll"]
    tracker.reset(torch.arange(2))
    tracker.progress[0] = 2 * math.pi  # world 0 has just completed a roll, world 1 never rolled
    bonus, landed = [], []
    for _ in range(int(roll.SETTLE_S / env.step_dt) + 5):
        env.step(torch.zeros(2, 14))
        landed.append(roll.landed_upright(env))
        bonus.append(env.reward_terms["roll_success"] > 0)
    landed, bonus = torch.stack(landed), torch.stack(bonus)  # (T, 2)
    assert landed[1:, 0].all() and not landed[:, 1].any()  # (the spawn is 3 mm up: the first step lands)
    assert bonus[:, 0].sum() == 1 and not bonus[:, 1].any()  # the success bonus is paid exactly once
    assert tracker.success.tolist() == [True, False]
    env.close()


def test_mid_roll_starts_set_the_accumulated_pitch():
    env = gym.make(TASK, num_envs=64).unwrapped
    env.reset(seed=5)
    tracker = env.trackers["roll"]
    started = tracker.progress > 0.5  # ~30% start mid-roll with 1-5 rad of pitch
    assert 5 <= int(started.sum()) <= 40
    assert (env.state.qvel[started, 4] >= 3.5).all()
    env.close()


def test_a_name_with_a_folder_part_is_a_one_line_error(tmp_path, capsys):
    from flashnerd.cli.main import main

    for command in (["bench", "finetune", "--task", TASK], ["bench", "ppo", "--task", TASK]):
        assert main([*command, "--out_dir", str(tmp_path), "--name", "runs/ft"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--name must be a plain file name stem" in err[0]
    assert list(tmp_path.iterdir()) == []  # nothing trained, nothing written


def test_finetune_means_leave_out_a_figure_the_task_does_not_have():
    from flashnerd.cli.bench.finetune import mean_or_none

    assert mean_or_none([0.5, 1.0]) == 0.75 and mean_or_none([None, None]) is None and mean_or_none([0.5, None]) is None


def test_finetune_comparison_runs_end_to_end(tmp_path):
    import json

    from flashnerd.cli.main import main

    out = tmp_path / "ft"
    assert main(["bench", "finetune", "--task", TASK, "--dynamics", "mujoco", "--pretrain_iterations", "1",
                 "--iterations", "1", "--seeds", "2", "--num_envs", "4", "--eval_episodes", "2",
                 "--out_dir", str(out), "--name", "ft"]) == 0
    summary = json.loads((out / "ft.json").read_text())
    result = summary["backends"]["mujoco"]
    assert len(result["runs"]) == 2 and result["seconds_per_100_iterations"] > 0
    assert 0.0 <= result["success_rate"] <= 1.0
    assert all(0.0 <= r["fall_rate"] <= 1.0 for r in (*result["runs"], summary["pretrained_eval"]))
    assert result["fall_rate"] == pytest.approx(sum(r["fall_rate"] for r in result["runs"]) / 2)
    assert (out / "ft.png").read_bytes()[:4] == b"\x89PNG"
    # Policies are judged from standing starts (the Play variant has no mid-roll starts), the pretrained one too.
    assert summary["eval_task"] == "FlashNeRD-Roll-Flat-Microduck-Play-v0"
    assert 0.0 <= summary["pretrained_eval"]["success_rate"] <= 1.0
    # The results page renders it: a row per backend plus the pretrained policy, and the chart.
    from flashnerd.viz.report import render_block

    shutil.copy(out / "ft.json", out / "microduck_finetune_t.json")
    text = render_block("microduck_finetune_t", out)
    assert "| `mujoco` |" in text and "(pretrained, not fine-tuned)" in text and "1.00x" in text
    assert (out / "microduck_finetune_t.png").read_bytes()[:4] == b"\x89PNG"
    # A task without a success measure (the velocity task) has no success cell, and its falls are shown.
    for r in (summary["backends"]["mujoco"], summary["pretrained_eval"]):
        r["success_rate"], r["fall_rate"] = None, 0.25
    (out / "microduck_finetune_t.json").write_text(json.dumps(summary))
    rows = [line for line in render_block("microduck_finetune_t", out).splitlines() if line.startswith("| `mujoco`")
            or line.startswith("| (pretrained")]
    assert len(rows) == 2 and all(row.split("|")[4].strip() == "-" and row.split("|")[6].strip() == "25.0%"
                                  for row in rows)

