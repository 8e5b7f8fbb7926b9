"""`flashnerd train`: PPO (rsl-rl-lib) on any task and dynamics backend, or SHAC (`--algo shac`) through a
differentiable learned backend, with Isaac Lab's log layout."""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from flashnerd.cli.common import (
    CLIError,
    add_checkpoint_args,
    add_env_args,
    check_plain_name,
    check_positive,
    check_positive_number,
    check_writable,
    dump_yaml,
    load_task_cfgs,
    new_log_dir,
    refuse_unless,
    write_json,
)
from flashnerd.cli.overrides import add_override_arg, apply_overrides, of_root
from flashnerd.cli.policy import resolve_checkpoint
from flashnerd.dynamics.learned import MEMBER_MODES
from flashnerd.envs.evaluate import evaluate_on_backends
from flashnerd.envs.rsl_rl import make_runner
from flashnerd.envs.shac import ShacCfg, differentiable_cfg, make_shac
from flashnerd.models import MODEL_KINDS
from flashnerd.utils.distributed import dist_info, shutdown
from flashnerd.utils.seeding import seed_everything


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a policy on a task (PPO, or SHAC through a learned model)")
    add_env_args(p)
    add_checkpoint_args(p)
    p.add_argument("--algo", default="ppo", choices=ALGOS,
                   help="ppo (rsl-rl-lib, any backend) or shac (short-horizon actor-critic: gradients of the return "
                        "through the learned model; learned backends only)")
    p.add_argument("--shac_horizon", type=int, default=None,
                   help=f"SHAC: steps per differentiable rollout (default {ShacCfg.horizon})")
    p.add_argument("--max_iterations", type=int, default=None,
                   help="PPO iterations in all, counting those a resumed run already did (default: agent config)")
    p.add_argument("--max_seconds", type=float, default=None,
                   help="also stop once this invocation has trained this many seconds (rollouts + updates, summed "
                        "over iterations; setup and evaluation not counted), after the iteration that reaches it: "
                        "equal-wall-time comparisons across backends")
    p.add_argument("--save_interval", type=int, default=None,
                   help="iterations between checkpoints (default: agent config)")
    p.add_argument("--run_name", default=None, help="suffix of the run folder name")
    p.add_argument("--logger", default=None, choices=["tensorboard"], help="log writer")
    p.add_argument("--resume", action="store_true", help="continue from a checkpoint (--load_run/--checkpoint)")
    p.add_argument("--uncertainty_penalty", type=float, default=None,
                   help="on a learned ensemble (fit --ensemble K): reward -W x the members' disagreement per second, "
                        "so PPO stays where the model knows the robot (default 0: off)")
    p.add_argument("--uncertainty_threshold", type=float, default=None,
                   help="on a learned ensemble: end an episode where the disagreement exceeds this (default 0: off)")
    p.add_argument("--members", default=None, choices=MEMBER_MODES,
                   help="on a learned ensemble, what moves each world: the members' mean, a random member redrawn "
                        "every step, or one per episode (default: mean)")
    p.add_argument("--eval_episodes", type=int, default=64,
                   help="after training, evaluate this many episodes on the training backend and in MuJoCo (0: skip)")
    add_override_arg(p, roots="env, agent, and shac with --algo shac")
    p.set_defaults(func=run)


ALGOS = ("ppo", "shac")


def run(args: argparse.Namespace) -> dict:
    env_cfg, agent_cfg = load_task_cfgs(args)
    check_positive("max_iterations", args.max_iterations)
    check_positive("save_interval", args.save_interval)
    check_positive_number("max_seconds", args.max_seconds)
    if args.eval_episodes < 0:
        raise CLIError(f"--eval_episodes must be zero or positive, got {args.eval_episodes}")
    apply_uncertainty_args(args, env_cfg)
    if args.max_iterations is not None:
        agent_cfg.max_iterations = args.max_iterations
    if args.save_interval is not None:
        agent_cfg.save_interval = args.save_interval
    if args.run_name is not None:
        agent_cfg.run_name = args.run_name
    if args.logger is not None:
        agent_cfg.logger = args.logger
    apply_overrides({"env": env_cfg, "agent": agent_cfg}, args.overrides, later=("shac",), flags=vars(args))
    shac_cfg = shac_args(args, env_cfg)
    shac_items = of_root(args.overrides, "shac")
    if shac_items and shac_cfg is None:
        raise CLIError(f"override '{shac_items[0]}' sets SHAC's config; add --algo shac, or drop it")
    if shac_cfg is not None:
        apply_overrides({"shac": shac_cfg}, shac_items, flags=vars(args))
    refuse_unless(args.resume, args, ("checkpoint", "load_run"),
                  "only pick the run that --resume continues; add --resume, or drop them to train from scratch")
    check_plain_name("experiment_name", args.experiment_name)
    check_plain_name("run_name", args.run_name)
    check_writable("log_root", args.log_root)
    resume_path = None
    if args.resume:
        resume_path = resolve_checkpoint(args.log_root, agent_cfg.experiment_name, args.load_run, args.checkpoint)

    info = dist_info()
    if info.enabled:  # under torchrun, like Isaac Lab: one GPU and one seed per rank; rank 0 logs and saves
        if torch.device(env_cfg.device).type == "cuda":
            env_cfg.device = agent_cfg.device = f"cuda:{info.local_rank}"
        env_cfg.seed += info.rank
        agent_cfg.seed += info.rank

    seed_everything(agent_cfg.seed)
    log_dir = new_log_dir(args.log_root, agent_cfg.experiment_name, agent_cfg.run_name)
    if shac_cfg is not None:
        return run_shac(args, env_cfg, agent_cfg, shac_cfg, log_dir, resume_path)
    env, runner = make_runner(args.task, env_cfg, agent_cfg, str(log_dir) if info.is_main else None,
                              verbose=info.is_main, max_seconds=args.max_seconds)
    if info.is_main:
        save_params(log_dir, env, env_cfg, agent_cfg)
    remaining = agent_cfg.max_iterations
    if resume_path is not None:
        infos = runner.load(str(resume_path), map_location=agent_cfg.device)
        done = runner.current_learning_iteration + 1  # a checkpoint's "iter" is the last completed iteration
        runner.restore_progress(infos, done)
        remaining = agent_cfg.max_iterations - done
        if remaining < 1:
            raise CLIError(f"'{resume_path}' already completed {done} iterations; raise --max_iterations above that")
        runner.current_learning_iteration = done
        print(f"[flashnerd] resuming from {resume_path}: {done} iterations done, {remaining} to go")

    def save_last():
        if runner.last_completed_iteration < 0 or not info.is_main:
            return None
        runner.current_learning_iteration = runner.last_completed_iteration
        path = log_dir / f"model_{runner.last_completed_iteration}.pt"
        runner.save(str(path))
        return path

    wall = learn_timed(lambda: runner.learn(num_learning_iterations=remaining,
                                            init_at_random_ep_len=resume_path is None), save_last)
    env.close()
    if info.enabled:
        shutdown()
        if not info.is_main:
            return {}
    summary = finish(args, env_cfg, agent_cfg, runner, log_dir, wall, runner.current_learning_iteration,
                     runner.stopped_by_time)
    summary["processes"] = info.world_size
    print(json.dumps(summary))
    return summary


def learn_timed(learn, save_last) -> float:
    """Run `learn()` and return its wall time in seconds. On Ctrl-C, `save_last()` saves the policy after the last
    completed iteration (returning its path, or None when there is none), so `--resume` continues without a gap."""
    start = time.perf_counter()
    try:
        learn()
    except KeyboardInterrupt:
        path = save_last()
        if path is not None:
            print(f"[flashnerd] interrupted; saved {path}")
        raise
    return time.perf_counter() - start


def finish(args: argparse.Namespace, env_cfg, agent_cfg, runner, log_dir, wall: float, last_iteration: int,
           stopped_by_time: bool = False) -> dict:
    """Evaluate the trained policy on its backend and in MuJoCo (unless --eval_episodes 0); the run's summary
    (`iterations`: those the run has completed, fewer than asked when --max_seconds stopped it)."""
    evaluation = {}
    if args.eval_episodes > 0:
        policy = runner.get_inference_policy(device=agent_cfg.device)
        evaluation = evaluate_on_backends(args.task, env_cfg, policy, args.eval_episodes)
        write_json(log_dir / "eval.json", evaluation)
        print_comparison(evaluation, env_cfg.dynamics, args.eval_episodes)
    return {
        "task": args.task,
        "algo": args.algo,
        "dynamics": env_cfg.dynamics,
        "num_envs": env_cfg.num_envs,
        "iterations": last_iteration + 1,
        "stopped_by": "max_seconds" if stopped_by_time and last_iteration + 1 < agent_cfg.max_iterations
        else "max_iterations",
        "wall_time_s": round(wall, 2),
        "log_dir": str(log_dir),
        "checkpoint": str(log_dir / f"model_{last_iteration}.pt"),
        "eval": {backend: {k: m[k] for k in ("mean_return", "lin_vel_rms", "ang_vel_rms", "fall_rate")}
                 for backend, m in evaluation.items()},
    }


def shac_args(args: argparse.Namespace, env_cfg) -> ShacCfg | None:
    """SHAC's settings for --algo shac (None for PPO); SHAC options without it, or SHAC on a backend it cannot
    differentiate through, are one-line errors."""
    if args.algo != "shac":
        if args.shac_horizon is not None:
            raise CLIError("--shac_horizon sets SHAC's rollout length; add --algo shac, or drop it")
        return None
    if env_cfg.dynamics not in MODEL_KINDS:
        raise CLIError(f"--algo shac differentiates through a learned model, and '{env_cfg.dynamics}' is not one; "
                       f"use --dynamics {' / '.join(MODEL_KINDS)} (or --algo ppo on any backend)")
    if dist_info().enabled:
        raise CLIError("--algo shac runs in one process; start it without torchrun")
    cfg = ShacCfg()
    if args.shac_horizon is not None:
        check_positive("shac_horizon", args.shac_horizon)
        cfg.horizon = args.shac_horizon
    return cfg


def save_params(log_dir, env, env_cfg, agent_cfg, shac_cfg: ShacCfg | None = None) -> None:
    """The run's configs in `params/` (Isaac Lab's layout), and the robot variant `env` trains on as a checked copy
    (`params/robot_variant.yaml`): the file the config names may change or vanish, the policy's robot must not."""
    params = log_dir / "params"
    dump_yaml(params / "env.yaml", env_cfg)
    dump_yaml(params / "agent.yaml", agent_cfg)
    if shac_cfg is not None:
        dump_yaml(params / "shac.yaml", shac_cfg)
    variant = env.unwrapped.robot.variant  # the one read when the env was built
    if variant is not None:
        variant.write(params / "robot_variant.yaml")


def run_shac(args: argparse.Namespace, env_cfg, agent_cfg, shac_cfg: ShacCfg, log_dir, resume_path) -> dict:
    """`flashnerd train --algo shac`: SHAC with the agent config's actor and critic, rsl_rl's checkpoint layout. The
    training env's learned backend is made differentiable; the evaluation afterwards runs `env_cfg` as given."""
    env, runner, trainer = make_shac(args.task, env_cfg, agent_cfg, shac_cfg, str(log_dir))
    save_params(log_dir, env, differentiable_cfg(env_cfg, shac_cfg.grad_checkpoint), agent_cfg, shac_cfg)
    if resume_path is not None:
        trainer.load(str(resume_path))
        if trainer.iteration >= agent_cfg.max_iterations:
            raise CLIError(f"'{resume_path}' already completed {trainer.iteration} iterations; raise "
                           "--max_iterations above that")
        print(f"[flashnerd] resuming from {resume_path}: {trainer.iteration} iterations done")

    def save_last():
        if trainer.iteration == 0:
            return None
        path = log_dir / f"model_{trainer.iteration - 1}.pt"
        trainer.save(str(path))
        return path

    wall = learn_timed(lambda: trainer.learn(agent_cfg.max_iterations - trainer.iteration, agent_cfg.save_interval,
                                             max_seconds=args.max_seconds), save_last)
    env.close()
    summary = finish(args, env_cfg, agent_cfg, runner, log_dir, wall, trainer.iteration - 1, trainer.stopped_by_time)
    print(json.dumps(summary))
    return summary


def apply_uncertainty_args(args: argparse.Namespace, env_cfg) -> None:
    """--uncertainty_penalty, --uncertainty_threshold and --members into the task config (the env checks the values
    and that its backend is a learned ensemble)."""
    for name in ("uncertainty_penalty", "uncertainty_threshold"):
        if getattr(args, name) is not None:
            setattr(env_cfg, name, getattr(args, name))
    if args.members is not None:
        env_cfg.dynamics_kwargs = {**env_cfg.dynamics_kwargs, "members": args.members}


def print_comparison(evaluation: dict, trained_on: str, episodes: int) -> None:
    """The evaluated returns side by side, as a small table on stderr (stdout carries the JSON summary)."""
    lines = [f"[flashnerd] policy trained on '{trained_on}', evaluated for {episodes} episodes on each backend:",
             f"  {'backend':<10} {'return':>8} {'lin-vel RMS':>12} {'yaw-rate RMS':>13} {'falls':>7}"]
    for backend, m in evaluation.items():
        falls = f"{round(m['fall_rate'] * episodes)}/{episodes}"
        spread = f"  ensemble disagreement {m['model_disagreement']:.3f}" if "model_disagreement" in m else ""
        lines.append(f"  {backend:<10} {m['mean_return']:>8.2f} {m['lin_vel_rms']:>12.3f} {m['ang_vel_rms']:>13.3f} "
                     f"{falls:>7}{spread}")
    print("\n".join(lines), file=sys.stderr)


__all__ = ["add_parser", "apply_uncertainty_args", "print_comparison", "run"]
