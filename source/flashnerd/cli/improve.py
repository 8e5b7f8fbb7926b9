"""`flashnerd improve`: the data-aggregation loop as one command.

Round r: PPO (or SHAC, `--algo shac`: gradients through the model) on model r (from round r-1's policy, or from
--policy / scratch in round 0) -> the policy, plus action noise, drives the target system (MuJoCo, or a robot variant
standing in for the robot) for --target_minutes summed over worlds -> the data joins every earlier round's (and
--data) -> model r+1 is fitted from model r (`fit --init`: its weights and normalizers, a lower learning rate, early
stopping on held-out data). Every policy is evaluated on its model and in the target system.

Several --policy checkpoints are several lineages: each round trains every lineage on the same model from its own
last policy (or from its --policy again, with --restart_from_policy: fine-tuning studies), and each lineage's
rollouts (--target_minutes split evenly among them) go into one refit, so the model learns the states of more than
one policy's descendants (a model refitted along one lineage is exploited by the next policy that fine-tunes on it).

Each round's model, policies, data and figures stay in `--out_dir/round_<r>/` (`lineage_<k>/` under it when there
are several); `--out_dir/<name>.json` is rewritten after every stage (a stopped run continues with `--resume`, from
the last finished stage) and `<name>.png` plots the return in the target system per round and lineage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

from flashnerd.cli.common import (
    CLIError,
    check_device,
    check_file_stem,
    check_positive,
    check_positive_number,
    check_same_inputs,
    check_writable,
    model_to_start_from,
    run_state,
    write_json,
)
from flashnerd.cli.fit import INIT_PATIENCE, adapt_model
from flashnerd.cli.overrides import add_override_arg, apply_overrides, of_root
from flashnerd.cli.record import RECORD_OWNS, record_policy
from flashnerd.cli.train import ALGOS, apply_uncertainty_args
from flashnerd.dynamics import REFERENCE_BACKEND, backend_info, backend_names
from flashnerd.dynamics.learned import MEMBER_MODES
from flashnerd.envs.evaluate import evaluate_on_backends
from flashnerd.envs.registry import play_variant, task_cfgs
from flashnerd.envs.rsl_rl import CHECKPOINT_EVERY, train_policy
from flashnerd.envs.shac import ShacCfg, train_shac
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.sim.scene import variant_robot
from flashnerd.training.fit import FitConfig, check_fit_config
from flashnerd.viz.report import plot_improve

# a run stopped before a setting existed ran with what was then fixed (PPO; contact heads of 1,000 steps)
SETTING_DEFAULTS = {"algo": "ppo", "shac_horizon": None, "restart_from_policy": False, "contact_head_steps": 1000,
                    "overrides": [], "robot": None, "patience": 5}
# config fields improve sets itself, refused as overrides (the common flag-owned ones are refused by their flags)
IMPROVE_OWNS = {"agent.max_iterations": "--iterations",
                "agent.save_interval": f"a round saves a checkpoint every {CHECKPOINT_EVERY} iterations to resume from",
                "env.robot": "--robot",
                "env.terrain": "the rounds train on the task's terrain, where their rollouts are recorded"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("improve",
                       help="rounds of: PPO (or SHAC) on the model, its rollouts in the target system, refit")
    p.add_argument("--task", required=True, help="task id")
    p.add_argument("--rounds", type=int, default=3, help="rounds of train -> roll out -> refit")
    p.add_argument("--dynamics", default="flashnerd", choices=backend_names(learned=True, planning=True),
                   help="the learned backend the policy trains on")
    p.add_argument("--dynamics_checkpoint", default=None, help="model of round 0 (default: the shipped one)")
    p.add_argument("--data", nargs="*", default=[],
                   help="datasets kept in every refit beside the rounds' rollouts (e.g. those model 0 was fitted on)")
    p.add_argument("--policy", nargs="*", default=[],
                   help="policy checkpoint(s) round 0 starts from, one lineage each (default: one from scratch)")
    p.add_argument("--restart_from_policy", action="store_true",
                   help="every round trains from the --policy checkpoints again instead of from the last round's "
                        "policy (DAgger for fine-tuning: the rollouts show where fine-tuning a pretrained policy on "
                        "the current model takes it, not where a policy an earlier model broke goes next)")
    p.add_argument("--algo", default="ppo", choices=ALGOS,
                   help="the policy learner of every round: ppo, or shac (short-horizon actor-critic through the "
                        "model's gradients; --policy may then be a PPO policy it starts from)")
    p.add_argument("--shac_horizon", type=int, default=None,
                   help=f"SHAC's differentiable rollout length (--algo shac; default {ShacCfg.horizon})")
    p.add_argument("--iterations", type=int, default=None,
                   help="PPO (or SHAC) iterations per round (default: the task's)")
    p.add_argument("--num_envs", type=int, default=None, help="training worlds (default: the task's)")
    p.add_argument("--robot", default=None,
                   help="another robot for a task that takes any (the velocity tasks): a name or a spec file "
                        "(path/to/robot.yaml); its models need --dynamics_checkpoint unless one is shipped")
    p.add_argument("--robot_variant", default=None, help="variant YAML of the target system (default: nominal)")
    p.add_argument("--target_minutes", type=float, default=2.0,
                   help="minutes of target-system time per round, summed over --target_worlds and split evenly "
                        "among the lineages")
    p.add_argument("--target_worlds", type=int, default=64, help="worlds rolling the policy out at once")
    p.add_argument("--traj_len", type=int, default=100, help="control steps per recorded trajectory")
    p.add_argument("--action_noise", type=float, default=0.3, help="largest per-world std of noise on the actions")
    p.add_argument("--fit_budget", type=float, default=120.0,
                   help="most seconds of training per refit (--patience may stop it sooner)")
    p.add_argument("--patience", type=int, default=INIT_PATIENCE,
                   help=f"validations (one every {FitConfig.eval_every} steps) without a lower held-out loss before a "
                        "refit stops and keeps its best step (0: the whole --fit_budget, keeping its last step; "
                        f"default {INIT_PATIENCE})")
    p.add_argument("--contact_head_steps", type=int, default=FitConfig.contact_head_steps,
                   help="steps refitting the model's contact head after every refit, as `flashnerd fit` (0: the "
                        f"refitted models carry no head; default {FitConfig.contact_head_steps})")
    p.add_argument("--eval_episodes", type=int, default=64, help="episodes per evaluation (model and target)")
    p.add_argument("--uncertainty_penalty", type=float, default=None, help="as `flashnerd train` (ensembles)")
    p.add_argument("--uncertainty_threshold", type=float, default=None, help="as `flashnerd train` (ensembles)")
    p.add_argument("--members", default=None, choices=MEMBER_MODES, help="as `flashnerd train` (ensembles)")
    p.add_argument("--seed", type=int, default=0, help="seed of the training, the rollouts and the fits")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--out_dir", default="logs/improve", help="folder for every round's model, policy, data")
    p.add_argument("--name", default="improve", help="file stem of the JSON table and the plot in --out_dir")
    p.add_argument("--resume", action="store_true", help="continue a stopped run in --out_dir from its JSON")
    add_override_arg(p, "env, agent; shac with --algo shac")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> str:
    """One-line errors for settings no round can run with; returns model 0's checkpoint path."""
    for name in ("rounds", "target_worlds", "traj_len", "eval_episodes"):
        check_positive(name, getattr(args, name))
    check_positive("iterations", args.iterations)
    if args.shac_horizon is not None:
        if args.algo != "shac":
            raise CLIError("--shac_horizon sets SHAC's rollout length; add --algo shac, or drop it")
        check_positive("shac_horizon", args.shac_horizon)
    check_positive("num_envs", args.num_envs)
    for name in ("target_minutes", "fit_budget"):
        check_positive_number(name, getattr(args, name))
    if not (math.isfinite(args.action_noise) and args.action_noise >= 0):
        raise CLIError(f"--action_noise must be a finite number >= 0, got {args.action_noise}")
    # the refits' settings, before any work
    check_fit_config(FitConfig(contact_head_steps=args.contact_head_steps, patience=args.patience))
    check_file_stem(args.name)
    check_writable("out_dir", args.out_dir)
    check_device(args.device)
    # an unknown task, a robot it cannot take, a bad variant: fail now
    env_cfg, agent_cfg = task_cfgs(args.task, robot_variant=args.robot_variant, robot=args.robot)
    if args.algo != "shac" and (items := of_root(args.overrides, "shac")):
        raise CLIError(f"override '{items[0]}' sets SHAC's config; add --algo shac, or drop it")
    _apply(args, env_cfg, agent_cfg, ShacCfg())  # every override checked before any round
    _target_cfg(args, env_cfg)  # and on the evaluation variant of the task
    robot = variant_robot(env_cfg.robot, None)
    kind = backend_info(args.dynamics).model_kind
    init = model_to_start_from(args.dynamics_checkpoint, robot, kind, env_cfg.terrain)
    read_checkpoint(init, robot)  # a missing or foreign model fails before any training
    if args.restart_from_policy and not args.policy:
        raise CLIError("--restart_from_policy restarts every round from --policy; give the pretrained checkpoint(s)")
    if len(set(args.policy)) < len(args.policy):
        raise CLIError("--policy names a checkpoint twice; give each lineage's start once")
    for path in [*args.policy, *args.data]:
        if not Path(path).is_file():
            raise CLIError(f"'{path}' does not exist")
    return init


def upgrade_state(state: dict) -> dict:
    """A stopped run's state in the current form, or a one-line error where its rounds are not what this command
    writes. A run from before several lineages existed (one --policy, a round's policy, rollouts and figures flat in
    its row) is rewritten: --policy a list, each round's lineage fields under "lineages"."""
    settings = state["settings"]
    if not isinstance(settings.get("policy", []), list):
        settings["policy"] = [settings["policy"]] if settings["policy"] else []
    rounds = state["rounds"]
    for row in rounds if isinstance(rounds, list) else []:
        if isinstance(row, dict) and "lineages" not in row:
            row["lineages"] = [{k: row.pop(k) for k in LINEAGE_FIELDS if k in row}] if "policy" in row else []
    if not _well_formed(rounds):
        raise CLIError("--resume: the run file's rounds are not those of a `flashnerd improve` run (edited or "
                       "damaged); give a new --out_dir")
    return state


# what each lineage's stages write in a round's row (ppo_wall_s: runs from before --algo); the refit's fields stay in
# the row itself
LINEAGE_FIELDS = ("policy", "algo", "train_wall_s", "ppo_wall_s", "iterations", "eval", "data", "target_seconds",
                  "record_wall_s", "transitions", "interrupted", "fall_ending", "replaced")


def _well_formed(rounds) -> bool:
    """Whether `rounds` holds what `run` reads back: numbered rows, paths as strings, figures as numbers."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    figures = lambda e: isinstance(e, dict) and all(  # noqa: E731
        isinstance(e.get(w), dict) and number(e[w].get("mean_return")) and number(e[w].get("fall_rate"))
        for w in ("model", "target"))
    if not isinstance(rounds, list):
        return False
    for r, row in enumerate(rounds):
        if not (isinstance(row, dict) and row.get("round") == r and isinstance(row.get("model"), str)
                and isinstance(row.get("next_model", ""), str) and isinstance(row.get("lineages"), list)):
            return False
        for x in row["lineages"]:
            if not (isinstance(x, dict) and all(isinstance(x.get(k, ""), str) for k in ("policy", "data"))
                    and number(x.get("target_seconds", 0)) and ("policy" not in x or figures(x.get("eval")))):
                return False
    return True


def _apply(args: argparse.Namespace, env_cfg, agent_cfg, shac_cfg: ShacCfg | None = None) -> None:
    """The command line's overrides on a round's configs (SHAC's when `shac_cfg` is given)."""
    configs = {"env": env_cfg, "agent": agent_cfg, **({"shac": shac_cfg} if shac_cfg is not None else {})}
    apply_overrides(configs, args.overrides, later=() if shac_cfg is not None else ("shac",), flags=vars(args),
                    owned_by=IMPROVE_OWNS)


def _target_cfg(args: argparse.Namespace, env_cfg) -> tuple[str, object]:
    """(task id, env config) of the evaluation in the target system: the task's -Play- variant where it has one, with
    the `env.` overrides the policy trained with (its observations, among others)."""
    target = dataclasses.replace(env_cfg, robot_variant=args.robot_variant)
    task, cfg = play_variant(args.task, target)
    if cfg is not target:  # the -Play- variant's own config, built without them
        apply_overrides({"env": cfg}, of_root(args.overrides, "env"), flags=vars(args), owned_by=IMPROVE_OWNS,
                        skip_missing=True)  # the terms -Play- drops (pushes) stay dropped
    return task, cfg


def run(args: argparse.Namespace) -> dict:
    """Run the rounds (or the ones a stopped run left); write `<name>.json` and `<name>.png` in --out_dir."""
    model0 = _check(args)
    out = Path(args.out_dir)
    table_path = out / f"{args.name}.json"
    settings = {k: v for k, v in vars(args).items() if k not in ("func", "resume", "rounds", "debug", "command")}
    state = run_state(table_path, settings, args.resume, {"model_0": model0, "rounds": []}, defaults=SETTING_DEFAULTS,
                      upgrade=upgrade_state)
    check_same_inputs(state, {"model_0": [model0], "data": list(args.data), "policy": list(args.policy)})
    save = lambda: write_json(table_path, state)  # noqa: E731  after every stage: --resume starts there
    save()  # now, so a run stopped in its first stage (round 0's PPO) resumes too
    starts = args.policy or [None]
    minutes = args.target_minutes / len(starts)

    for r in range(args.rounds):
        if r == len(state["rounds"]):
            state["rounds"].append({"round": r, "model": model0 if r == 0 else state["rounds"][r - 1]["next_model"],
                                    "lineages": []})
        row = state["rounds"][r]
        for k, first in enumerate(starts):
            if k == len(row["lineages"]):
                row["lineages"].append({})
            lineage = row["lineages"][k]
            folder = out / f"round_{r}" / (f"lineage_{k}" if len(starts) > 1 else "")
            if "policy" not in lineage:
                start = first if r == 0 or args.restart_from_policy else state["rounds"][r - 1]["lineages"][k]["policy"]
                lineage.update(_train(args, row["model"], start, folder, seed=args.seed + k))
                save()
            if "data" not in lineage:
                lineage.update(_roll_out(args, lineage["policy"], folder, minutes,
                                         seed=args.seed + 1000 * (r + 1) + 1_000_000 * k))
                save()
        if "next_model" not in row:
            data = [*args.data, *(x["data"] for done in state["rounds"][:r + 1] for x in done["lineages"])]
            row.update(_refit(args, row["model"], data, out / f"round_{r}" / "model.safetensors"))
            save()
    # a resume with fewer --rounds shows the first ones and keeps the rest: a later resume with more finds them done
    shown = {**state, "rounds": state["rounds"][:args.rounds]}
    plot_improve(shown, out / f"{args.name}.png")
    summary = lambda x: {"return_target": x["eval"]["target"]["mean_return"],  # noqa: E731
                         "falls_target": x["eval"]["target"]["fall_rate"],
                         "return_model": x["eval"]["model"]["mean_return"],
                         **({"success_target": x["eval"]["target"]["success_rate"]}
                            if "success_rate" in x["eval"]["target"] else {})}
    print(json.dumps({"rounds": [{"round": row["round"], "lineages": [summary(x) for x in row["lineages"]]}
                                 for row in shown["rounds"]]}))
    return shown


def _train(args: argparse.Namespace, model: str, start: str | None, folder: Path, seed: int) -> dict:
    """PPO (or SHAC) on `model` (from the policy `start`, if any), saved as folder/policy.pt, evaluated on the model
    and in the target system."""
    env_cfg, agent_cfg = task_cfgs(args.task, num_envs=args.num_envs, seed=seed, device=args.device,
                                   dynamics=args.dynamics, dynamics_checkpoint=model, robot=args.robot)
    apply_uncertainty_args(args, env_cfg)
    if args.iterations is not None:
        agent_cfg.max_iterations = args.iterations
    agent_cfg.save_interval = min(agent_cfg.max_iterations, CHECKPOINT_EVERY)  # PPO's; SHAC saves its last only
    shac_cfg = ShacCfg(horizon=args.shac_horizon or ShacCfg.horizon) if args.algo == "shac" else None
    _apply(args, env_cfg, agent_cfg, shac_cfg)
    path = folder / "policy.pt"
    if shac_cfg is not None:
        learner, wall = train_shac(args.task, env_cfg, agent_cfg, shac_cfg, str(folder / "shac"),
                                   agent_cfg.max_iterations, init=start)
    else:
        learner, wall = train_policy(args.task, env_cfg, agent_cfg, str(folder / "ppo"), agent_cfg.max_iterations,
                                     init=start, resume=args.resume)
    learner.save(str(path))
    policy = learner.get_inference_policy(device=args.device)
    on_model = evaluate_on_backends(args.task, env_cfg, policy, args.eval_episodes, backends=[args.dynamics])
    task, target_cfg = _target_cfg(args, env_cfg)
    target = evaluate_on_backends(task, target_cfg, policy, args.eval_episodes, backends=[REFERENCE_BACKEND])
    return {"policy": str(path), "algo": args.algo, "train_wall_s": round(wall, 1),
            "iterations": agent_cfg.max_iterations,
            **({"resumed_at": learner.resumed_at} if getattr(learner, "resumed_at", 0) else {}),
            "eval": {"model": on_model[args.dynamics], "target": target[REFERENCE_BACKEND]}}


def _roll_out(args: argparse.Namespace, policy: str, folder: Path, minutes: float, seed: int) -> dict:
    """The policy plus noise in the target system for `minutes` (summed over worlds), as a dataset."""
    robot = variant_robot(task_cfgs(args.task, robot=args.robot)[0].robot, args.robot_variant, check=False)
    per_world = minutes * 60 / robot.control_dt / args.target_worlds
    steps = max(1, math.ceil(per_world / args.traj_len)) * args.traj_len
    start = time.perf_counter()
    # the policy's own configs; recording runs without time-outs, so the episode length is recording's
    overrides = [item for item in (*of_root(args.overrides, "env"), *of_root(args.overrides, "agent"))
                 if item.partition("=")[0] not in RECORD_OWNS]
    recorded, _ = record_policy(args.task, args.robot_variant, policy, args.target_worlds, steps, args.traj_len,
                                args.action_noise, seed, args.device, folder / "rollouts.h5", overrides,
                                robot=args.robot)
    return {"data": str(folder / "rollouts.h5"), "target_seconds": round(steps * args.target_worlds *
                                                                         robot.control_dt, 1),
            "record_wall_s": round(time.perf_counter() - start, 1), "transitions": recorded["transitions"],
            **{k: recorded[k] for k in ("interrupted", "fall_ending", "replaced")}}  # falls: kept up to them


def _refit(args: argparse.Namespace, model: str, data: list[str], out: Path) -> dict:
    """`fit --init model` on every dataset so far, for --fit_budget seconds, with early stopping (--patience)."""
    _, fit = adapt_model(data, model, out, args.fit_budget, args.seed, args.device,
                         contact_head_steps=args.contact_head_steps, patience=args.patience)
    return {"next_model": str(out), **{k: v for k, v in fit.items() if k != "nrmse_card"},
            "nrmse_held_out": fit["nrmse_card"]}
