"""The planner arguments that `flashnerd plan` and `flashnerd bench plan` share, and their parsing."""

from __future__ import annotations

import argparse
import dataclasses
import math

from flashnerd.cli.common import CLIError, add_variant_arg, refuse_unless
from flashnerd.dynamics import backend_names
from flashnerd.dynamics.learned import CHECKPOINT_DIR
from flashnerd.envs.registry import load_cfg_from_registry
from flashnerd.sim.terrain import PLATFORM_HEIGHTS


def add_planner_args(p: argparse.ArgumentParser) -> None:
    """The arguments `plan` and `bench plan` share: learned checkpoints, planner settings, seed, device, compile."""
    p.add_argument("--dynamics_checkpoint", default="",
                   help="learned checkpoints as kind=path[,kind=path] (default: the task's shipped platform models)")
    add_variant_arg(p)
    p.add_argument("--num_samples", type=int, default=None, help="samples per planning iteration")
    p.add_argument("--horizon", type=int, default=None, help="control steps per plan")
    p.add_argument("--iterations", type=int, default=None, help="annealing iterations per control step")
    p.add_argument("--grad_steps", type=int, default=None,
                   help="gradient refinement: Adam steps on the sampled plan through a differentiable rollout of the "
                        "learned planning model, keeping the best plan it scores (default 0: sampling alone)")
    p.add_argument("--grad_lr", type=float, default=None, help="Adam step of the refinement, in action units")
    p.add_argument("--seed", type=int, default=0, help="random seed of the planner")
    p.add_argument("--device", default="cpu", help="torch device of the planning backends")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the reward and a learned backend's contact features, input frame, state "
                        "update and attention (default: the task's setting, on; the first decision then takes "
                        "seconds longer)")


def parse_lanes(text: str) -> list[int]:
    try:
        lanes = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise CLIError(f"--platforms takes comma-separated lanes 0-{len(PLATFORM_HEIGHTS) - 1}, got '{text}'") from err
    bad = [v for v in lanes if not 0 <= v < len(PLATFORM_HEIGHTS)]
    if bad or not lanes:
        raise CLIError(f"--platforms takes lanes 0-{len(PLATFORM_HEIGHTS) - 1}, got '{text}'")
    return lanes


def parse_backends(text: str) -> list[str]:
    """Comma-separated planning backends, each checked."""
    backends = [b for b in text.split(",") if b]
    planning = backend_names(planning=True)
    unknown = [b for b in backends if b not in planning]
    if unknown or not backends:
        raise CLIError(f"unknown planning backend '{unknown[0] if unknown else text}'; choose from: "
                       f"{', '.join(planning)}")
    return backends


def check_refinable(cfg, backends: list[str]) -> None:
    """One-line error, before any planning, when gradient refinement is asked of a backend without gradients."""
    learned = backend_names(learned=True, planning=True)
    plain = [b for b in backends if b not in learned]
    if cfg.planner.grad_steps and plain:
        raise CLIError(f"--grad_steps needs learned planning backends ({', '.join(learned)}); "
                       f"{', '.join(plain)} has no gradients: drop it from --dynamics, or drop --grad_steps")


def parse_weights(text: str, weights: dict[str, float]) -> dict[str, float]:
    """`weights` with the overrides of --reward_weights "term=value[,term=value]"; anything else is a one-line error."""
    out = dict(weights)
    for item in (i for i in text.split(",") if i):
        term, _, value = item.partition("=")
        if term not in weights:
            raise CLIError(f"--reward_weights: unknown term '{term}'; terms: {', '.join(weights)}")
        try:
            out[term] = float(value)
        except ValueError as err:
            raise CLIError(f"--reward_weights takes term=value[,term=value], got '{item}'") from err
        if not math.isfinite(out[term]):
            raise CLIError(f"--reward_weights: '{term}' must be a finite number, got '{value}'")
    return out


def planning_cfg(args: argparse.Namespace):
    """The task's `ClimbPlanCfg` with the command line's overrides (samples, horizon, iterations, episode, flags,
    reward weights)."""
    cfg = load_cfg_from_registry(args.task, "plan_cfg_entry_point")
    cfg = dataclasses.replace(cfg, weights=parse_weights(getattr(args, "reward_weights", ""), cfg.weights))
    planner = dataclasses.replace(cfg.planner, **{k: v for k, v in (
        ("num_samples", args.num_samples), ("horizon", args.horizon), ("iterations", args.iterations),
        ("grad_steps", getattr(args, "grad_steps", None)), ("grad_lr", getattr(args, "grad_lr", None)))
        if v is not None})
    if planner.grad_steps < 0 or not (math.isfinite(planner.grad_lr) and planner.grad_lr > 0):
        raise CLIError(f"--grad_steps must be >= 0 and --grad_lr a finite number > 0, got {planner.grad_steps} and "
                       f"{planner.grad_lr}")
    refuse_unless(planner.grad_steps > 0, args, ("grad_lr",), "sets the refinement's step; add --grad_steps N")
    flags = {k: getattr(args, k) for k in ("compile", "lookahead_in_stance", "stand_at_goal")
             if getattr(args, k, None) is not None}
    return dataclasses.replace(cfg, planner=planner, episode_s=args.episode_s or cfg.episode_s, **flags)


def backend_kwargs(cfg, robot, backend: str, checkpoints: dict[str, str]) -> dict:
    """Backend arguments: the checkpoint given for a learned kind, else the task's shipped platform model (not the
    flat-ground one); records the choice in `checkpoints`."""
    shipped = CHECKPOINT_DIR / robot.name / cfg.checkpoints.get(backend, "-")
    if backend not in checkpoints and shipped.is_file():
        checkpoints[backend] = str(shipped)
    return {"checkpoint": checkpoints[backend]} if backend in checkpoints else {}
