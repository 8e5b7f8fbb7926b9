"""`flashnerd bench reality-gap`: the loop a lab runs, on a robot variant standing in for the real robot.

For each budget of robot time: drive the variant with a safe policy (PPO on nominal MuJoCo, plus action noise) for
that many minutes summed over worlds, write its logs in the robot log format and import them (the lab's path),
adapt the learned model to them (`fit --init` with simulation data mixed in), train PPO on the adapted model, and
evaluate that policy in the variant. Baselines in the same run: PPO on nominal MuJoCo (the safe policy itself), PPO
on MuJoCo with domain randomization over the variant's `randomize` ranges (when it has any), and the oracle a lab
cannot run, PPO directly on the variant. JSON and a plot of return in the variant against minutes of robot data.

A variant with `randomize` ranges is two things here: the robot is its fixed values (`RobotVariant.fixed`, written
to `<variant>_robot.yaml` in --out_dir: what is logged, what the oracle trains on, what every policy is evaluated
on), and the ranges alone over the nominal robot (`RobotVariant.ranges_only`, `<variant>_ranges.yaml`) are what the
randomized baseline trains on, as a lab that knows the ranges but not its robot would.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import torch

from flashnerd.cli.common import CLIError, check_device, check_file_stem, check_positive, check_writable, write_json
from flashnerd.cli.fit import INIT_LR, INIT_PATIENCE
from flashnerd.cli.record import policy_source
from flashnerd.data.dataset import load_dataset
from flashnerd.data.logs import dataset_to_log, import_logs
from flashnerd.data.record import record
from flashnerd.dynamics import REFERENCE_BACKEND
from flashnerd.dynamics.learned import default_checkpoint
from flashnerd.envs.evaluate import evaluate_on_backends
from flashnerd.envs.registry import play_variant, task_cfgs
from flashnerd.envs.rsl_rl import train_policy
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.sim.scene import variant_robot
from flashnerd.training.fit import FitConfig, Fitter, nrmse_before_after
from flashnerd.viz.report import plot_reality_gap

TASK = "FlashNeRD-Velocity-Flat-Anymal-C-v0"


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("reality-gap", help="adapt the learned model to minutes of a robot variant's logs, train PPO "
                                            "on it, evaluate in the variant; with nominal and oracle baselines")
    p.add_argument("--task", default=TASK, help="task id")
    p.add_argument("--robot_variant", required=True, help="variant YAML standing in for the real robot")
    p.add_argument("--real_minutes", default="1,3,10", help="comma-separated budgets of robot time (minutes)")
    p.add_argument("--iterations", type=int, default=None, help="PPO iterations of every policy (default: task's)")
    p.add_argument("--num_envs", type=int, default=None, help="PPO worlds (default: the task's)")
    p.add_argument("--eval_episodes", type=int, default=64, help="evaluation episodes in the variant per policy")
    p.add_argument("--robot_worlds", type=int, default=16, help="robots logging at once (the budget is summed)")
    p.add_argument("--action_noise", type=float, default=0.3, help="largest per-world std of the safe policy's noise")
    p.add_argument("--mix", type=float, default=0.0,
                   help="share of every fitting batch from nominal simulation data (default 0: the robot's data "
                        "alone; mixing in the nominal robot blends the two, see docs/results.md)")
    p.add_argument("--sim_minutes", type=float, default=10.0,
                   help="minutes of nominal exploration data recorded for --mix above 0")
    p.add_argument("--fit_budget", type=float, default=600.0, help="seconds of training per adaptation")
    p.add_argument("--traj_len", type=int, default=100, help="control steps per logged trajectory")
    p.add_argument("--model", default="flashnerd", help="the learned model kind to adapt")
    p.add_argument("--dynamics_checkpoint", default=None, help="the model to adapt (default: the shipped one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the policies and the logging")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--out_dir", default="logs/bench_reality_gap", help="folder for data, models, runs, JSON, plot")
    p.add_argument("--name", default="reality_gap", help="file stem of the JSON and the plot in --out_dir")
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
    """Run every baseline and every budget; write `<name>.json` and `<name>.png`."""
    for name in ("eval_episodes", "robot_worlds", "traj_len"):
        check_positive(name, getattr(args, name))
    budgets = _budgets(args.real_minutes)
    check_file_stem(args.name)
    check_writable("out_dir", args.out_dir)
    check_device(args.device)
    if not 0 <= args.mix < 1 or not math.isfinite(args.action_noise) or args.action_noise < 0:
        raise CLIError("--mix must lie in [0, 1) and --action_noise be a finite number >= 0")
    env_cfg, _ = task_cfgs(args.task, robot_variant=args.robot_variant)  # a bad variant fails here, before work
    robot = variant_robot(env_cfg.robot, args.robot_variant)
    for name in ("fit_budget", "sim_minutes"):
        if not math.isfinite(getattr(args, name)) or getattr(args, name) <= 0:
            raise CLIError(f"--{name} must be a finite number > 0, got {getattr(args, name)}")
    init = args.dynamics_checkpoint or str(default_checkpoint(robot, args.model))
    read_checkpoint(init, robot)  # a missing or foreign model fails now, not after the baselines' PPO runs
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dt = robot.control_dt
    # the robot: the variant's fixed values, nothing drawn; and the ranges alone for the randomized baseline
    target = str(out / f"{robot.variant.name}_robot.yaml")
    robot.variant.fixed().write(target)
    ranges = None
    if robot.variant.randomized:
        ranges = str(out / f"{robot.variant.ranges_only().name}.yaml")
        robot.variant.ranges_only().write(ranges)
        variant_robot(env_cfg.robot, ranges)  # compiled now: a range the nominal robot cannot take fails before work

    def cfgs(dynamics: str, variant: str | None, checkpoint: str | None = None, seed: int = args.seed):
        env, agent = task_cfgs(args.task, num_envs=args.num_envs, seed=seed, device=args.device, dynamics=dynamics,
                               dynamics_checkpoint=checkpoint, robot_variant=variant)
        if args.iterations is not None:
            agent.max_iterations = args.iterations
        agent.save_interval = agent.max_iterations
        return env, agent

    def in_variant(runner, env_cfg) -> dict:
        task, cfg = play_variant(args.task, dataclasses.replace(env_cfg, robot_variant=target))
        policy = runner.get_inference_policy(device=args.device)
        return evaluate_on_backends(task, cfg, policy, args.eval_episodes, backends=[REFERENCE_BACKEND])[
            REFERENCE_BACKEND]

    def ppo(label: str, dynamics: str, variant: str | None, checkpoint: str | None = None) -> tuple[dict, str]:
        env_cfg, agent_cfg = cfgs(dynamics, variant, checkpoint)
        runner, wall = train_policy(args.task, env_cfg, agent_cfg, str(out / label), agent_cfg.max_iterations)
        path = str(out / label / "policy.pt")
        runner.save(path)
        return {"train_wall_s": round(wall, 1), "iterations": agent_cfg.max_iterations,
                "eval_variant": in_variant(runner, env_cfg)}, path

    baselines = {}
    baselines["nominal"], safe_policy = ppo("nominal", REFERENCE_BACKEND, None)
    baselines["oracle"], _ = ppo("oracle", REFERENCE_BACKEND, target)
    if ranges is not None:
        baselines["randomized"], _ = ppo("randomized", REFERENCE_BACKEND, ranges)

    # simulation data of the nominal robot to mix in, and held-out robot data to measure the model on
    if args.mix > 0:
        sim_steps = max(args.traj_len, math.ceil(args.sim_minutes * 60 / dt / 64 / args.traj_len) * args.traj_len)
        record(variant_robot(env_cfg.robot, None), 64, sim_steps, out / "sim.h5", traj_len=args.traj_len,
               seed=args.seed + 1, progress=False)
    held_out = _robot_log(args, target, safe_policy, out / "held_out", 2.0, args.seed + 2)

    budgets_out = []
    for minutes in budgets:
        tag = f"{minutes:g}min"
        logged = _robot_log(args, target, safe_policy, out / tag, minutes, args.seed + 3)
        cfg = dataclasses.replace(FitConfig(), model=args.model, max_steps=10**9, time_budget_s=args.fit_budget,
                                  init=init, mix_data=(str(out / "sim.h5"),) if args.mix > 0 else (),
                                  mix=args.mix, lr=INIT_LR, patience=INIT_PATIENCE, seed=args.seed)
        fitter = Fitter(logged["dataset"], cfg, device=args.device)
        fitter.init_from(init)
        adapted = out / tag / "adapted.safetensors"
        fit = fitter.fit(adapted, log_dir=str(out / tag / "fit"), progress=False)
        card = fitter.adaptation_report(init, adapted)
        other = nrmse_before_after(fitter, init, adapted, load_dataset(held_out["dataset"], fitter.robot))
        result, _ = ppo(f"{tag}/ppo", args.model, target, str(adapted))
        budgets_out.append({"minutes": minutes, "logged": logged["import"], "fit_steps": fit["steps"],
                            "fit_seconds": fit["train_seconds"], "nrmse_card": card, "nrmse_held_out": other,
                            **result})
    summary = {"task": args.task, "robot_variant": args.robot_variant, "variant": robot.variant.describe(),
               "model": args.model, "init": init, "mix": args.mix, "sim_minutes": args.sim_minutes,
               "robot_worlds": args.robot_worlds, "action_noise": args.action_noise,
               "eval_episodes": args.eval_episodes, "device": args.device, "baselines": baselines,
               "randomized": ("PPO on MuJoCo drawing the variant's randomize ranges over the nominal robot"
                              if ranges else "skipped: the variant has no randomize ranges"),
               "budgets": budgets_out}
    write_json(out / f"{args.name}.json", summary)
    plot_reality_gap(summary, out / f"{args.name}.png")
    print(json.dumps({"baselines": {k: v["eval_variant"]["mean_return"] for k, v in baselines.items()},
                      "budgets": {b["minutes"]: b["eval_variant"]["mean_return"] for b in budgets_out}}))
    return summary


def _robot_log(args: argparse.Namespace, variant: str, policy: str, folder: Path, minutes: float, seed: int) -> dict:
    """`minutes` of robot time (summed over `robot_worlds`) of the robot `variant` (a variant file) under the safe
    policy plus noise (as `flashnerd record --task ... --checkpoint ...` drives it), written as a robot log and
    imported back."""
    robot = variant_robot(task_cfgs(args.task)[0].robot, variant, check=False)
    steps = max(1, math.ceil(minutes * 60 / robot.control_dt / args.robot_worlds / args.traj_len)) * args.traj_len
    how = argparse.Namespace(task=args.task, device=args.device, robot_variant=variant, robot=None,
                             log_root="", load_run=None, checkpoint=policy, steps=steps, traj_len=args.traj_len,
                             dynamics=REFERENCE_BACKEND, num_worlds=args.robot_worlds, seed=seed, terrain=None,
                             action_noise=args.action_noise)
    source = policy_source(how, torch.Generator().manual_seed(seed))
    recorded = record(source.env.robot, args.robot_worlds, steps, folder / "recorded.h5", traj_len=args.traj_len,
                      seed=seed, source=source, progress=False)
    dataset_to_log(folder / "recorded.h5", folder / "robot_log.parquet")
    (folder / "recorded.h5").unlink()
    imported = import_logs([folder / "robot_log.parquet"], source.env.robot, folder / "robot.h5", args.traj_len)
    return {"dataset": str(folder / "robot.h5"), "import": {**imported, "interrupted": recorded["interrupted"]}}
