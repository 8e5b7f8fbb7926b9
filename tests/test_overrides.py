"""Config overrides on the command line (`env.rewards.x.weight=0.5`, `agent.algorithm.learning_rate=3e-4`)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

import flashnerd_tasks  # noqa: F401
from flashnerd.cli.common import CLIError
from flashnerd.cli.main import main
from flashnerd.cli.overrides import apply_overrides
from flashnerd.envs.registry import task_cfgs
from flashnerd.envs.shac import ShacCfg

TASK = "FlashNeRD-Velocity-Flat-Anymal-C-v0"


@pytest.fixture
def cfgs():
    env_cfg, agent_cfg = task_cfgs(TASK)
    return {"env": env_cfg, "agent": agent_cfg, "shac": ShacCfg()}


def test_each_kind_of_field_takes_a_value_of_its_type(cfgs):
    env, agent, shac = cfgs["env"], cfgs["agent"], cfgs["shac"]
    applied = apply_overrides(cfgs, [
        "env.rewards.feet_air_time.weight=0.5",            # float
        "env.rewards.track_lin_vel_xy_exp.params.std=1",   # an entry of a term's params, an int where a float was
        "agent.num_steps_per_env=16",                      # int
        "agent.policy.actor_obs_normalization=true",       # bool
        "env.commands.lin_vel_x=[0.5, 1.0]",               # tuple
        "agent.policy.actor_hidden_dims=[64, 32]",         # list, of another length
        "agent.policy.activation=007",                     # a string field keeps the text as written
        "agent.obs_groups.critic=[policy, critic]",        # a list of strings, an entry of a typed mapping
        "agent.algorithm.learning_rate=3e-4",              # a number YAML 1.1 reads as a string
        "env.rewards.undesired_contacts=null",             # a reward term dropped
        "env.observations.policy.terms.base_lin_vel=null",  # an observation term dropped
        "shac.betas=[0.8, 0.99]",
    ])
    assert len(applied) == 12 and agent.algorithm.learning_rate == 3e-4
    assert agent.obs_groups["critic"] == ["policy", "critic"]
    assert env.rewards["feet_air_time"].weight == 0.5
    assert env.rewards["track_lin_vel_xy_exp"].params["std"] == 1.0
    assert isinstance(env.rewards["track_lin_vel_xy_exp"].params["std"], float)
    assert agent.num_steps_per_env == 16 and agent.policy.actor_obs_normalization is True
    assert env.commands.lin_vel_x == (0.5, 1.0) and agent.policy.actor_hidden_dims == [64, 32]
    assert agent.policy.activation == "007" and shac.betas == (0.8, 0.99)
    assert "undesired_contacts" not in env.rewards and "base_lin_vel" not in env.observations["policy"].terms
    assert set(env.rewards) == set(task_cfgs(TASK)[0].rewards) - {"undesired_contacts"}


def test_a_field_set_by_a_flag_is_refused_only_where_the_command_has_that_flag(cfgs):
    """eval has no --max_iterations and bench ppo no --uncertainty_penalty: there the override is the only way."""
    apply_overrides(cfgs, ["agent.max_iterations=7", "env.uncertainty_penalty=0.5", "agent.num_steps_per_env=010"],
                    flags={"num_envs": 1, "seed": None})
    assert cfgs["agent"].max_iterations == 7 and cfgs["env"].uncertainty_penalty == 0.5
    assert cfgs["agent"].num_steps_per_env == 10  # as written, not YAML 1.1's octal 8
    with pytest.raises(CLIError, match="agent.max_iterations is set with --max_iterations"):
        apply_overrides(cfgs, ["agent.max_iterations=7"], flags={"max_iterations": None})


def test_an_optional_field_is_set_and_unset_and_typed_as_declared():
    env, agent = task_cfgs("FlashNeRD-Reorient-Cube-Yaw-Allegro-v0")
    assert env.object_mass is None and agent.clip_actions is None
    apply_overrides({"env": env, "agent": agent},
                    ["env.goal.yaw_range=[0.2, 0.4]", "env.object_mass=5e-2", "env.objects=[cube]"])
    assert env.goal.yaw_range == (0.2, 0.4) and env.object_mass == 0.05 and env.objects == ("cube",)
    apply_overrides({"env": env}, ["env.goal.yaw_range=null", "env.object_mass=null"])
    assert env.goal.yaw_range is None and env.object_mass is None
    for item, message in (("env.object_mass=heavy", "env.object_mass takes a finite number or null"),
                          ("agent.clip_actions=abc", "takes a finite number or null"),
                          ("env.commands=5", "takes no value from the command line (a VelocityCommandCfg) or null"),
                          ("env.goal.yaw_range=[0.1, 0.2, 0.3]", "takes a list of 2 values"),
                          ("env.objects=[1]", "takes a list of strings"),
                          ("env.object_mass=" + "9" * 400, "takes a finite number")):
        with pytest.raises(CLIError, match=re.escape(message)):
            apply_overrides({"env": env, "agent": agent}, [item])


@pytest.mark.parametrize("item, message", [
    ("env.rewards.feet_air_tim.weight=0.5", "env.rewards has no 'feet_air_tim'; did you mean feet_air_time"),
    ("env.episode_length=10", "env has no 'episode_length'; did you mean episode_length_s"),
    ("agent.num_steps_per_env=1.5", "takes an integer"),
    ("agent.policy.actor_obs_normalization=1", "takes true or false"),
    ("env.rewards.feet_air_time.weight=high", "takes a finite number"),
    ("env.rewards.feet_air_time.weight=.inf", "takes a finite number"),
    ("env.commands.lin_vel_x=[0.5]", "takes a list of 2 values"),
    ("env.commands.lin_vel_x=[0.5, fast]", "lin_vel_x takes a list of 2 values (a finite number, a finite number)"),
    ("env.rewards.feet_air_time.func=os:system", "env.rewards.feet_air_time.func is code"),
    ("env.commands=null", "env.commands is a group of fields"),
    ("env.rewards.feet_air_time.params={a: 1}", "is a group of fields"),
    ("env.rewards.feet_air_time.params.threshold=[1]", "takes a finite number"),  # the type of the value it replaces
    ("agent.num_steps_per_env=null", "takes an integer"),
    ("env.goal.yaw_range=[0.1, 0.2]", "env.goal is not set (null) on this task"),
    ("env.goal.a.b=1", "env.goal is not set (null) on this task"),
    ("env.num_envs=0", "env.num_envs is set with --num_envs"),
    ("agent.experiment_name=/tmp/x", "agent.experiment_name is set with --experiment_name"),
    ("agent.run_name=a/../..", "is set with --run_name"),
    ("env.dynamics_kwargs.checkpoint=x", "env.dynamics_kwargs.checkpoint is set with --dynamics_checkpoint"),
    ("agent.clip_actions=!!bool maybe", "the value is not YAML"),  # PyYAML raises KeyError here
    ("agent.clip_actions=!!int ''", "the value is not YAML"),  # and IndexError here
    ("shac.horizon=8", "is set with --shac_horizon"),
    ("agent.policy.activation=2024-13-01", "the value is not YAML"),
    ("env.num_envs", "is not KEY=VALUE"),
    ("num_envs=4", "is not KEY=VALUE"),
    ("policy.seed=1", "unknown root 'policy'"),
    ("agent.num_steps_per_env=[1", "the value is not YAML"),
    ("env.rewards.feet_air_time.weight=!!python/object/apply:os.system [echo]", "the value is not YAML"),
])
def test_a_bad_override_is_a_one_line_error_naming_the_key(cfgs, item, message):
    flags = dict.fromkeys(["num_envs", "seed", "experiment_name", "run_name", "dynamics_checkpoint", "shac_horizon"])
    with pytest.raises(CLIError) as err:
        apply_overrides(cfgs, [item], flags=flags)  # the flags of a command such as train
    assert message in str(err.value) and len(str(err.value).splitlines()) == 1, str(err.value)


def test_overrides_reach_the_run_and_its_saved_configs(tmp_path, capsys):
    """`train` applies them after its flags and saves them in params/; SHAC's need --algo shac; `eval` and `bench env`
    take them too."""
    log_root = tmp_path / "logs"
    assert main(["train", "--task", TASK, "--num_envs", "4", "--max_iterations", "1", "--eval_episodes", "0",
                 "--log_root", str(log_root), "env.rewards.undesired_contacts=null",
                 "agent.algorithm.learning_rate=3e-4", "agent.num_steps_per_env=4"]) == 0
    params = next(log_root.glob("*/*/params"))
    agent = yaml.safe_load((params / "agent.yaml").read_text())
    env = yaml.safe_load((params / "env.yaml").read_text())
    assert agent["algorithm"]["learning_rate"] == 3e-4 and agent["num_steps_per_env"] == 4
    assert "undesired_contacts" not in env["rewards"] and "feet_air_time" in env["rewards"]
    capsys.readouterr()
    for argv, message in (
            (["train", "--task", TASK, "--num_envs", "4", "--log_root", str(log_root), "shac.horizon=8"],
             "sets SHAC's config; add --algo shac"),
            (["eval", "--task", TASK, "--num_envs", "2", "--log_root", str(log_root), "env.rewardz.x=1"],
             "env has no 'rewardz'; did you mean rewards"),
            (["eval", "--task", TASK, "--num_envs", "2", "--episodes", "1", "--log_root", str(log_root),
              "env.observations.policy.terms.base_lin_vel=null"],  # the policy was trained on all of them
             "size mismatch for mlp.0.weight")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert main(["bench", "env", "--task", TASK, "--num_envs", "2", "--steps", "1", "--warmup", "0",
                 "env.rewards.feet_air_time=null"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps_per_s"] > 0


def test_bench_ppo_applies_them_to_every_run_and_resumes_only_with_the_same(tmp_path, capsys, monkeypatch):
    import flashnerd.cli.bench.ppo as bench_ppo

    trained = []
    real = bench_ppo.train_policy

    def spy(task, env_cfg, agent_cfg, *args, **kwargs):  # the configs the run trains with, then the real run
        trained.append((env_cfg, agent_cfg))
        return real(task, env_cfg, agent_cfg, *args, **kwargs)

    monkeypatch.setattr(bench_ppo, "train_policy", spy)
    out = tmp_path / "bench"
    argv = ["bench", "ppo", "--task", TASK, "--dynamics", "mujoco", "--num_envs", "4", "--max_iterations", "1",
            "--eval_episodes", "1", "--out_dir", str(out), "agent.num_steps_per_env=3",
            "env.rewards.feet_air_time=null"]
    assert main(argv) == 0
    data = json.loads((out / "bench_ppo.json").read_text())
    assert data["overrides"] == ["agent.num_steps_per_env=3", "env.rewards.feet_air_time=null"]
    (env_cfg, agent_cfg), = trained
    assert agent_cfg.num_steps_per_env == 3 and "feet_air_time" not in env_cfg.rewards
    assert len(data["backends"]["mujoco"]["curve"]) == 1
    capsys.readouterr()
    assert main([*argv[:-1], "--resume"]) == 2  # one override fewer: not the same benchmark
    err = capsys.readouterr().err.strip()
    assert "was run with other overrides" in err and len(err.splitlines()) == 1, err


def test_record_drives_a_policy_with_the_configs_it_trained_with(tmp_path, capsys):
    """A policy trained without an observation term records only with that term dropped again; the fields recording
    sets itself, and overrides without --task, are refused."""
    import h5py

    log_root = tmp_path / "logs"
    drop = "env.observations.policy.terms.base_lin_vel=null"
    assert main(["train", "--task", TASK, "--num_envs", "4", "--max_iterations", "1", "--eval_episodes", "0",
                 "--log_root", str(log_root), drop]) == 0
    policy = str(next(log_root.glob("*/*/model_*.pt")))
    record = ["record", "--task", TASK, "--checkpoint", policy, "--num_worlds", "2", "--steps", "10",
              "--traj_len", "10", "--out", str(tmp_path / "d.h5")]
    capsys.readouterr()
    assert main([*record, drop]) == 0
    with h5py.File(tmp_path / "d.h5") as f:
        assert f["qpos"].shape[:2] == (2, 11)
    for extra, message in (([], "size mismatch for mlp.0.weight"), ([drop, "env.num_envs=3"], "set with --num_worlds"),
                           ([drop, "env.episode_length_s=5"], "is not free here")):
        assert main([*record[:-1], str(tmp_path / "e.h5"), *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert main(["record", "--num_worlds", "2", "--steps", "10", "--traj_len", "10", "--out", str(tmp_path / "x.h5"),
                 drop]) == 2
    assert "add --task TASK" in capsys.readouterr().err
    assert not (tmp_path / "e.h5").exists() and not (tmp_path / "x.h5").exists()
