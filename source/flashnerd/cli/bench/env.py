"""`flashnerd bench env`: env-steps per second of a task on a backend, as JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import torch

from flashnerd.cli.common import add_env_args, check_positive, make_env
from flashnerd.cli.overrides import add_override_arg, task_cfgs_with_overrides
from flashnerd.dynamics import backend_info
from flashnerd.utils.machine import describe_machine


def add_parser(bsub: argparse._SubParsersAction) -> None:
    e = bsub.add_parser("env", help="env-steps per second of a task and backend")
    add_env_args(e, num_envs=1024)
    e.add_argument("--steps", type=int, default=50, help="timed control steps")
    e.add_argument("--warmup", type=int, default=5, help="untimed control steps first")
    add_override_arg(e)
    e.set_defaults(func=run)


def _env_steps_per_second(task: str, env_cfg, steps: int, warmup: int) -> float:
    env = make_env(task, env_cfg).unwrapped
    gen = torch.Generator(device=env.device).manual_seed(0)
    actions = torch.randn(steps + warmup, env.num_envs, env.num_actions, device=env.device, generator=gen)  # (T,N,na)
    for t in range(warmup):
        env.step(actions[t])
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)
    start = time.perf_counter()
    for t in range(warmup, warmup + steps):
        env.step(actions[t])
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)
    elapsed = time.perf_counter() - start
    env.close()
    return env.num_envs * steps / elapsed


def run(args: argparse.Namespace) -> dict:
    """Time the task's env on its backend; a threaded backend is timed on one thread too, in the same run."""
    check_positive("steps", args.steps)
    env_cfg, _ = task_cfgs_with_overrides(args)
    result = {"task": args.task, "dynamics": env_cfg.dynamics, "num_envs": env_cfg.num_envs,
              "device": env_cfg.device, "machine": describe_machine(env_cfg.device), "steps": args.steps}
    result["env_steps_per_s"] = round(_env_steps_per_second(args.task, env_cfg, args.steps, args.warmup), 1)
    if "nthread" in backend_info(env_cfg.dynamics).options():
        # Same run, one thread: the quotient shows how well the backend uses the cores.
        one = dataclasses.replace(env_cfg, dynamics_kwargs={**env_cfg.dynamics_kwargs, "nthread": 1})
        result["env_steps_per_s_1thread"] = round(_env_steps_per_second(args.task, one, args.steps, args.warmup), 1)
        result["thread_ratio"] = round(result["env_steps_per_s"] / result["env_steps_per_s_1thread"], 3)
        result["threads"] = env_cfg.dynamics_kwargs.get("nthread") or os.cpu_count()
    print(json.dumps(result))
    return result
