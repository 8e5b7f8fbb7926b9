"""`flashnerd bench plan`: planning time per decision of several backends on one platform, measured in turns."""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
import torch

from flashnerd.cli.common import CLIError, check_device, check_positive, checkpoints_by_kind
from flashnerd.cli.plan_args import (
    add_planner_args,
    backend_kwargs,
    check_refinable,
    parse_backends,
    parse_lanes,
    planning_cfg,
)
from flashnerd.planning.climb import PlatformClimb
from flashnerd.sim.scene import variant_robot
from flashnerd.sim.terrain import PLATFORM_HEIGHTS
from flashnerd.utils.machine import describe_machine


def add_parser(bsub: argparse._SubParsersAction) -> None:
    """`flashnerd bench plan`: planning time per decision of several backends, measured in turns."""
    p = bsub.add_parser("plan", help="median DIAL-MPC planning time per decision of several backends on one platform, "
                                     "measured in turns (a drifting machine slows every backend alike)")
    p.add_argument("--task", default="FlashNeRD-Climb-Platform-Anymal-C-v0", help="a task with a plan_cfg_entry_point")
    p.add_argument("--dynamics", default="mujoco,flashnerd",
                   help="comma-separated planning backends; ratios are to the first")
    p.add_argument("--platform", type=int, default=3, help="platform lane (0-5)")
    p.add_argument("--decisions", type=int, default=60, help="timed decisions per backend")
    p.add_argument("--turns", type=int, default=6, help="the timed decisions are made in this many turns per backend")
    p.add_argument("--warmup", type=int, default=3, help="untimed decisions per backend first (compiling, caches)")
    add_planner_args(p)
    p.set_defaults(func=run, episode_s=None)


def run(args: argparse.Namespace) -> dict:
    """Every backend plans the same platform from the same start; decisions are made in turns (a block of each backend,
    then the next), and each backend's median planning time and its ratio to the first backend are printed as JSON."""
    for name in ("decisions", "turns", "num_samples", "horizon", "iterations"):
        check_positive(name, getattr(args, name))
    if args.warmup < 0:
        raise CLIError(f"--warmup must be zero or more, got {args.warmup}")
    check_device(args.device)
    parse_lanes(str(args.platform))
    backends = parse_backends(args.dynamics)
    checkpoints = checkpoints_by_kind(args.dynamics_checkpoint, backends)
    cfg = planning_cfg(args)
    check_refinable(cfg, backends)
    robot = variant_robot(cfg.robot, args.robot_variant)
    cfg = dataclasses.replace(cfg, episode_s=(args.warmup + args.decisions) * robot.control_dt)
    climbs = {b: PlatformClimb(cfg, robot, b, args.platform, seed=args.seed, device=args.device,
                               dynamics_kwargs=backend_kwargs(cfg, robot, b, checkpoints)) for b in backends}
    first = {b: [c.decide() for _ in range(args.warmup)] for b, c in climbs.items()}
    block = -(-args.decisions // args.turns)  # decisions per turn, rounded up
    timed: dict[str, list[float]] = {b: [] for b in backends}
    for _ in range(args.turns):
        for b, c in climbs.items():
            n = min(block, args.decisions - len(timed[b]))
            timed[b] += [c.decide() for _ in range(n)]
    for c in climbs.values():
        c.close()
    out = {"task": args.task, "platform": args.platform, "height": PLATFORM_HEIGHTS[args.platform],
           "num_samples": cfg.planner.num_samples, "horizon": cfg.planner.horizon,
           "iterations": cfg.planner.iterations, "grad_steps": cfg.planner.grad_steps,
           "grad_lr": cfg.planner.grad_lr if cfg.planner.grad_steps else None,
           "compile": cfg.compile, "threads": torch.get_num_threads(), "machine": describe_machine(args.device),
           "device": args.device, "decisions": args.decisions, "turns": args.turns, "backends": {
               b: {"median_planning_ms": round(float(np.median(ms)), 1),
                   "p10_ms": round(float(np.percentile(ms, 10)), 1), "p90_ms": round(float(np.percentile(ms, 90)), 1),
                   "warmup_ms": [round(m, 1) for m in first[b]], "checkpoint": checkpoints.get(b)}
               for b, ms in timed.items()}}
    base = out["backends"][backends[0]]["median_planning_ms"]
    out["ratio_to_" + backends[0]] = {b: round(r["median_planning_ms"] / base, 3) for b, r in out["backends"].items()}
    print(json.dumps(out))
    return out
