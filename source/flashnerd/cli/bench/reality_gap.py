"""`flashnerd bench reality-gap`: the loop a lab runs, on a robot variant standing in for the real robot.

For each budget of robot time (minutes summed over robots), spent in --rounds equal parts (whole trajectories, never
more than the budget): drive the variant with a safe policy plus action noise (PPO on nominal MuJoCo; with --safe_policy
randomized, the domain-randomized baseline, trained first), write its logs in the robot log format and import them (the
lab's path), and adapt the learned model to them (`fit --init`); then round r trains PPO on model r (from round r-1's
policy; round 0 fine-tunes the safe policy, or with --start_policy scratch trains a fresh one), and every round but the
last drives the robot with its policy plus noise for the next part, logged and imported the same way, and refits the
model on every log so far. Every policy is evaluated in the variant. Baselines in the same run (--baseline_iterations
each; by default rounds x the task's iterations, as many as a last round trained from scratch has behind it): PPO on
nominal MuJoCo, PPO on MuJoCo with domain randomization over the variant's `randomize` ranges (when it has any), and
the oracle a lab cannot run, PPO directly on the variant; when the loop fine-tunes the safe policy, also that policy
fine-tuned as long on nominal MuJoCo and on the variant (`fine_tuned`: what the iterations earn without the model, and
the oracle of fine-tuning). The JSON is rewritten after every stage (`--resume` continues a stopped run, a PPO stage
from its last checkpoint, saved every `CHECKPOINT_EVERY` iterations); a plot of return in the variant against minutes
of robot data.

A variant with `randomize` ranges is two things here: the robot is its fixed values (`RobotVariant.fixed`, written
to `<variant>_robot.yaml` in --out_dir: what is logged, what the oracle trains on, what every policy is evaluated
on), and the ranges alone over the nominal robot (`RobotVariant.ranges_only`, `<variant>_ranges.yaml`) are what the
randomized baseline trains on, as a lab that knows the ranges but not its robot would."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

from flashnerd.cli.common import (
    CLIError,
    check_device,
    check_file_stem,
    check_positive,
    check_positive_number,
    check_writable,
    checkpoint_sha256,
    model_to_start_from,
    read_json,
    run_state,
    write_json,
)
from flashnerd.cli.fit import adapt_model
from flashnerd.cli.policy import load_policy
from flashnerd.cli.record import record_policy
from flashnerd.data.dataset import load_dataset
from flashnerd.data.logs import dataset_to_log, import_logs
from flashnerd.data.record import record
from flashnerd.dynamics import REFERENCE_BACKEND, backend_info
from flashnerd.envs.evaluate import evaluate_on_backends
from flashnerd.envs.registry import play_variant, task_cfgs
from flashnerd.envs.rsl_rl import CHECKPOINT_EVERY, make_runner, read_policy_checkpoint, train_policy
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.sim.scene import variant_robot
from flashnerd.training.fit import FitConfig, Fitter, check_fit_config, nrmse_before_after
from flashnerd.utils.machine import describe_machine
from flashnerd.viz.report import plot_reality_gap

TASK = "FlashNeRD-Velocity-Flat-Anymal-C-v0"
BASELINES = ("nominal", "oracle", "randomized")
SAFE_POLICIES = ("nominal", "randomized")  # baselines that may log the robot's first data
START_POLICIES = ("safe", "scratch")  # what round 0's PPO starts from
FINE_TUNE_ITERATIONS = 150  # PPO iterations per round fine-tuning the safe policy, fixed before any run that used it
# runs from before these options had them
OLD_DEFAULTS = {"contact_head_steps": 1000, "safe_policy": "nominal", "start_policy": "scratch", "robot": None,
                "baseline_iterations": None}
HELD_OUT_MINUTES = 2.0  # robot time of the safe policy's logs that every model is measured on, never fitted on


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("reality-gap", help="adapt the learned model to minutes of a robot variant's logs, then rounds "
                                            "of PPO on it, its rollouts on the robot and a refit; evaluate in the "
                                            "variant; with nominal, oracle and randomized baselines")
    p.add_argument("--task", default=TASK, help="task id")
    p.add_argument("--robot", default=None,
                   help="another robot for a task that takes any (the velocity tasks): a name or a spec file "
                        "(path/to/robot.yaml), the robot the variant names; its model needs --dynamics_checkpoint "
                        "unless one is shipped")
    p.add_argument("--robot_variant", required=True, help="variant YAML standing in for the real robot")
    p.add_argument("--real_minutes", default="1,3,10",
                   help="comma-separated budgets of robot time (minutes); --resume may add budgets")
    p.add_argument("--rounds", type=int, default=2,
                   help="rounds per budget: PPO on the model, its rollouts on the robot, refit (1: adapt once to the "
                        "safe policy's logs); the budget is spent in equal parts")
    p.add_argument("--iterations", type=int, default=None,
                   help=f"PPO iterations per round (default: {FINE_TUNE_ITERATIONS} fine-tuning the safe policy, the "
                        "task's from scratch)")
    p.add_argument("--baseline_iterations", type=int, default=None,
                   help="PPO iterations of every baseline (default: rounds x the task's iterations; from scratch, "
                        "rounds x --iterations: as many as the last round's policy has behind it)")
    p.add_argument("--num_envs", type=int, default=None, help="PPO worlds (default: the task's)")
    p.add_argument("--eval_episodes", type=int, default=64, help="evaluation episodes in the variant per policy")
    p.add_argument("--robot_worlds", type=int, default=16, help="robots logging at once (the budget is summed)")
    p.add_argument("--safe_policy", choices=SAFE_POLICIES, default="nominal",
                   help="the baseline whose policy (plus noise) logs the robot's first data and the held-out logs: "
                        "nominal (PPO on nominal MuJoCo) or randomized (PPO over the variant's randomize ranges, "
                        "what a lab that fears falls would deploy first; the variant needs ranges)")
    p.add_argument("--start_policy", choices=START_POLICIES, default="safe",
                   help="what round 0's PPO on the adapted model starts from: safe (the default: fine-tunes the safe "
                        "policy, whose logs the model was adapted to, as a lab would fine-tune the policy it runs; "
                        "its PPO iterations then come on top of the safe policy's) or scratch (a fresh policy, which "
                        "walks into states the logs never showed the model; docs/results.md)")
    p.add_argument("--action_noise", type=float, default=0.3,
                   help="largest per-world std of the noise on the actions of every policy driving the robot")
    p.add_argument("--mix", type=float, default=0.0,
                   help="share of every fitting batch (adaptation and refits) from nominal simulation data (default "
                        "0: the robot's data alone; mixing in the nominal robot blends the two, see docs/results.md)")
    p.add_argument("--sim_minutes", type=float, default=10.0,
                   help="minutes of nominal exploration data recorded for --mix above 0")
    p.add_argument("--fit_budget", type=float, default=600.0,
                   help="seconds of training adapting the shipped model to the safe policy's logs")
    p.add_argument("--refit_budget", type=float, default=150.0,
                   help="seconds of training per refit on a round's rollouts (and all logs before them)")
    p.add_argument("--contact_head_steps", type=int, default=FitConfig.contact_head_steps,
                   help="steps refitting the model's contact head after every adaptation and refit, as `flashnerd "
                        f"fit` (0: the models carry no head; default {FitConfig.contact_head_steps})")
    p.add_argument("--traj_len", type=int, default=100, help="control steps per logged trajectory")
    p.add_argument("--model", default="flashnerd", help="the learned backend to adapt and train PPO on")
    p.add_argument("--dynamics_checkpoint", default=None, help="the model to adapt (default: the shipped one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the policies and the logging")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--out_dir", default="logs/bench_reality_gap",
                   help="folder for data, models, runs, JSON, plot (one run per folder: --name does not separate "
                        "runs)")
    p.add_argument("--name", default="reality_gap", help="file stem of the JSON and the plot in --out_dir")
    p.add_argument("--resume", action="store_true", help="continue a stopped run in --out_dir from its JSON")
    p.add_argument("--baselines_from", default=None,
                   help="the JSON of an earlier run of the same task, seed, device, PPO worlds, evaluation episodes "
                        "and baseline iterations: take its baselines (and its held-out logs, when it logged them as "
                        "this run would) instead of training them again, to compare loop settings; a run of another "
                        "variant of the same robot gives its nominal baseline alone, evaluated again in this robot. "
                        "The run's folder may have moved since: files it recorded under its --out_dir are looked for "
                        "under the JSON's folder")
    p.set_defaults(func=run)


def _budgets(text: str) -> list[float]:
    try:
        budgets = [float(x) for x in text.split(",")]
    except ValueError as err:
        raise CLIError(f"--real_minutes must be comma-separated numbers of minutes, got '{text}'") from err
    if not budgets or any(not math.isfinite(b) or b <= 0 for b in budgets):
        raise CLIError(f"--real_minutes must be positive numbers of minutes, got '{text}'")
    return sorted(budgets)


def run(args: argparse.Namespace) -> dict:
    """Run every baseline and every budget (or what a stopped run left); write `<name>.json` and `<name>.png`."""
    for name in ("eval_episodes", "robot_worlds", "traj_len", "rounds"):
        check_positive(name, getattr(args, name))
    check_positive("iterations", args.iterations)
    check_positive("baseline_iterations", args.baseline_iterations)
    check_positive("num_envs", args.num_envs)
    budgets = _budgets(args.real_minutes)
    check_file_stem(args.name)
    check_writable("out_dir", args.out_dir)
    check_device(args.device)
    check_fit_config(FitConfig(contact_head_steps=args.contact_head_steps))  # the refits' setting, before any work
    if not 0 <= args.mix < 1 or not math.isfinite(args.action_noise) or args.action_noise < 0:
        raise CLIError("--mix must lie in [0, 1) and --action_noise be a finite number >= 0")
    # a bad variant, or one for another robot than the task's (or --robot's), fails here
    env_cfg, agent_cfg = task_cfgs(args.task, robot_variant=args.robot_variant, robot=args.robot)
    robot = variant_robot(env_cfg.robot, args.robot_variant)
    if args.safe_policy == "randomized" and not robot.variant.randomized:
        raise CLIError(f"--safe_policy randomized needs randomize ranges in --robot_variant '{args.robot_variant}'; "
                       "add them, or use --safe_policy nominal")
    for name in ("fit_budget", "refit_budget", "sim_minutes"):
        check_positive_number(name, getattr(args, name))
    kind = backend_info(args.model).model_kind
    if kind is None:
        raise CLIError(f"--model '{args.model}' is no learned backend; give one such as flashnerd")
    init = model_to_start_from(args.dynamics_checkpoint, robot, kind, env_cfg.terrain)
    # a missing, foreign or other-kind model fails now, not after the baselines' PPO runs
    if (held := read_checkpoint(init, robot)["kind"]) != kind:
        raise CLIError(f"--dynamics_checkpoint '{init}' holds a {held} model, --model {args.model} needs {kind}")
    out = Path(args.out_dir)
    path = out / f"{args.name}.json"
    # budgets are kept by minutes, so --resume may run other budgets than the stopped run (it finishes those too)
    settings = {k: v for k, v in vars(args).items() if k not in ("func", "resume", "debug", "command", "real_minutes")}
    fine_tune = args.start_policy == "safe"
    per_round = args.iterations or (FINE_TUNE_ITERATIONS if fine_tune else agent_cfg.max_iterations)
    state = run_state(path, settings, args.resume, {
        "task": args.task, "robot_variant": args.robot_variant, "variant": robot.variant.describe(),
        "model": args.model, "init": init, "rounds_per_budget": args.rounds, "iterations_per_round": per_round,
        "baseline_iterations": args.baseline_iterations or
        args.rounds * (agent_cfg.max_iterations if fine_tune else per_round),
        "eval_episodes": args.eval_episodes, "baselines": {},
        "budgets": []}, defaults=OLD_DEFAULTS, upgrade=checked_state)
    _check_same_models(state, robot.model_hash(), init, args.resume)
    if args.baselines_from:
        _reuse_baselines(state, Path(args.baselines_from), robot.model_hash())
    out.mkdir(parents=True, exist_ok=True)
    study = _Study(args, out, state, lambda: write_json(path, state), init,
                   target=str(out / f"{robot.variant.name}_robot.yaml"))
    # the robot: the variant's fixed values, nothing drawn; and the ranges alone for the randomized baseline
    robot.variant.fixed().write(study.target)
    ranges = None
    if robot.variant.randomized:
        ranges = str(out / f"{robot.variant.ranges_only().name}.yaml")
        robot.variant.ranges_only().write(ranges)
        variant_robot(env_cfg.robot, ranges)  # compiled now: a range the nominal robot cannot take fails before work
    study.save()  # now, so a run stopped in its first stage (the safe baseline's PPO) resumes too
    study.evaluate_reused()  # a nominal baseline taken from a run of another variant, in this robot

    # baselines train --baseline_iterations (default: rounds x the task's or, from scratch, x --iterations); the
    # safe policy first (every log starts from it), then the oracle, the third after the budgets (and after the
    # fine-tuning controls, so that a run stopped in it already holds them)
    baselines = {"nominal": None, "oracle": study.target, **({"randomized": ranges} if ranges else {})}
    order = [args.safe_policy, "oracle"]
    study.baselines([(label, baselines[label]) for label in order])
    if args.mix > 0 and "sim_data" not in state:  # simulation data of the nominal robot to mix into every fit
        sim_steps = max(args.traj_len, math.ceil(args.sim_minutes * 60 / robot.control_dt / 64 / args.traj_len)
                        * args.traj_len)
        record(variant_robot(env_cfg.robot, None), 64, sim_steps, out / "sim.h5", traj_len=args.traj_len,
               seed=args.seed + 1, progress=False)
        state["sim_data"] = str(out / "sim.h5")
        study.save()
    if "held_out" not in state:
        state["held_out"] = study.robot_log(study.safe_policy(), out / "held_out",
                                            _steps(args, robot.control_dt, HELD_OUT_MINUTES, 1), args.seed + 2)
        study.save()
    # the largest budget first: it decides the issue's <= 10-minute bar, so a stopped run already holds that figure
    for minutes in sorted(set(budgets) | {b["minutes"] for b in state["budgets"]}, reverse=True):
        row = next((b for b in state["budgets"] if b["minutes"] == minutes), None)
        if row is None:
            row = {"minutes": minutes, "rounds": []}
            state["budgets"].append(row)
        study.budget(row, _steps(args, robot.control_dt, minutes, args.rounds))
    state["budgets"].sort(key=lambda b: b["minutes"])
    if fine_tune:  # before the last baseline: a few hundred iterations, not another whole run
        study.fine_tune_controls(args.rounds * per_round)
    study.baselines([(label, variant) for label, variant in baselines.items() if label not in order])
    state["randomized"] = ("PPO on MuJoCo drawing the variant's randomize ranges over the nominal robot" if ranges
                           else "skipped: the variant has no randomize ranges")
    study.save()
    plot_reality_gap(state, out / f"{args.name}.png")
    print(json.dumps({"baselines": {k: v["eval_variant"]["mean_return"] for k, v in state["baselines"].items()},
                      "budgets": {b["minutes"]: b["eval_variant"]["mean_return"] for b in state["budgets"]}}))
    return state


# settings an earlier run must share for its baselines to be this run's: they decide every baseline's PPO and
# evaluation; the robot is compared by its variant's digest (a copy of the file elsewhere is the same robot: every
# baseline is reused; another variant: the nominal one alone) and by the hash of the robot model the variant applies to
BASELINE_SETTINGS = ("task", "seed", "num_envs", "eval_episodes", "device")
HELD_OUT_SETTINGS = ("safe_policy", "robot_worlds", "traj_len", "action_noise")  # what its held-out logs depend on


def _reuse_baselines(state: dict, path: Path, model_hash: str) -> None:
    """Fill the baselines `state` lacks (and its held-out logs) from the earlier run in `path`, after checking that
    the earlier run trained them exactly as this one would; each reused entry names the file it came from. From a run
    of another variant of the same robot model only the nominal baseline is taken (it never saw a variant), without
    its figures: `_Study.evaluate_reused` evaluates it in this run's robot."""
    other = read_json("--baselines_from", path, "give the JSON a finished `bench reality-gap` run wrote")
    flag = f"--baselines_from '{path}'"
    if not isinstance(other, dict) or not isinstance(other.get("settings"), dict) or \
            not isinstance(other.get("baselines"), dict) or not isinstance(other.get("variant"), dict):
        raise CLIError(f"{flag} holds no `bench reality-gap` run; give the JSON such a run wrote")
    mine, theirs = state["settings"], {**OLD_DEFAULTS, **other["settings"]}
    same_robot = other["variant"].get("digest") == state["variant"]["digest"]
    if not same_robot and "model_hash" not in other:  # a run from before the hash cannot show its robot is this one
        raise CLIError(f"{flag} is a run of another variant that predates the robot model's hash: only a run of the "
                       "same variant can lend it its baselines; train them here, or drop --baselines_from")
    differ = [k for k in BASELINE_SETTINGS if mine.get(k) != theirs.get(k)]
    differ += ["the robot model (its hash)"] * (other.get("model_hash", model_hash) != model_hash)
    differ += ["baseline iterations"] * (other.get("baseline_iterations") != state["baseline_iterations"])
    if differ:
        raise CLIError(f"{flag} trained its baselines with other settings ({', '.join(differ)}); give the same ones, "
                       "or drop --baselines_from")
    for label in other["baselines"]:
        if label not in BASELINES:
            raise CLIError(f"{flag}: its baseline '{label}' is no finished entry of this command (edited or damaged)")
    # another variant lends the nominal baseline alone: the others trained on (or over) its robot
    for label, entry in other["baselines"].items():
        if label in state["baselines"] or not (same_robot or label == "nominal"):
            continue
        if not _finished(entry, state["baseline_iterations"]):
            raise CLIError(f"{flag}: its baseline '{label}' is no finished entry of this command (edited or damaged)")
        entry = {**entry, "policy": _where_now(entry["policy"], path, theirs.get("out_dir"))}
        if not Path(entry["policy"]).is_file():
            raise CLIError(f"{flag}: the policy of its baseline '{label}', '{entry['policy']}', is missing; run "
                           "from the folder that run ran from, keep the run's files where they lie beside its JSON, "
                           "or drop --baselines_from")
        read_policy_checkpoint(entry["policy"])  # a damaged or foreign file fails now, not after hours of work
        if same_robot:
            state["baselines"][label] = {**entry, "reused_from": str(path)}
        else:  # its figures are the other robot's: evaluated again here
            state["baselines"][label] = {**{k: v for k, v in entry.items() if k != "eval_variant"},
                                         "reused_from": str(path), "evaluated_here": True}
    # its held-out logs are this run's when the same safe policy (its file, reused above) logged them the same way
    held_out, safe = other.get("held_out"), state["baselines"].get(mine["safe_policy"], {})
    if isinstance(held_out, dict) and isinstance(held_out.get("dataset"), str):
        held_out = {**held_out, "dataset": _where_now(held_out["dataset"], path, theirs.get("out_dir"))}
    if ("held_out" not in state and same_robot and safe.get("reused_from") == str(path)
            and isinstance(held_out, dict) and isinstance(held_out.get("dataset"), str)
            and Path(held_out["dataset"]).is_file()
            and all(mine.get(k) == theirs.get(k) for k in HELD_OUT_SETTINGS)):
        state["held_out"] = {**held_out, "reused_from": str(path)}


def _where_now(recorded: str, path: Path, out_dir) -> str:
    """A file an earlier run recorded (a policy, its held-out logs), where it lies now: as recorded, or, where that
    run's folder was moved or copied since (to another machine, or into a repository to keep its baselines), at the
    same place under the folder that holds its JSON `path`."""
    if Path(recorded).is_file() or not isinstance(out_dir, str):
        return recorded
    try:
        inside = Path(recorded).relative_to(out_dir)  # (...) the file's place within that run's --out_dir
    except ValueError:
        return recorded
    moved = path.parent / inside
    return str(moved) if moved.is_file() else recorded


def _finite(value) -> bool:
    """Whether a value read from a run's JSON is a finite number (not a bool, not text)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def checked_state(state: dict) -> dict:
    """A stopped run's state as this command wrote it, or a one-line error: every stage it finished reads back as
    the stage wrote it (file names as text, figures as finite numbers, rounds in order), so an edited or damaged
    file fails at --resume, not with a traceback hours into the run."""
    text = lambda v: isinstance(v, str)  # noqa: E731
    number = _finite
    figures = lambda e: isinstance(e, dict) and number(e.get("mean_return"))  # noqa: E731
    logs = lambda e: (isinstance(e, dict) and text(e.get("dataset")) and number(e.get("robot_minutes"))  # noqa: E731
                      and isinstance(e.get("import"), dict) and number(e["import"].get("minutes")))
    policy = lambda e: (isinstance(e, dict) and text(e.get("policy")) and number(e.get("train_wall_s", 0))  # noqa: E731
                        and ("eval_variant" not in e or figures(e["eval_variant"])))

    def step_ok(r: int, step) -> bool:
        return (isinstance(step, dict) and step.get("round") == r and text(step.get("model"))
                and ("eval_variant" not in step or policy(step)) and ("rollouts" not in step or logs(step["rollouts"]))
                and text(step.get("next_model", "")))

    def row_ok(row) -> bool:
        return (isinstance(row, dict) and number(row.get("minutes")) and row["minutes"] > 0
                and isinstance(row.get("rounds"), list) and ("logged" not in row or logs(row["logged"]))
                and text(row.get("adapted", "")) and all(step_ok(r, s) for r, s in enumerate(row["rounds"])))

    ok = (all(label in BASELINES and policy(e) for label, e in state["baselines"].items())
          and all(row_ok(row) for row in state["budgets"])
          and ("held_out" not in state or (isinstance(state["held_out"], dict)
                                           and text(state["held_out"].get("dataset"))))
          and text(state.get("sim_data", ""))
          and (isinstance(state.get("fine_tuned", {}), dict)
               and all(policy(e) for e in state.get("fine_tuned", {}).values())))
    if not ok:
        raise CLIError("--resume: the run file's stages are not those of a `flashnerd bench reality-gap` run (edited "
                       "or damaged); give a new --out_dir")
    return state


def _finished(entry, iterations: int) -> bool:
    """Whether `entry` reads as a finished baseline of `iterations` (what `_Study.ppo` writes): a policy file name,
    finite figures in its evaluation, the iteration count."""
    figures = entry.get("eval_variant") if isinstance(entry, dict) else None
    return (isinstance(entry, dict) and isinstance(entry.get("policy"), str) and _finite(entry.get("train_wall_s"))
            and entry.get("iterations") == iterations and isinstance(figures, dict)
            and all(_finite(figures.get(k)) for k in ("mean_return", "fall_rate", "lin_vel_rms", "episodes"))
            and isinstance(figures.get("returns", {}), dict))


def _check_same_models(state: dict, model_hash: str, init: str, resume: bool) -> None:
    """A new run records the robot model's hash and the digest of the model it adapts in `state`; a resumed run must
    find the same ones, or every stage after the resume would act on another robot, or adapt another model, under
    the stopped run's names: one-line errors. A run stopped before a field existed is not given today's robot hash
    (`--baselines_from` reads it as the hash its baselines were trained with), only the model's digest."""
    if not resume:
        state["model_hash"] = model_hash
    elif state.get("model_hash", model_hash) != model_hash:
        raise CLIError(f"--resume: the robot model changed since this run started (hash {state['model_hash']}, now "
                       f"{model_hash}); resume where that robot's MJCF is, or give a new --out_dir")
    digest = checkpoint_sha256(init)
    if state.setdefault("init_sha256", digest) != digest:
        raise CLIError(f"--resume: the model this run adapts, '{init}', is not the file it started from (sha256 "
                       f"{str(state['init_sha256'])[:12]}..., now {str(digest)[:12]}...); put that file back there, or "
                       "give a new --out_dir")


def _steps(args: argparse.Namespace, control_dt: float, minutes: float, parts: int) -> int:
    """Control steps per robot of one of `parts` equal parts of `minutes` of robot time (summed over --robot_worlds):
    whole trajectories, at least one, so the parts together never exceed the budget unless it is below one each."""
    trajectories = math.floor(minutes * 60 / control_dt / args.robot_worlds / args.traj_len + 1e-9)
    return max(1, trajectories // parts) * args.traj_len


class _Study:
    """One `bench reality-gap` run: its settings, folder and JSON state (saved after every stage), the robot file
    standing in for the real robot, and the stages that train, log and adapt. `nrmse_held_out` is always the shipped
    model's and a fitted model's error on the held-out logs of the safe policy."""

    def __init__(self, args: argparse.Namespace, out: Path, state: dict, save: Callable[[], None], init: str,
                 target: str):
        self.args, self.out, self.state, self.save, self.init, self.target = args, out, state, save, init, target

    def ppo(self, label: str, dynamics: str, variant: str | None, iterations: int, checkpoint: str | None = None,
            start: str | None = None) -> dict:
        """PPO for `iterations` (from the policy `start`, if any), saved to <label>/policy.pt, evaluated in the
        robot (and on the learned model it trained on, when it trained on one)."""
        args = self.args
        env_cfg, agent_cfg = task_cfgs(args.task, num_envs=args.num_envs, seed=args.seed, device=args.device,
                                       dynamics=dynamics, dynamics_checkpoint=checkpoint, robot_variant=variant,
                                       robot=args.robot)
        agent_cfg.max_iterations, agent_cfg.save_interval = iterations, min(iterations, CHECKPOINT_EVERY)
        runner, wall = train_policy(args.task, env_cfg, agent_cfg, str(self.out / label), iterations, init=start,
                                    resume=args.resume)
        path = str(self.out / label / "policy.pt")
        runner.save(path)
        policy = runner.get_inference_policy(device=args.device)
        result = {"policy": path, "train_wall_s": round(wall, 1), "machine": describe_machine(args.device),
                  "iterations": iterations,
                  **({"resumed_at": runner.resumed_at} if runner.resumed_at else {}),
                  "eval_variant": self.in_robot(env_cfg, policy)}
        if checkpoint is not None:
            result["eval_model"] = evaluate_on_backends(args.task, env_cfg, policy, args.eval_episodes,
                                                        backends=[dynamics])[dynamics]
        return result

    def in_robot(self, env_cfg, policy) -> dict:
        """`policy` (an inference policy) evaluated for --eval_episodes episodes in the robot, on MuJoCo, with the
        task's evaluation config of `env_cfg`."""
        task, cfg = play_variant(self.args.task, dataclasses.replace(env_cfg, robot_variant=self.target))
        return evaluate_on_backends(task, cfg, policy, self.args.eval_episodes,
                                    backends=[REFERENCE_BACKEND])[REFERENCE_BACKEND]

    def evaluate(self, policy: str) -> dict:
        """The policy file `policy` evaluated in the robot, as `ppo` evaluates the policies it trains."""
        args = self.args
        env_cfg, agent_cfg = task_cfgs(args.task, num_envs=1, seed=args.seed, device=args.device, robot=args.robot)
        env, runner = make_runner(args.task, env_cfg, agent_cfg)  # the task's networks, to load the policy into
        env.close()
        return self.in_robot(env_cfg, load_policy(runner, Path(policy), args.device))

    def evaluate_reused(self) -> None:
        """Evaluate in the robot every reused baseline that came without this robot's figures."""
        for entry in self.state["baselines"].values():
            if "eval_variant" not in entry:
                entry["eval_variant"] = self.evaluate(entry["policy"])
                self.save()

    def baselines(self, runs: list[tuple[str, str | None]]) -> None:
        """PPO on MuJoCo for each (label, robot variant file) the state lacks."""
        for label, variant in runs:
            if label not in self.state["baselines"]:
                self.state["baselines"][label] = self.ppo(label, REFERENCE_BACKEND, variant,
                                                          self.state["baseline_iterations"])
                self.save()

    def fine_tune_controls(self, iterations: int) -> None:
        """With --start_policy safe, the loop's last policy has `iterations` PPO iterations on models on top of the
        safe policy's; the safe policy fine-tuned as long on nominal MuJoCo (what those iterations earn without robot
        data) and on the variant itself (the oracle of fine-tuning, which a lab cannot run) are its controls."""
        done = self.state.setdefault("fine_tuned", {})
        for label, variant in (("nominal", None), ("oracle", self.target)):
            if label not in done:
                done[label] = self.ppo(f"fine_tuned/{label}", REFERENCE_BACKEND, variant, iterations,
                                       start=self.safe_policy())
                self.save()

    def safe_policy(self) -> str:
        """The policy file of the baseline that logs the robot's first data (--safe_policy)."""
        return self.state["baselines"][self.args.safe_policy]["policy"]

    def robot_log(self, policy: str, folder: Path, steps: int, seed: int) -> dict:
        """`steps` per robot of the robot under `policy` plus noise, through the robot log format."""
        return _robot_log(self.args, self.target, policy, folder, steps, seed)

    def held_out_nrmse(self, fitter: Fitter, model: Path) -> dict:
        """NRMSE of the shipped model and of `model` on the held-out robot logs (no fit saw them)."""
        held_out = load_dataset(self.state["held_out"]["dataset"], fitter.robot)
        return nrmse_before_after(fitter, self.init, model, held_out)

    def fit(self, data: list[str], start: str, out: Path, budget_s: float) -> tuple[Fitter, dict]:
        """`fit --init start` on `data` (with the nominal simulation data mixed in at --mix)."""
        mix_data = (str(self.out / "sim.h5"),) if self.args.mix > 0 else ()
        return adapt_model(data, start, out, budget_s, self.args.seed, self.args.device, mix_data=mix_data,
                           mix=self.args.mix, contact_head_steps=self.args.contact_head_steps)

    def budget(self, row: dict, steps: int) -> None:
        """One budget of robot time in --rounds parts of `steps` per robot: the safe policy's logs (the shipped model
        adapts to them: model 0), then the rollouts of every round's policy but the last (model r+1: model r
        refitted on all logs so far). Round r trains PPO on model r, from round r-1's policy (round 0 from scratch, or
        with --start_policy safe from the safe policy). `row` fills stage by stage; a stage a stopped run left
        half-done runs again (PPO from its last checkpoint, with --resume)."""
        args, tag = self.args, f"{row['minutes']:g}min"
        if "logged" not in row:
            row["logged"] = self.robot_log(self.safe_policy(), self.out / tag, steps, args.seed + 3)
            self.save()
        data = [row["logged"]["dataset"]]
        if "adapted" not in row:
            adapted = self.out / tag / "adapted.safetensors"
            fitter, fit = self.fit(data, self.init, adapted, args.fit_budget)
            row.update(fit, adapted=str(adapted), nrmse_held_out=self.held_out_nrmse(fitter, adapted))
            self.save()
        for r in range(args.rounds):
            if r == len(row["rounds"]):
                model = row["rounds"][r - 1]["next_model"] if r else row["adapted"]
                row["rounds"].append({"round": r, "model": model})
            step, folder = row["rounds"][r], f"{tag}/round_{r}"
            if "eval_variant" not in step:
                start = row["rounds"][r - 1]["policy"] if r else \
                    (self.safe_policy() if args.start_policy == "safe" else None)
                # the nominal robot file, as a lab knows no other: the model carries what differs, its actuators
                # (the torque the task's terms read) identified from the logs' measured torque
                step.update(self.ppo(f"{folder}/ppo", args.model, None, self.state["iterations_per_round"],
                                     step["model"], start))
                self.save()
            if r == args.rounds - 1:
                break
            if "rollouts" not in step:
                step["rollouts"] = self.robot_log(step["policy"], self.out / folder, steps,
                                                  args.seed + 3 + 1000 * (r + 1))
                self.save()
            data.append(step["rollouts"]["dataset"])
            if "next_model" not in step:
                refit = self.out / folder / "model.safetensors"
                fitter, fit = self.fit(list(data), step["model"], refit, args.refit_budget)
                step.update(refit=fit, next_model=str(refit), nrmse_held_out=self.held_out_nrmse(fitter, refit))
                self.save()
        logs = [row["logged"], *(x["rollouts"] for x in row["rounds"][:-1])]
        row.update(eval_variant=row["rounds"][-1]["eval_variant"],
                   robot_minutes=round(sum(x["robot_minutes"] for x in logs), 3),
                   kept_minutes=round(sum(x["import"]["minutes"] for x in logs), 3),
                   ppo_wall_s=round(sum(x["train_wall_s"] for x in row["rounds"]), 1))
        self.save()


def _robot_log(args: argparse.Namespace, variant: str, policy: str, folder: Path, steps: int, seed: int) -> dict:
    """`steps` control steps on each of --robot_worlds robots of the robot `variant` (a variant file) under `policy`
    plus noise (as `flashnerd record --task ... --checkpoint ...` drives it), written as a robot log and imported
    back. `robot_minutes` is the robot time spent; `import.minutes` what was kept (a trajectory a fall interrupts is
    dropped, and the --traj_len steps that end in the fall kept, replacing the robot's previous trajectory where
    they overlap it: `import.fall_ending`, `import.replaced`)."""
    recorded, robot = record_policy(args.task, variant, policy, args.robot_worlds, steps, args.traj_len,
                                    args.action_noise, seed, args.device, folder / "recorded.h5", robot=args.robot)
    dataset_to_log(folder / "recorded.h5", folder / "robot_log.parquet")
    (folder / "recorded.h5").unlink()
    imported = import_logs([folder / "robot_log.parquet"], robot, folder / "robot.h5", args.traj_len)
    return {"dataset": str(folder / "robot.h5"), "robot_minutes": round(steps * args.robot_worlds * robot.control_dt
                                                                         / 60, 4),
            "import": {**imported, **{k: recorded[k] for k in ("interrupted", "fall_ending", "replaced")}}}
