"""Adaptation (`flashnerd fit --init ... --mix_data ... --patience ...`): a model fitted on the nominal robot refitted
on a variant's data. Batches mix the two at the stated share, validation is held-out variant data alone, early
stopping keeps the best step, and the card's before/after NRMSE is that of `evaluate-model`-style rollouts."""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path

import pytest
from conftest import record_nominal_and_worn

from flashnerd.cli.main import main
from flashnerd.data.dataset import load_dataset
from flashnerd.data.record import record
from flashnerd.dynamics import make_dynamics
from flashnerd.envs.registry import task_cfgs
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.robots import get_robot
from flashnerd.robots.variant import load_variant
from flashnerd.training.evaluate import rollout_errors
from flashnerd.training.fit import FitConfig, Fitter

SMALL = dict(batch_size=8, ar_batch_size=4, window=8, eval_every=2, ar_history=4, ar_steps=2)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A nominal model fitted briefly on nominal data, and data of the worn variant."""
    root = tmp_path_factory.mktemp("adapt")
    record_nominal_and_worn(root, nominal_worlds=6, worn_worlds=10, steps=40)
    cfg = dataclasses.replace(FitConfig(), max_steps=6, **SMALL)
    Fitter(root / "sim.h5", cfg).fit(root / "sim.safetensors", progress=False)
    return root


def test_a_batch_draws_the_stated_share_from_the_mixed_in_data(fitted):
    cfg = dataclasses.replace(FitConfig(), max_steps=1, mix_data=(str(fitted / "sim.h5"),), mix=0.3, **SMALL)
    fitter = Fitter(fitted / "worn.h5", cfg)
    own = fitter.xn_tr.shape[0] - 12  # the 12 simulation trajectories follow the variant's training ones
    traj, _ = fitter._sample_windows(fitter.xn_tr.shape[0], fitter.xn_tr.shape[1], 8, 20_000, fitter.gen,
                                     fitter.train_weights)
    share = (traj[:, 0] >= own).float().mean().item()
    assert share == pytest.approx(0.3, abs=0.015)
    assert fitter.val.num_trajectories == 2  # 10% of the variant's 20 trajectories, none of the simulation's
    assert load_dataset(fitted / "worn.h5").attrs["variants"] == ["anymal_c_worn"]


def test_early_stopping_keeps_the_best_step_and_the_card_has_before_and_after(fitted):
    out = fitted / "adapted.safetensors"
    cfg = dataclasses.replace(FitConfig(), max_steps=40, lr=3e-2, warmup_steps=1, patience=2,
                              init=str(fitted / "sim.safetensors"), mix_data=(str(fitted / "sim.h5"),), **SMALL)
    fitter = Fitter(fitted / "worn.h5", cfg)
    fitter.init_from(fitted / "sim.safetensors")
    result = fitter.fit(out, progress=False)
    report = fitter.adaptation_report(fitted / "sim.safetensors", out, horizons=(1, 15))
    ckpt = read_checkpoint(out)
    losses = [h["val_loss"] for h in fitter.history]  # every validation (the checkpoint's history ends at its step)
    best = fitter.history[losses.index(min(losses))]
    assert ckpt["step"] == best["step"] == result["best_step"]  # `out` holds the best validation, not the last
    if result["stopped_early"]:
        assert len(losses) - 1 - losses.index(min(losses)) == 2 and result["steps"] < 40
    assert ckpt["adaptation"] == report and ckpt["data"]["mix"] == 0.1
    # the card's figures are those of rollouts of each checkpoint on the held-out variant trajectories
    val = fitter.val
    for name, path in (("before", fitted / "sim.safetensors"), ("after", out)):
        dyn = make_dynamics("flashnerd", get_robot("anymal_c"), val.num_trajectories, checkpoint=str(path))
        errors = rollout_errors(dyn, val, [1, 15])
        assert report[f"nrmse_{name}"]["15"] == pytest.approx(errors[15]["nrmse"], rel=1e-5)


@pytest.mark.parametrize("extra, message", [
    (["--mix", "0.4"], "--mix sets the share of --mix_data"),
    (["--mix_data", "{sim}", "--mix", "1.0"], "--mix must lie in [0, 1)"),
    (["--patience", "-1"], "--patience must be >= 0"),
])
def test_bad_adaptation_flags_are_one_line_errors(fitted, extra, message, capsys):
    argv = ["fit", "--data", str(fitted / "worn.h5"), "--out", str(fitted / "bad.safetensors"),
            *[e.replace("{sim}", str(fitted / "sim.h5")) for e in extra]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_mixed_in_data_of_another_trajectory_length_is_refused(fitted, tmp_path):
    record(get_robot("anymal_c"), num_worlds=2, steps=30, out=tmp_path / "long.h5", traj_len=30, seed=3,
           progress=False)
    cfg = dataclasses.replace(FitConfig(), max_steps=1, mix_data=(str(tmp_path / "long.h5"),), **SMALL)
    with pytest.raises(ValueError, match="has 30-step trajectories, --data 20"):
        Fitter(fitted / "worn.h5", cfg)


def test_bench_reality_gap_runs_the_loop_a_lab_runs(tmp_path, capsys, monkeypatch, short_episodes):
    """Tiny settings: every stage runs (safe policy, robot log written and imported, adaptation, two rounds of PPO on
    the model with the first round's rollouts on the robot logged, imported and refitted on, evaluation in the variant,
    the baseline randomized over the variant's ranges) and the JSON and the plot are written. The robot is the
    variant's fixed values; the randomized baseline trains on its ranges alone; baselines train as many iterations as
    the last round's policy has behind it. --resume reruns only the stages the JSON lacks."""
    import json
    import os

    import flashnerd.cli.bench.reality_gap as reality_gap

    short_episodes(reality_gap)
    monkeypatch.setattr(reality_gap, "HELD_OUT_MINUTES", 0.2)
    out = tmp_path / "rg"
    argv = ["bench", "reality-gap", "--robot_variant", "variants/anymal_c_worn_dr.yaml", "--real_minutes", "0.4",
            "--iterations", "1", "--num_envs", "4", "--eval_episodes", "2", "--robot_worlds", "2",
            "--mix", "0.3", "--sim_minutes", "0.1", "--fit_budget", "1", "--refit_budget", "1", "--traj_len", "20",
            "--contact_head_steps", "20", "--start_policy", "scratch", "--out_dir", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "reality_gap.json").read_text())
    assert set(summary["baselines"]) == {"nominal", "oracle", "randomized"} and (out / "reality_gap.png").is_file()
    assert all(b["iterations"] == 2 for b in summary["baselines"].values())
    worn, ranges = load_variant("variants/anymal_c_worn_dr.yaml"), load_variant(out / "anymal_c_worn_dr_ranges.yaml")
    assert load_variant(out / "anymal_c_worn_dr_robot.yaml").spec == worn.fixed().spec
    assert ranges.randomized == worn.randomized and "effort_scale" not in str(ranges.spec.get("joints"))
    budget = summary["budgets"][0]
    assert budget["logged"]["import"]["minutes"] == pytest.approx(0.2)  # half the budget: the safe policy's logs
    assert (out / "0.4min" / "robot_log.parquet").is_file()
    logged = load_dataset(out / "0.4min" / "robot.h5").attrs
    assert logged["variants"] == ["anymal_c_worn_dr_robot"] and "randomize" not in logged["variant"]  # one robot
    assert set(budget["nrmse_held_out"]) == {"nrmse_before", "nrmse_after"}
    assert read_checkpoint(out / "0.4min" / "adapted.safetensors")["adaptation"] == budget["nrmse_card"]
    # the worn drives (kp 0.75x, limits 0.7x) identified from the logs' torque, their card in the run's JSON
    card = read_checkpoint(out / "0.4min" / "adapted.safetensors")["actuators"]["card"]
    assert budget["actuators"] == {k: v for k, v in card.items() if k != "data"}
    assert budget["actuators"]["torque_nrmse_identified"] < budget["actuators"]["torque_nrmse_nominal"]
    first, last = budget["rounds"]
    assert first["model"] == budget["adapted"] and last["model"] == first["next_model"] != first["model"]
    assert first["rollouts"]["import"]["minutes"] == pytest.approx(0.2)
    assert budget["robot_minutes"] == pytest.approx(0.4) and first["rollouts"]["robot_minutes"] == pytest.approx(0.2)
    rollouts = load_dataset(out / "0.4min" / "round_0" / "robot.h5").attrs
    assert rollouts["variants"] == ["anymal_c_worn_dr_robot"]
    assert read_checkpoint(first["next_model"])["adaptation"]["init"] == first["model"]
    assert budget["eval_variant"] == last["eval_variant"] and "eval_model" in last and "rollouts" not in last
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["budgets"]["0.4"] == budget["eval_variant"]["mean_return"]

    from flashnerd.viz.report import render_block

    block = render_block("reality_gap", out)  # the results page's table: 3 baselines, 2 rounds, 3 models' errors
    assert all(f"| {r['train_wall_s']:.0f} | {r['eval_variant']['mean_return']:.1f} |" in block
               for r in [*summary["baselines"].values(), first, last])
    assert block.count("-min budget, round") == 2 and block.count("refitted after round 0") == 1

    # a run stopped before its last round: --resume finishes that round alone (from its last checkpoint), from the
    # stages it kept, and runs a
    # budget it is given beside it (half of 0.2 min is 7 trajectories of 20 steps on each of 2 robots)
    for key in ("eval_variant", "robot_minutes", "ppo_wall_s"):
        del budget[key]
    del budget["rounds"][1]
    for key in ("safe_policy", "start_policy", "baseline_iterations"):  # a file from before these options resumes
        del summary["settings"][key]  # as the nominal policy's run, round 0 from scratch, baselines rounds x iterations
    (out / "reality_gap.json").write_text(json.dumps(summary))
    assert render_block("reality_gap", out).count("-min budget, round") == 1  # a run still going: what is done
    kept = {p: os.stat(p).st_mtime_ns for p in (summary["baselines"]["oracle"]["policy"], first["policy"],
                                                  first["next_model"], budget["adapted"], budget["logged"]["dataset"],
                                                  first["rollouts"]["dataset"], summary["held_out"]["dataset"])}
    assert main(argv) == 2 and "add --resume" in capsys.readouterr().err
    assert main([*argv[:5], "0.2", *argv[6:], "--resume"]) == 0
    resumed = json.loads((out / "reality_gap.json").read_text())
    assert {p: os.stat(p).st_mtime_ns for p in kept} == kept
    added, again = resumed["budgets"]
    assert again["minutes"] == 0.4 and again["rounds"][1]["model"] == first["next_model"] and "eval_variant" in again
    assert again["rounds"][1]["policy"] != first["policy"] and again["rounds"][1]["eval_model"]
    assert again["rounds"][1]["resumed_at"] == 1  # the stopped round's own checkpoint: its one iteration was done
    assert added["minutes"] == 0.2 and added["robot_minutes"] == pytest.approx(2 * 7 * 20 * 2 * 0.02 / 60, abs=1e-3)
    assert main([*argv, "--rounds", "3", "--resume"]) == 2
    assert "other settings than the stopped run (rounds)" in capsys.readouterr().err
    assert main([*argv, "--safe_policy", "randomized", "--resume"]) == 2
    assert "other settings than the stopped run (safe_policy)" in capsys.readouterr().err
    assert main([*argv, "--start_policy", "safe", "--resume"]) == 2
    assert "other settings than the stopped run (start_policy)" in capsys.readouterr().err
    # a file whose finished stages do not read back as written is refused at --resume, not hours into the run
    for damage in (lambda st: st["budgets"][0].update(minutes="5"), lambda st: st["baselines"].update(nominal=1),
                   lambda st: st.update(held_out="x"), lambda st: st["budgets"][0]["rounds"][0].update(round=5),
                   lambda st: st["budgets"][0]["logged"]["import"].update(minutes=float("nan"))):
        state = json.loads(json.dumps(resumed))
        damage(state)
        (out / "reality_gap.json").write_text(json.dumps(state))
        assert main([*argv, "--resume"]) == 2
        assert "stages are not those of a `flashnerd bench reality-gap` run" in capsys.readouterr().err


def test_bench_reality_gap_logs_with_the_randomized_policy(tmp_path, capsys, monkeypatch, short_episodes):
    """--safe_policy randomized: the randomized baseline trains first, and its policy (not the nominal one) drives the
    robot for the held-out logs and for the budget's first data; the results table names it the safe policy. A
    variant without randomize ranges is refused before any work."""
    import json

    import flashnerd.cli.bench.reality_gap as reality_gap
    from flashnerd.viz.report import render_block

    short_episodes(reality_gap)
    monkeypatch.setattr(reality_gap, "HELD_OUT_MINUTES", 0.2)
    drivers, real_log = [], reality_gap._robot_log

    def spy(args, variant, policy, *rest):
        drivers.append(policy)
        return real_log(args, variant, policy, *rest)

    monkeypatch.setattr(reality_gap, "_robot_log", spy)
    out = tmp_path / "rg"
    argv = ["bench", "reality-gap", "--robot_variant", "variants/anymal_c_worn_dr.yaml", "--real_minutes", "0.2",
            "--rounds", "1", "--iterations", "1", "--num_envs", "4", "--eval_episodes", "2", "--robot_worlds", "2",
            "--fit_budget", "1", "--traj_len", "20", "--contact_head_steps", "0", "--safe_policy", "randomized",
            "--start_policy", "scratch", "--out_dir", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "reality_gap.json").read_text())
    assert list(summary["baselines"]) == ["randomized", "oracle", "nominal"]
    assert drivers == [summary["baselines"]["randomized"]["policy"]] * 2  # held-out logs, then the budget's data
    block = render_block("reality_gap", out)
    assert "| PPO on MuJoCo randomized over the ranges (the safe policy) |" in block
    assert "| PPO on nominal MuJoCo |" in block
    capsys.readouterr()

    # another loop setting on the same robot takes this run's baselines and held-out logs instead of training them;
    # this one fine-tunes the safe policy in round 0, for other iterations than its baselines trained
    starts, trained_on, real_train = [], [], reality_gap.train_policy

    def train_spy(task, env_cfg, agent_cfg, log_dir, iterations, init=None, **kwargs):
        starts.append((init, iterations))
        trained_on.append((env_cfg.dynamics, env_cfg.robot_variant))
        return real_train(task, env_cfg, agent_cfg, log_dir, iterations, init=init, **kwargs)

    monkeypatch.setattr(reality_gap, "train_policy", train_spy)
    again = tmp_path / "again"
    reuse = [*[str(again) if a == str(out) else a for a in argv], "--fit_budget", "2", "--start_policy", "safe",
             "--iterations", "2", "--baseline_iterations", "1", "--baselines_from", str(out / "reality_gap.json")]
    assert main(reuse) == 0
    # round 0, then its controls (the safe policy fine-tuned as long on nominal MuJoCo and on the variant): no
    # baseline trained again
    assert starts == [(summary["baselines"]["randomized"]["policy"], 2)] * 3
    assert trained_on == [("flashnerd", None), ("mujoco", None), ("mujoco", str(again / "anymal_c_worn_dr_robot.yaml"))]
    assert "per budget (round 0 fine-tunes the safe policy), baselines 1;" in render_block("reality_gap", again)
    second = json.loads((again / "reality_gap.json").read_text())
    assert {k: {**b, "reused_from": None} for k, b in second["baselines"].items()} == \
        {k: {**b, "reused_from": None} for k, b in summary["baselines"].items()}
    assert {b["reused_from"] for b in second["baselines"].values()} == {str(out / "reality_gap.json")}
    assert second["held_out"]["dataset"] == summary["held_out"]["dataset"]
    assert not any((again / label).exists() for label in summary["baselines"])  # no PPO ran for them
    assert drivers[2:] == [summary["baselines"]["randomized"]["policy"]]  # only the budget's own data was logged
    assert "| PPO on nominal MuJoCo (reused) |" in render_block("reality_gap", again)
    controls = second["fine_tuned"]
    assert list(controls) == ["nominal", "oracle"] and all(c["iterations"] == 2 for c in controls.values())
    assert "| oracle: the safe policy fine-tuned on the variant (+2 iterations) | - |" in \
        render_block("reality_gap", again)
    assert "fine_tuned" not in summary  # round 0 from scratch: no controls
    # a run folder copied elsewhere since (another machine, a repository keeping its baselines) still lends them: the
    # files it recorded under its --out_dir are found under its JSON's folder
    moved, gone = tmp_path / "moved", str(tmp_path / "gone")
    shutil.copytree(out, moved)
    (moved / "reality_gap.json").write_text((out / "reality_gap.json").read_text().replace(str(out), gone))
    fresh = {k: v for k, v in second.items() if k != "held_out"} | {"baselines": {}}
    reality_gap._reuse_baselines(fresh, moved / "reality_gap.json", second["model_hash"])
    assert set(fresh["baselines"]) == set(summary["baselines"])
    for label, entry in fresh["baselines"].items():
        assert entry["policy"] == summary["baselines"][label]["policy"].replace(str(out), str(moved)), label
        assert Path(entry["policy"]).is_file()
    assert fresh["held_out"]["dataset"] == summary["held_out"]["dataset"].replace(str(out), str(moved))
    shutil.rmtree(moved)
    for extra, differs in ((["--seed", "1"], "seed"), (["--iterations", "2"], "baseline iterations")):
        other = tmp_path / f"other_{differs.split()[0]}"
        assert main([*[str(other) if a == str(out) else a for a in argv], *extra,
                     "--baselines_from", str(out / "reality_gap.json")]) == 2
        err = capsys.readouterr().err.strip()
        assert f"other settings ({differs}" in err and len(err.splitlines()) == 1, err
        assert not other.exists()
    (tmp_path / "broken.json").write_text("{not json")
    assert main([*argv[:-1], str(tmp_path / "b"), "--baselines_from", str(tmp_path / "broken.json")]) == 2
    assert "is not readable JSON" in capsys.readouterr().err
    for label, edit in (("oracle", lambda b: b["oracle"].update(eval_variant={})),  # figures the table needs
                        ("nominal", lambda b: b["nominal"].update(iterations=7)),
                        ("mine", lambda b: b.update(mine=b["oracle"]))):  # a label this command never writes
        edited = json.loads((out / "reality_gap.json").read_text())
        edit(edited["baselines"])
        (tmp_path / "edited.json").write_text(json.dumps(edited))
        assert main([*argv[:-1], str(tmp_path / "e"), "--baselines_from", str(tmp_path / "edited.json")]) == 2
        err = capsys.readouterr().err.strip()
        assert f"its baseline '{label}' is no finished entry" in err and len(err.splitlines()) == 1, err
        assert not (tmp_path / "e").exists()

    # a run of another variant of the same robot takes the nominal baseline alone (it never saw a variant) and
    # evaluates it in its own robot, as the earlier run evaluated its policies in its robot; the oracle, the
    # randomized baseline and the held-out logs are its own
    starts.clear()
    laggy = tmp_path / "laggy"
    assert main([*[str(laggy) if a == str(out) else a for a in argv], "--robot_variant",
                 "variants/anymal_c_laggy_dr.yaml", "--safe_policy", "nominal",
                 "--baselines_from", str(out / "reality_gap.json")]) == 0
    third, nominal = json.loads((laggy / "reality_gap.json").read_text()), summary["baselines"]["nominal"]
    assert third["baselines"]["nominal"] == {**nominal, "reused_from": str(out / "reality_gap.json"),
                                             "evaluated_here": True,
                                             "eval_variant": third["baselines"]["nominal"]["eval_variant"]}
    assert not (laggy / "nominal").exists() and len(starts) == 3  # oracle, randomized, round 0: trained here
    assert all("reused_from" not in third["baselines"][k] for k in ("oracle", "randomized"))
    assert third["held_out"]["dataset"] != summary["held_out"]["dataset"] and drivers[3:] == [nominal["policy"]] * 2
    assert "| PPO on nominal MuJoCo (the safe policy) (reused, first trained for another variant) |" in \
        render_block("reality_gap", laggy)
    settings = third["settings"]
    how = argparse.Namespace(**{k: settings[k] for k in ("task", "eval_episodes", "seed", "device", "robot")})
    for folder, robot, figures in ((out, "anymal_c_worn_dr_robot", nominal["eval_variant"]),
                                   (laggy, "anymal_c_laggy_dr_robot", third["baselines"]["nominal"]["eval_variant"])):
        study = reality_gap._Study(how, folder, {}, lambda: None, "", str(folder / f"{robot}.yaml"))
        assert study.evaluate(nominal["policy"]) == figures  # the laggy robot's figures are its own evaluation
    assert third["baselines"]["nominal"]["eval_variant"] != nominal["eval_variant"]
    # a run of another variant from before the robot model's hash cannot show it ran this robot: refused before work
    edited = json.loads((out / "reality_gap.json").read_text())
    del edited["model_hash"]
    (tmp_path / "unhashed.json").write_text(json.dumps(edited))
    assert main([*[str(tmp_path / "u") if a == str(out) else a for a in argv], "--robot_variant",
                 "variants/anymal_c_laggy_dr.yaml", "--baselines_from", str(tmp_path / "unhashed.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "predates the robot model's hash" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "u").exists()

    swap = {"variants/anymal_c_worn_dr.yaml": "variants/anymal_c_worn.yaml", str(out): str(tmp_path / "no_ranges")}
    no_ranges = [swap.get(a, a) for a in argv]  # the tiny settings: a lost check would run a short loop, not hours
    assert main(no_ranges) == 2
    assert "--safe_policy randomized needs randomize ranges" in capsys.readouterr().err
    assert not (tmp_path / "no_ranges").exists() and len(drivers) == 5


def test_the_baselines_kept_in_the_repository_still_lend_themselves(tmp_path, monkeypatch):
    """`checkpoints/anymal_c/reality_gap_worn_seed1` keeps the baselines of a finished run (its JSON and their policy
    files) so that later runs compare loop settings without hours of PPO: each baseline resolves to its file there
    and reads as a policy, and the run's robot is today's (the variant's digest and the robot model's hash); a change
    to either makes these baselines another robot's, and this test says so."""
    import json

    from flashnerd.cli.bench.reality_gap import _reuse_baselines
    from flashnerd.envs.rsl_rl import read_policy_checkpoint
    from flashnerd.sim.scene import variant_robot

    root = Path(__file__).resolve().parents[1]
    path = root / "checkpoints" / "anymal_c" / "reality_gap_worn_seed1" / "reality_gap.json"
    kept = json.loads(path.read_text())
    monkeypatch.chdir(root)  # the variant's path in the JSON is the repository's
    env_cfg, _ = task_cfgs(kept["task"], robot_variant=kept["robot_variant"])
    robot = variant_robot(env_cfg.robot, kept["robot_variant"])
    assert kept["model_hash"] == robot.model_hash() and kept["variant"]["digest"] == robot.variant.digest()
    fresh = {k: v for k, v in kept.items() if k not in ("held_out", "budgets", "fine_tuned")} | {"baselines": {}}
    monkeypatch.chdir(tmp_path)  # away from the run's own folder (logs/ is no clone's): the kept files must serve
    _reuse_baselines(fresh, path, robot.model_hash())
    assert set(fresh["baselines"]) == set(kept["baselines"]) >= {"nominal", "oracle"}
    for label, entry in fresh["baselines"].items():
        assert Path(entry["policy"]) == path.parent / label / "policy.pt", label
        assert read_policy_checkpoint(entry["policy"])["iter"] + 1 == kept["baseline_iterations"], label


def test_a_resumed_reality_gap_run_refuses_another_adapted_model_or_robot(tmp_path):
    """A new run records the robot model's hash and the adapted model's digest; every resume must find the same. A run
    stopped before them gets the digest at its first resume, and no robot hash (its baselines predate it)."""
    from flashnerd.cli.bench.reality_gap import _check_same_models
    from flashnerd.cli.common import CLIError, checkpoint_sha256

    first, second = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    first.write_bytes(b"model a")
    second.write_bytes(b"model b")
    state = {}
    _check_same_models(state, "robot1", str(first), resume=False)
    assert state == {"model_hash": "robot1", "init_sha256": checkpoint_sha256(str(first))}
    _check_same_models(state, "robot1", str(first), resume=True)  # the same files: resumes
    with pytest.raises(CLIError, match="is not the file it started from"):
        _check_same_models(state, "robot1", str(second), resume=True)
    with pytest.raises(CLIError, match="robot model changed"):
        _check_same_models(state, "robot2", str(first), resume=True)
    old = {}  # stopped before either field was recorded
    _check_same_models(old, "robot1", str(second), resume=True)
    assert old == {"init_sha256": checkpoint_sha256(str(second))}


def test_a_reality_gap_run_stopped_in_its_first_ppo_resumes(tmp_path, capsys, monkeypatch):
    """The run's JSON is written before its first stage, so a run stopped in the safe baseline's PPO (its longest
    stage) continues with --resume instead of refusing it."""
    import json

    import flashnerd.cli.bench.reality_gap as reality_gap

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(reality_gap, "train_policy", stopped)
    out = tmp_path / "rg"
    argv = ["bench", "reality-gap", "--robot_variant", "variants/anymal_c_worn.yaml", "--real_minutes", "0.2",
            "--rounds", "1", "--iterations", "1", "--num_envs", "4", "--eval_episodes", "2", "--robot_worlds", "2",
            "--fit_budget", "1", "--traj_len", "20", "--contact_head_steps", "0", "--out_dir", str(out)]
    assert main(argv) == 130
    state = json.loads((out / "reality_gap.json").read_text())
    assert state["baselines"] == {} and state["budgets"] == []
    # by default round 0 fine-tunes the safe policy for FINE_TUNE_ITERATIONS a round, and the baselines train the
    # task's iterations once per round (what a last round trained from scratch would have behind it)
    _, agent_cfg = task_cfgs("FlashNeRD-Velocity-Flat-Anymal-C-v0")
    assert state["settings"]["start_policy"] == "safe" and state["iterations_per_round"] == 1
    assert state["baseline_iterations"] == agent_cfg.max_iterations
    default = tmp_path / "default"
    assert main(["bench", "reality-gap", "--robot_variant", "variants/anymal_c_worn.yaml", "--real_minutes", "0.2",
                 "--out_dir", str(default)]) == 130
    state = json.loads((default / "reality_gap.json").read_text())
    assert state["iterations_per_round"] == reality_gap.FINE_TUNE_ITERATIONS
    assert state["baseline_iterations"] == 2 * agent_cfg.max_iterations
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 130  # past the state check, into the same PPO stage again
    assert "with --resume continues it" in capsys.readouterr().err
