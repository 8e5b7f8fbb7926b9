"""`flashnerd improve`: rounds of PPO on the model, rollouts in the target system and refits, resumable."""

from __future__ import annotations

import json
from pathlib import Path

from flashnerd.cli.main import main
from flashnerd.models.checkpoint import read_checkpoint

TASK = "FlashNeRD-Velocity-Flat-Anymal-C-v0"


def _argv(out, rounds: int) -> list[str]:
    return ["improve", "--task", TASK, "--rounds", str(rounds), "--iterations", "1", "--num_envs", "8",
            "--target_minutes", "0.05", "--target_worlds", "4", "--traj_len", "20", "--fit_budget", "2",
            "--eval_episodes", "2", "--contact_head_steps", "20", "--out_dir", str(out)]


def test_improve_runs_rounds_keeps_each_and_resumes_where_it_stopped(tmp_path, capsys, short_episodes):
    import flashnerd.cli.improve as improve

    short_episodes(improve)
    out = tmp_path / "improve"
    assert main(_argv(out, 1)) == 0
    table = json.loads((out / "improve.json").read_text())
    (row,) = table["rounds"]
    assert row["model"].endswith("checkpoints/anymal_c/flashnerd.safetensors")  # round 0 starts from the shipped
    assert (out / "round_0" / "policy.pt").is_file() and (out / "round_0" / "model.safetensors").is_file()
    (lineage,) = row["lineages"]
    assert lineage["target_seconds"] == 4 * 40 * 0.02 and lineage["transitions"] == 4 * 40  # 3 s asked: 2 traj.
    assert set(lineage["eval"]) == {"model", "target"} and lineage["eval"]["target"]["episodes"] == 2
    assert set(row["nrmse_held_out"]["nrmse_after"]) and (out / "improve.png").is_file()
    assert isinstance(row["stopped_early"], bool) and 0 <= row["best_step"] <= row["fit_steps"]  # patience 5
    policy_time = (out / "round_0" / "policy.pt").stat().st_mtime_ns
    capsys.readouterr()
    # a run stopped before --algo, --patience and several lineages existed (one policy setting, the lineage's fields
    # flat in the row) resumes as PPO along one lineage with the patience its refits had (5)
    flat_row = {**{k: v for k, v in row.items() if k != "lineages"}, **lineage}
    older = {**table, "rounds": [flat_row],
             "settings": {**{k: v for k, v in table["settings"].items()
                             if k not in ("algo", "shac_horizon", "patience")},
                          "policy": None}}
    (out / "improve.json").write_text(json.dumps(older))
    assert main([*_argv(out, 1), "--resume"]) == 0
    assert json.loads((out / "improve.json").read_text())["rounds"][0]["lineages"] == [lineage]
    capsys.readouterr()
    assert main([*_argv(out, 1), "--resume", "--patience", "0"]) == 2
    assert "other settings than the stopped run (patience)" in capsys.readouterr().err

    assert main(_argv(out, 1)) == 2 and "add --resume" in capsys.readouterr().err
    assert main([*_argv(out, 2), "--resume"]) == 0  # round 0 is kept, round 1 starts from its model and policy
    table = json.loads((out / "improve.json").read_text())
    assert [r["round"] for r in table["rounds"]] == [0, 1]
    assert table["rounds"][1]["model"] == table["rounds"][0]["next_model"]
    assert table["rounds"][1]["lineages"][0]["policy"] == str(out / "round_1" / "policy.pt")
    assert (out / "round_0" / "policy.pt").stat().st_mtime_ns == policy_time
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(printed["rounds"]) == 2
    assert main([*_argv(out, 2), "--resume", "--fit_budget", "3"]) == 2 and "fit_budget" in capsys.readouterr().err


def test_improve_trains_every_lineage_and_refits_on_all_their_rollouts(tmp_path, capsys, monkeypatch,
                                                                       short_episodes):
    import flashnerd.cli.improve as improve

    short_episodes(improve)
    starts, fits, patience, train = [], [], [], improve.train_policy
    monkeypatch.setattr(improve, "train_policy",
                        lambda *a, init=None, **kw: (starts.append(init), train(*a, init=init, **kw))[1])
    adapt = improve.adapt_model
    monkeypatch.setattr(improve, "adapt_model", lambda data, *a, **k: (fits.append(list(data)),
                                                                     patience.append(k["patience"]),
                                                                     adapt(data, *a, **k))[2])
    first = tmp_path / "first"
    assert main(_argv(first, 1)) == 0
    policies = [str(first / "round_0" / "policy.pt"), str(tmp_path / "b.pt")]
    Path(policies[1]).write_bytes(Path(policies[0]).read_bytes())
    assert patience == [5]  # the refits stop as `fit --init` does by default
    starts.clear(), fits.clear(), patience.clear()
    out = tmp_path / "two"
    assert main([*_argv(out, 2), "--policy", *policies, "--patience", "0"]) == 0
    assert patience == [0, 0]  # every refit runs its whole --fit_budget, and says so
    first_refit = json.loads((out / "improve.json").read_text())["rounds"][0]
    assert read_checkpoint(first_refit["next_model"])["fit_config"]["patience"] == 0
    assert "stopped_early" not in first_refit
    rounds = json.loads((out / "improve.json").read_text())["rounds"]
    own = [[str(out / f"round_{r}" / f"lineage_{k}" / "policy.pt") for k in (0, 1)] for r in (0, 1)]
    assert starts == [*policies, *own[0]]  # each lineage goes on from its own last policy
    assert [[x["policy"] for x in row["lineages"]] for row in rounds] == own
    # the 3 s of target time per round are split among the lineages: 1.5 s each, one 20-step trajectory of 4 worlds
    assert all(x["target_seconds"] == 4 * 20 * 0.02 for row in rounds for x in row["lineages"])
    data = [[x["data"] for x in row["lineages"]] for row in rounds]
    assert fits == [data[0], data[0] + data[1]]  # one refit per round, on every lineage's rollouts so far
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [len(r["lineages"]) for r in printed["rounds"]] == [2, 2]
    assert main([*_argv(tmp_path / "dup", 1), "--policy", policies[0], policies[0]]) == 2
    assert "twice" in capsys.readouterr().err


def test_improve_restarts_every_round_from_the_given_policies_when_asked(tmp_path, capsys, monkeypatch):
    import flashnerd.cli.improve as improve

    starts = []
    fake_eval = {where: {"mean_return": 1.0, "fall_rate": 0.0} for where in ("model", "target")}

    def fake_train(args, model, start, folder, seed):
        starts.append(start)
        return {"policy": str(folder / "policy.pt"), "eval": fake_eval}

    monkeypatch.setattr(improve, "_train", fake_train)
    monkeypatch.setattr(improve, "_roll_out", lambda args, policy, folder, minutes, seed: {"data": f"{folder}.h5"})
    monkeypatch.setattr(improve, "_refit", lambda args, model, data, out: {"next_model": str(out)})
    policies = [str(tmp_path / n) for n in ("a.pt", "b.pt")]
    for path in policies:
        Path(path).write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert main([*_argv("r", 2), "--policy", *policies, "--restart_from_policy"]) == 0
    # the same folder spelled as an absolute path resumes the run: one more round, the first two kept
    assert main([*_argv(tmp_path / "r", 3), "--policy", *policies, "--restart_from_policy", "--resume"]) == 0
    assert starts == policies * 3
    state = json.loads((tmp_path / "r" / "improve.json").read_text())
    rows = state["rounds"]
    for rounds in ({}, [5], [{**rows[0], "lineages": 3}], [{**rows[0], "round": 1}], [{**rows[0], "lineages": [
            {**rows[0]["lineages"][0], "eval": {"model": {}}}]}], [{**rows[0], "model": None}]):
        (tmp_path / "r" / "improve.json").write_text(json.dumps({**state, "rounds": rounds}))
        assert main([*_argv(tmp_path / "r", 3), "--policy", *policies, "--restart_from_policy", "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        damaged = ("not those of a `flashnerd improve` run", "not the list this command writes (edited or damaged)")
        assert any(m in err for m in damaged) and len(err.splitlines()) == 1, err
    assert main([*_argv(tmp_path / "s", 1), "--restart_from_policy"]) == 2
    err = capsys.readouterr().err.strip()
    assert "give the pretrained checkpoint" in err and len(err.splitlines()) == 1


def test_improve_stopped_in_its_first_stage_resumes_and_fewer_rounds_keep_the_later_ones(tmp_path, capsys,
                                                                                            monkeypatch):
    import flashnerd.cli.improve as improve

    calls = {"train": 0, "refit": 0}
    fake_eval = {where: {"mean_return": 1.0, "fall_rate": 0.0} for where in ("model", "target")}

    def fake_train(args, model, start, folder, seed):
        calls["train"] += 1
        if calls["train"] <= 2:
            raise KeyboardInterrupt  # stopped during round 0's PPO, before any stage finished
        return {"policy": str(folder / "policy.pt"), "eval": fake_eval}

    def fake_refit(args, model, data, out):
        calls["refit"] += 1
        return {"next_model": str(out)}

    monkeypatch.setattr(improve, "_train", fake_train)
    monkeypatch.setattr(improve, "_roll_out", lambda args, policy, folder, minutes, seed: {"data": f"{folder}.h5"})
    monkeypatch.setattr(improve, "_refit", fake_refit)
    out = tmp_path / "r"
    assert main(_argv(out, 2)) == 130
    assert "with --resume continues it" in capsys.readouterr().err
    assert json.loads((out / "improve.json").read_text())["rounds"] == []  # the state exists: --resume finds it
    assert main(_argv(out, 2)) == 130  # no stage finished: a new run may start over it (e.g. with other settings)
    assert main([*_argv(out, 2), "--resume"]) == 0 and calls == {"train": 4, "refit": 2}
    assert main(_argv(out, 2)) == 2 and "add --resume" in capsys.readouterr().err  # stages done: kept
    capsys.readouterr()
    assert main([*_argv(out, 1), "--resume"]) == 0  # shows one round, keeps the second
    assert len(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rounds"]) == 1
    assert len(json.loads((out / "improve.json").read_text())["rounds"]) == 2
    assert main([*_argv(out, 2), "--resume"]) == 0 and calls == {"train": 4, "refit": 2}  # nothing redone
    # a lineage's start policy replaced by another file under the same name: refused before any stage
    capsys.readouterr()
    policy = tmp_path / "start.pt"
    policy.write_bytes(b"a")
    argv = [*_argv(tmp_path / "p", 1), "--policy", str(policy)]
    assert main(argv) == 0
    policy.write_bytes(b"b")
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"'{policy}' is not the file this run started from" in err and len(err.splitlines()) == 1, err
    assert calls["train"] == 5


def test_improve_refuses_bad_settings_before_any_work(tmp_path, capsys):
    base = _argv(tmp_path / "x", 1)
    assert main([*base, "--target_minutes", "0"]) == 2 and "--target_minutes" in capsys.readouterr().err
    assert main([*base, "--patience", "-1"]) == 2 and "--patience must be >= 0" in capsys.readouterr().err
    assert main([*base, "--dynamics_checkpoint", str(tmp_path / "none.safetensors")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main([*base, "--resume"]) == 2 and "does not exist" in capsys.readouterr().err
    (tmp_path / "x").mkdir()
    for text, message in (("{not json", "is not readable JSON"), ("[1, 2]", "holds no run state"),
                          ('{"settings": 3}', "holds no run state"), ("\udcff", "is not readable JSON")):
        (tmp_path / "x" / "improve.json").write_text(text, errors="surrogateescape")
        assert main([*base, "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "x" / "round_0").exists()


def test_improve_with_shac_starts_each_round_from_the_last_policy(tmp_path, capsys, monkeypatch, short_episodes):
    import flashnerd.cli.improve as improve

    short_episodes(improve)
    from flashnerd.envs.rsl_rl import read_policy_checkpoint
    from flashnerd.envs.shac import ShacTrainer

    starts, init_from = [], ShacTrainer.init_from
    monkeypatch.setattr(ShacTrainer, "init_from", lambda self, path: (starts.append(path), init_from(self, path)))
    out = tmp_path / "shac"
    argv = [*_argv(out, 2), "--algo", "shac", "--shac_horizon", "4"]
    assert main(argv) == 0
    assert starts == [str(out / "round_0" / "policy.pt")]  # round 0 from scratch, round 1 from round 0's policy
    table = json.loads((out / "improve.json").read_text())
    assert [r["lineages"][0]["algo"] for r in table["rounds"]] == ["shac", "shac"]
    rounds = [read_policy_checkpoint(str(out / f"round_{r}" / "policy.pt")) for r in (0, 1)]
    assert all(c["algo"] == "shac" and c["iter"] == 0 for c in rounds)  # one iteration, counted from zero each round
    assert (out / "round_1" / "shac").is_dir() and not (out / "round_1" / "ppo").exists()
    assert set(table["rounds"][1]["lineages"][0]["eval"]) == {"model", "target"}
    capsys.readouterr()
    assert main([*_argv(tmp_path / "y", 1), "--shac_horizon", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "add --algo shac" in err and len(err.splitlines()) == 1


def test_improve_applies_overrides_to_every_stage_and_resumes_only_with_the_same(tmp_path, capsys, short_episodes):
    """A policy trained without an observation term is evaluated and rolled out with that term gone too (its rollouts
    would fail on the task's full observations); the overrides are settings of the run; fields improve sets itself,
    SHAC's without --algo shac and unknown keys are refused before any work."""
    import flashnerd.cli.improve as improve

    short_episodes(improve)
    out = tmp_path / "improve"
    items = ["env.observations.policy.terms.base_lin_vel=null", "agent.num_steps_per_env=4"]
    assert main([*_argv(out, 1), *items]) == 0
    table = json.loads((out / "improve.json").read_text())
    assert table["settings"]["overrides"] == items
    (lineage,) = table["rounds"][0]["lineages"]
    assert lineage["transitions"] == 4 * 40 and lineage["eval"]["target"]["episodes"] == 2
    capsys.readouterr()
    assert main([*_argv(out, 2), items[0], "--resume"]) == 2  # one override fewer: not the same run
    assert "overrides" in capsys.readouterr().err
    bad = _argv(tmp_path / "bad", 1)
    for extra, message in ((["agent.max_iterations=3"], "set with --iterations"),
                           (["env.terrain=rough"], "is not free here"),
                           (["shac.horizon=8"], "add --algo shac"),
                           (["env.rewardz.x=1"], "did you mean rewards")):
        assert main([*bad, *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "bad").exists()


def test_the_target_evaluation_takes_the_overrides_once_with_or_without_a_play_variant():
    import argparse

    import flashnerd_tasks  # noqa: F401
    from flashnerd.cli.improve import _apply, _target_cfg
    from flashnerd.envs.registry import task_cfgs

    for task, term in ((TASK, "feet_air_time"), ("FlashNeRD-Reorient-Cube-Allegro-v0", "joint_vel_l2")):
        pushes = ["env.events.push_robot.interval_range_s=[5.0,8.0]"] if task == TASK else []  # -Play- has none
        args = argparse.Namespace(task=task, robot_variant=None, overrides=[f"env.rewards.{term}=null", *pushes])
        env_cfg, agent_cfg = task_cfgs(task)
        _apply(args, env_cfg, agent_cfg)
        name, cfg = _target_cfg(args, env_cfg)  # a term dropped twice would be an error
        assert term not in cfg.rewards and (name != task) == task.startswith("FlashNeRD-Velocity")
        assert "push_robot" not in cfg.events
        assert not pushes or env_cfg.events["push_robot"].interval_range_s == (5.0, 8.0)


def test_a_resume_names_the_same_files_in_other_spellings(tmp_path, monkeypatch):
    """Settings that name files compare as resolved paths on --resume (relative, with `./`, absolute, a robot's spec
    file), while another file, another robot name or another plain value is still refused."""
    import pytest

    from flashnerd.cli.common import CLIError, run_state

    monkeypatch.chdir(tmp_path)
    state = tmp_path / "run.json"
    started = {"out_dir": "out", "data": ["a.h5", "b.h5"], "dynamics_checkpoint": "m.safetensors",
               "robot": "robots/hound.yaml", "robot_variant": None, "rounds": 2}
    state.write_text(json.dumps({"settings": started, "rounds": []}))
    same = {"out_dir": str(tmp_path / "out"), "data": ["./a.h5", str(tmp_path / "b.h5")],
            "dynamics_checkpoint": "./m.safetensors", "robot": str(tmp_path / "robots" / "hound.yaml"),
            "robot_variant": None, "rounds": 2}
    assert run_state(state, same, True, {"rounds": []})["settings"] == started
    for key, other in (("data", ["b.h5", "a.h5"]), ("dynamics_checkpoint", "n.safetensors"), ("robot", "hound"),
                       ("robot_variant", "v.yaml"), ("rounds", 3)):
        with pytest.raises(CLIError, match=rf"other settings than the stopped run \({key}\)"):
            run_state(state, {**same, key: other}, True, {"rounds": []})
