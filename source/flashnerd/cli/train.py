"""`flashnerd train`: PPO (rsl-rl-lib) on any task and dynamics backend, with Isaac Lab's log layout."""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
import torch

from flashnerd.cli.common import (
    CLIError,
    add_checkpoint_args,
    add_env_args,
    check_positive,
    dump_yaml,
    load_task_cfgs,
    make_env,
    new_log_dir,
    resolve_checkpoint,
)
from flashnerd.envs.rsl_rl import FlashNeRDRunner, RslRlVecEnvWrapper


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a PPO policy on a task")
    add_env_args(p)
    add_checkpoint_args(p)
    p.add_argument("--max_iterations", type=int, default=None, help="PPO iterations (default: the agent config's)")
    p.add_argument("--run_name", default=None, help="suffix of the run folder name")
    p.add_argument("--logger", default=None, choices=["tensorboard"], help="log writer")
    p.add_argument("--resume", action="store_true", help="continue from a checkpoint (--load_run/--checkpoint)")
    p.set_defaults(func=run)


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch so that a seeded run is repeatable."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run(args: argparse.Namespace) -> dict:
    env_cfg, agent_cfg = load_task_cfgs(args)
    check_positive("max_iterations", args.max_iterations)
    if args.max_iterations is not None:
        agent_cfg.max_iterations = args.max_iterations
    if args.run_name is not None:
        agent_cfg.run_name = args.run_name
    if args.logger is not None:
        agent_cfg.logger = args.logger
    resume_path = None
    if args.resume:
        resume_path = resolve_checkpoint(args.log_root, agent_cfg.experiment_name, args.load_run, args.checkpoint)

    seed_everything(agent_cfg.seed)
    env = RslRlVecEnvWrapper(make_env(args.task, env_cfg), clip_actions=agent_cfg.clip_actions)
    log_dir = new_log_dir(args.log_root, agent_cfg.experiment_name, agent_cfg.run_name)
    dump_yaml(log_dir / "params" / "env.yaml", env_cfg)
    dump_yaml(log_dir / "params" / "agent.yaml", agent_cfg)
    runner = FlashNeRDRunner(env, agent_cfg.to_rsl_rl_dict(), str(log_dir), device=agent_cfg.device)
    if resume_path is not None:
        print(f"[flashnerd] resuming from {resume_path}")
        runner.load(str(resume_path), map_location=agent_cfg.device)

    start = time.perf_counter()
    runner.learn(num_learning_iterations=agent_cfg.max_iterations, init_at_random_ep_len=True)
    wall = time.perf_counter() - start
    env.close()
    summary = {
        "task": args.task,
        "dynamics": env_cfg.dynamics,
        "num_envs": env_cfg.num_envs,
        "iterations": agent_cfg.max_iterations,
        "wall_time_s": round(wall, 2),
        "log_dir": str(log_dir),
        "checkpoint": str(log_dir / f"model_{runner.current_learning_iteration}.pt"),
    }
    print(json.dumps(summary))
    return summary


__all__ = ["CLIError", "add_parser", "run"]
