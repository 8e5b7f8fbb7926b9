"""`flashnerd bench reaction`: how hard a task's object pushes back on the robot along a policy's motion, against the
robot's own inertial force, measured in MuJoCo (JSON) — the case for two-way coupling on that task."""

from __future__ import annotations

import argparse
import json

import torch

from flashnerd.cli.common import CLIError, add_checkpoint_args, add_env_args, check_positive, load_task_cfgs
from flashnerd.cli.policy import load_policy, resolve_checkpoint
from flashnerd.dynamics import REFERENCE_BACKEND
from flashnerd.envs.rsl_rl import make_runner
from flashnerd.sim.reaction import ReactionMeter
from flashnerd.sim.scene import CUBE_MASS


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("reaction", help="the object's reaction on the robot against the robot's inertial force, "
                                         "along a policy's motion in MuJoCo")
    add_env_args(p, num_envs=16)
    add_checkpoint_args(p)
    p.add_argument("--steps", type=int, default=250, help="control steps")
    p.add_argument("--measured_worlds", type=int, default=8, help="worlds whose every substep is measured")
    p.set_defaults(func=run, dynamics=REFERENCE_BACKEND)


def run(args: argparse.Namespace) -> dict:
    """Drive the task in MuJoCo with the policy (--checkpoint/--load_run; without one, zero actions) for --steps
    control steps and print the RMS reaction, the RMS inertial force and their ratio (JSON)."""
    check_positive("steps", args.steps)
    check_positive("measured_worlds", args.measured_worlds)
    if args.dynamics != REFERENCE_BACKEND:
        raise CLIError(f"the reaction is measured in MuJoCo; drop --dynamics {args.dynamics}")
    env_cfg, agent_cfg = load_task_cfgs(args)
    if not env_cfg.objects:
        raise CLIError(f"task '{args.task}' has no scene object whose reaction could be measured")
    env, runner = make_runner(args.task, env_cfg, agent_cfg)
    path = None
    if args.checkpoint or args.load_run:
        path = resolve_checkpoint(args.log_root, agent_cfg.experiment_name, args.load_run, args.checkpoint)
        policy = load_policy(runner, path, agent_cfg.device)
    else:
        policy = lambda obs: torch.zeros(env.num_envs, env.num_actions, device=env.device)  # noqa: E731
    base = env.unwrapped
    try:
        meter = ReactionMeter(base.dyn, args.measured_worlds)
    except ValueError as err:
        raise CLIError(str(err)) from err
    base.dyn = meter
    obs = env.get_observations()
    with torch.inference_mode():
        for _ in range(args.steps):
            obs, *_ = env.step(policy(obs))
    env.close()
    out = {"task": args.task, "checkpoint": str(path) if path else None,
           "object_mass": env_cfg.object_mass or CUBE_MASS, "steps": args.steps,
           "measured_worlds": len(meter.datas), **meter.summary()}
    print(json.dumps(out))
    return out
