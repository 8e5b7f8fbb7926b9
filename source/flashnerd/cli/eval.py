"""`flashnerd eval`: run a policy for N episodes in any backend (default: the analytical one) and print metrics."""

from __future__ import annotations

import argparse
import json

from flashnerd.cli.common import add_checkpoint_args, add_env_args, check_positive
from flashnerd.cli.overrides import add_override_arg
from flashnerd.cli.policy import env_and_policy
from flashnerd.dynamics import REFERENCE_BACKEND
from flashnerd.envs.evaluate import evaluate_policy


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a policy over N episodes; prints JSON metrics")
    add_env_args(p)
    add_checkpoint_args(p)
    p.add_argument("--episodes", type=int, default=64, help="episodes to run (one per world)")
    add_override_arg(p)
    p.set_defaults(func=run, dynamics=REFERENCE_BACKEND)


def run(args: argparse.Namespace) -> dict:
    check_positive("episodes", args.episodes)
    args.num_envs = args.episodes
    env, _, policy, path, env_cfg = env_and_policy(args)
    metrics = evaluate_policy(env.unwrapped, lambda obs: policy(env.to_tensordict(obs)))
    env.close()
    result = {"task": args.task, "dynamics": env_cfg.dynamics, "checkpoint": str(path), **metrics}
    print(json.dumps(result))
    return result

