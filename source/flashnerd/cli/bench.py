"""`flashnerd bench env`: env-steps per second of a task on a backend, as JSON (speed claims are measured here)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import torch

from flashnerd.cli.common import CLIError, add_env_args, check_device, check_positive, load_task_cfgs, make_env


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks that print JSON")
    bsub = p.add_subparsers(dest="bench", required=True)
    e = bsub.add_parser("env", help="env-steps per second of a task and backend")
    add_env_args(e, num_envs=1024)
    e.add_argument("--steps", type=int, default=50, help="timed control steps")
    e.add_argument("--warmup", type=int, default=5, help="untimed control steps first")
    e.set_defaults(func=run_env)
    m = bsub.add_parser("model", help="model-only streaming throughput, FlashNeRD vs NeRD")
    m.add_argument("--robot", default="anymal_c", help="robot whose input/output sizes the models take")
    m.add_argument("--batch", default="16,1024,16384", help="comma-separated batch sizes")
    m.add_argument("--models", default="flashnerd,nerd", help="comma-separated model kinds")
    m.add_argument("--size", default="cpu", help="size class of both models: cpu, paper_small, paper")
    m.add_argument("--device", default="cpu", help="torch device")
    m.add_argument("--min_seconds", type=float, default=1.0, help="timed seconds per measurement (at least)")
    m.set_defaults(func=run_model)


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


def run_env(args: argparse.Namespace) -> dict:
    check_positive("steps", args.steps)
    env_cfg, _ = load_task_cfgs(args)
    result = {"task": args.task, "dynamics": env_cfg.dynamics, "num_envs": env_cfg.num_envs,
              "device": env_cfg.device, "steps": args.steps}
    result["env_steps_per_s"] = round(_env_steps_per_second(args.task, env_cfg, args.steps, args.warmup), 1)
    if env_cfg.dynamics == "mujoco":
        # Same run, one rollout thread: the quotient shows how well the backend uses the cores.
        one = dataclasses.replace(env_cfg, dynamics_kwargs={**env_cfg.dynamics_kwargs, "nthread": 1})
        result["env_steps_per_s_1thread"] = round(_env_steps_per_second(args.task, one, args.steps, args.warmup), 1)
        result["thread_ratio"] = round(result["env_steps_per_s"] / result["env_steps_per_s_1thread"], 3)
        result["threads"] = env_cfg.dynamics_kwargs.get("nthread") or os.cpu_count()
    print(json.dumps(result))
    return result


def run_model(args: argparse.Namespace) -> dict:
    from flashnerd.contacts import ProbeFeatures
    from flashnerd.dynamics.representation import StateRepresentation
    from flashnerd.robots import get_robot
    from flashnerd.sim.scene import build_scene
    from flashnerd.training.benchmark import model_steps_per_second

    check_device(args.device)
    robot = get_robot(args.robot)
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError as err:
        raise CLIError(f"--batch must be comma-separated integers, got '{args.batch}'") from err
    for b in batches:
        check_positive("batch", b)
    kinds = args.models.split(",")
    rep = StateRepresentation(robot.num_joints, ProbeFeatures(robot, build_scene(robot)).dim)
    results: dict[str, dict[str, float]] = {}
    for kind in kinds:
        results[kind] = {str(b): round(model_steps_per_second(kind, rep.input_dim, rep.target_dim, b, args.size,
                                                              args.device, args.min_seconds), 1) for b in batches}
    out = {"robot": robot.name, "device": args.device, "size": args.size, "threads": torch.get_num_threads(),
           "steps_per_s": results}
    if "flashnerd" in results and "nerd" in results:
        out["ratio"] = {b: round(results["flashnerd"][b] / results["nerd"][b], 2) for b in results["nerd"]}
    print(json.dumps(out))
    return out
