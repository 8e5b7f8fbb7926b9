"""`flashnerd eval`: run a policy for N episodes in any backend (default: the analytical one) and print metrics."""

from __future__ import annotations

import argparse
import json

from flashnerd.cli.common import (
    add_checkpoint_args,
    add_env_args,
    check_positive,
    load_policy,
    load_task_cfgs,
    make_env,
    resolve_checkpoint,
)
from flashnerd.envs.evaluate import evaluate_policy
from flashnerd.envs.rsl_rl import FlashNeRDRunner, RslRlVecEnvWrapper


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a policy over N episodes; prints JSON metrics")
    add_env_args(p)
    add_checkpoint_args(p)
    p.add_argument("--episodes", type=int, default=64, help="episodes to run (one per world)")
    p.set_defaults(func=run, dynamics="mujoco")


def run(args: argparse.Namespace) -> dict:
    check_positive("episodes", args.episodes)
    args.num_envs = args.episodes
    env_cfg, agent_cfg = load_task_cfgs(args)
    path = resolve_checkpoint(args.log_root, agent_cfg.experiment_name, args.load_run, args.checkpoint)
    env = RslRlVecEnvWrapper(make_env(args.task, env_cfg), clip_actions=agent_cfg.clip_actions)
    runner = FlashNeRDRunner(env, agent_cfg.to_rsl_rl_dict(), None, device=agent_cfg.device)
    policy = load_policy(runner, path, agent_cfg.device)
    metrics = evaluate_policy(env.unwrapped, lambda obs: policy(env.to_tensordict(obs)))
    env.close()
    result = {"task": args.task, "dynamics": env_cfg.dynamics, "checkpoint": str(path), **metrics}
    print(json.dumps(result))
    return result

