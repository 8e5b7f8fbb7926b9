"""`flashnerd plan`: DIAL-MPC platform climbing, planning with a chosen dynamics backend and executing in MuJoCo."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from flashnerd.cli.common import CLIError, check_device, check_positive, checkpoints_by_kind, write_json
from flashnerd.dynamics.learned import CHECKPOINT_DIR
from flashnerd.envs.registry import load_cfg_from_registry
from flashnerd.planning.climb import LEGACY_WEIGHTS, PlatformClimb, RolloutRecorder, climb_platform
from flashnerd.robots import get_robot
from flashnerd.sim.terrain import PLATFORM_HEIGHTS

PLANNING_BACKENDS = ("mujoco", "mjwarp", "flashnerd", "nerd", "rwm")


def _add_planner_args(p: argparse.ArgumentParser) -> None:
    """The arguments `plan` and `bench plan` share: learned checkpoints, planner settings, seed, device, compile."""
    p.add_argument("--dynamics_checkpoint", default="",
                   help="learned checkpoints as kind=path[,kind=path] (default: the task's shipped platform models)")
    p.add_argument("--num_samples", type=int, default=None, help="samples per planning iteration")
    p.add_argument("--horizon", type=int, default=None, help="control steps per plan")
    p.add_argument("--iterations", type=int, default=None, help="annealing iterations per control step")
    p.add_argument("--seed", type=int, default=0, help="random seed of the planner")
    p.add_argument("--device", default="cpu", help="torch device of the planning backends")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the reward's kinematics and a learned backend's contact features (default: "
                        "the task's setting, on; the first decision then takes seconds longer)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="climb platforms with DIAL-MPC on a chosen dynamics backend (JSON)")
    p.add_argument("--task", default="FlashNeRD-Climb-Platform-Anymal-C-v0", help="a task with a plan_cfg_entry_point")
    p.add_argument("--dynamics", default="flashnerd",
                   help=f"backend(s) the planner rolls out on, comma-separated: {', '.join(PLANNING_BACKENDS)}")
    p.add_argument("--platforms", default="0,1,2,3,4,5", help="comma-separated platform lanes (0-5, lowest first)")
    p.add_argument("--episode_s", type=float, default=None, help="seconds per platform")
    _add_planner_args(p)
    p.add_argument("--lookahead_in_stance", action=argparse.BooleanOptionalAction, default=None,
                   help="ask a foot in stance too to stand at the height of the surface just ahead of it (default: "
                        "the task's setting); --no-lookahead_in_stance keeps the lookahead to swinging feet")
    p.add_argument("--stand_at_goal", action=argparse.BooleanOptionalAction, default=None,
                   help="let the trot's swing height shrink to zero at the goal, so the robot ends standing (default: "
                        "the task's setting)")
    p.add_argument("--reward_weights", default="",
                   help="override reward weights as term=value[,term=value] (terms: forward, lane, heading, upright, "
                        "height, feet, ang_vel; default: the task's)")
    p.add_argument("--out", default=None,
                   help="also write the JSON (with base paths and planning times) to this file, after every "
                        "platform; an existing one written with the same planner settings gains these backends (so "
                        "backends can be run one at a time)")
    p.add_argument("--resume", action="store_true",
                   help="keep the platforms a backend already has in --out (same settings and checkpoint) and plan "
                        "only the others, e.g. after an interrupted run")
    p.add_argument("--record_rollouts", default=None,
                   help="write some planning rollouts as a ground-truth dataset (a learned backend's kept action "
                        "sequences are replayed in MuJoCo; planning times then include the replay)")
    p.add_argument("--record_per_call", type=int, default=4, help="rollouts kept per planning iteration")
    p.set_defaults(func=run)


def _lanes(text: str) -> list[int]:
    try:
        lanes = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise CLIError(f"--platforms takes comma-separated lanes 0-{len(PLATFORM_HEIGHTS) - 1}, got '{text}'") from err
    bad = [v for v in lanes if not 0 <= v < len(PLATFORM_HEIGHTS)]
    if bad or not lanes:
        raise CLIError(f"--platforms takes lanes 0-{len(PLATFORM_HEIGHTS) - 1}, got '{text}'")
    return lanes


def _backends(text: str) -> list[str]:
    """Comma-separated planning backends, each checked."""
    backends = [b for b in text.split(",") if b]
    unknown = [b for b in backends if b not in PLANNING_BACKENDS]
    if unknown or not backends:
        raise CLIError(f"unknown planning backend '{unknown[0] if unknown else text}'; choose from: "
                       f"{', '.join(PLANNING_BACKENDS)}")
    return backends


_SETTINGS = ("task", "seed", "num_samples", "horizon", "iterations", "episode_s", "lookahead_in_stance",
             "stand_at_goal", "weights", "device")
# files written before a setting was recorded ran with this value (none of them with another seed than 0: the
# seed-100 runs of docs/results.md went to files of their own)
_OLD_DEFAULTS = {"seed": 0, "lookahead_in_stance": True, "stand_at_goal": False, "weights": LEGACY_WEIGHTS}


def _earlier(path: Path | None, summary: dict) -> dict:
    """The backends of an earlier --out file written with the same settings ({} if there is none)."""
    if path is None or not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except ValueError as err:
        raise CLIError(f"--out '{path}' exists and is not JSON; remove it or choose another file") from err
    if any(old.get(k, _OLD_DEFAULTS.get(k)) != summary[k] for k in _SETTINGS):
        raise CLIError(f"--out '{path}' holds a run with other settings ({', '.join(_SETTINGS)}); remove it or "
                       "choose another file")
    return old.get("backends", {})


def _backend_result(checkpoint: str | None, results: list[dict], lanes: list[int]) -> dict:
    """A backend's entry: climbs over the platforms done so far (of `lanes`), the median planning time over all
    their decisions, and each platform's result."""
    return {"checkpoint": checkpoint, "climbs": sum(r["climbed"] for r in results), "platforms": len(results),
            "complete": len(results) == len(lanes),
            "median_planning_ms": float(np.median([ms for r in results for ms in r["planning_ms"]])),
            "per_platform": [{**r, "planning_ms": [round(ms, 1) for ms in r["planning_ms"]]} for r in results]}


def _resumable(old: dict | None, checkpoint: str | None) -> dict[int, dict]:
    """Platforms of an earlier entry of this backend that can be kept: same checkpoint, planning times recorded."""
    if not old or old.get("checkpoint") != checkpoint:
        return {}
    return {r["lane"]: r for r in old.get("per_platform", []) if "planning_ms" in r}


def _weights(text: str, weights: dict[str, float]) -> dict[str, float]:
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
    return out


def planning_cfg(args: argparse.Namespace):
    """The task's `ClimbPlanCfg` with the command line's overrides (samples, horizon, iterations, episode, flags,
    reward weights)."""
    cfg = load_cfg_from_registry(args.task, "plan_cfg_entry_point")
    cfg = dataclasses.replace(cfg, weights=_weights(getattr(args, "reward_weights", ""), cfg.weights))
    planner = dataclasses.replace(cfg.planner, **{k: v for k, v in (
        ("num_samples", args.num_samples), ("horizon", args.horizon), ("iterations", args.iterations)) if v})
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


def run(args: argparse.Namespace) -> dict:
    """Climb every requested platform with each backend; print (and optionally write) JSON keyed by backend, each
    with `climbs` and `median_planning_ms`."""
    for name in ("num_samples", "horizon", "iterations", "record_per_call"):
        check_positive(name, getattr(args, name))
    if args.episode_s is not None and not args.episode_s > 0:
        raise CLIError(f"--episode_s must be positive, got {args.episode_s}")
    check_device(args.device)
    lanes = _lanes(args.platforms)
    backends = _backends(args.dynamics)
    if args.resume and not args.out:
        raise CLIError("--resume keeps the platforms already in --out; name the file with --out")
    if args.resume and args.record_rollouts:
        raise CLIError("--resume skips platforms whose rollouts --record_rollouts would then miss; record in a run "
                       "without --resume")
    checkpoints = checkpoints_by_kind(args.dynamics_checkpoint)
    cfg = planning_cfg(args)
    planner = cfg.planner
    robot = get_robot(cfg.robot)
    recorder = RolloutRecorder(args.record_per_call, seed=args.seed) if args.record_rollouts else None
    summary = {"task": args.task, "seed": args.seed, "num_samples": planner.num_samples, "horizon": planner.horizon,
               "iterations": planner.iterations, "episode_s": cfg.episode_s,
               "lookahead_in_stance": cfg.lookahead_in_stance, "stand_at_goal": cfg.stand_at_goal,
               "weights": cfg.weights, "threads": torch.get_num_threads(),
               "device": args.device, "backends": {}}
    out = Path(args.out) if args.out else None
    earlier = _earlier(out, summary)
    for backend in backends:
        kwargs = backend_kwargs(cfg, robot, backend, checkpoints)
        kept = _resumable(earlier.get(backend), checkpoints.get(backend)) if args.resume else {}
        results = []
        for lane in lanes:
            if lane in kept:
                results.append(kept[lane])
                continue
            with tqdm(total=round(cfg.episode_s / robot.control_dt), desc=f"{backend} platform {lane}", unit="step",
                      disable=None) as bar:
                results.append(climb_platform(cfg, robot, backend, lane, seed=args.seed + lane, dynamics_kwargs=kwargs,
                                              device=args.device, progress=lambda k, _: bar.update(k - bar.n),
                                              recorder=recorder))
            done = results[-1]  # one line per platform on stderr: a run in the background (no progress bar) shows it
            verdict = "climbed" if done["climbed"] else "not climbed"
            print(f"{backend} platform {lane} ({done['height']:.3f} m): {verdict}, median "
                  f"{done['median_planning_ms']:.0f} ms per decision", file=sys.stderr, flush=True)
            if out is not None:  # after every platform: an interrupted run loses one platform at most
                entry = _backend_result(checkpoints.get(backend), results, lanes)
                write_json(out, {**summary, "backends": {**earlier, **summary["backends"], backend: entry}})
        # platforms all kept by --resume are not written: the file already holds them (and maybe more)
        summary["backends"][backend] = _backend_result(checkpoints.get(backend), results, lanes)
    drop = ("base_path", "planning_ms")
    brief = {**summary, "backends": {b: {**r, "per_platform": [{k: v for k, v in p.items() if k not in drop}
                                                               for p in r["per_platform"]]}
                                     for b, r in summary["backends"].items()}}
    print(json.dumps(brief))
    if recorder is not None:
        summary["recorded"] = recorder.write(args.record_rollouts, robot, "platforms", {"seed": args.seed})
        print(json.dumps(summary["recorded"]))
    return summary


def add_bench_parser(bsub: argparse._SubParsersAction) -> None:
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
    _add_planner_args(p)
    p.set_defaults(func=run_bench, episode_s=None)


def run_bench(args: argparse.Namespace) -> dict:
    """Every backend plans the same platform from the same start; decisions are made in turns (a block of each backend,
    then the next), and each backend's median planning time and its ratio to the first backend are printed as JSON."""
    for name in ("decisions", "turns", "num_samples", "horizon", "iterations"):
        check_positive(name, getattr(args, name))
    if args.warmup < 0:
        raise CLIError(f"--warmup must be zero or more, got {args.warmup}")
    check_device(args.device)
    _lanes(str(args.platform))
    backends = _backends(args.dynamics)
    checkpoints = checkpoints_by_kind(args.dynamics_checkpoint)
    cfg = planning_cfg(args)
    robot = get_robot(cfg.robot)
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
           "iterations": cfg.planner.iterations, "compile": cfg.compile, "threads": torch.get_num_threads(),
           "device": args.device, "decisions": args.decisions, "turns": args.turns, "backends": {
               b: {"median_planning_ms": round(float(np.median(ms)), 1),
                   "p10_ms": round(float(np.percentile(ms, 10)), 1), "p90_ms": round(float(np.percentile(ms, 90)), 1),
                   "warmup_ms": [round(m, 1) for m in first[b]], "checkpoint": checkpoints.get(b)}
               for b, ms in timed.items()}}
    base = out["backends"][backends[0]]["median_planning_ms"]
    out["ratio_to_" + backends[0]] = {b: round(r["median_planning_ms"] / base, 3) for b, r in out["backends"].items()}
    print(json.dumps(out))
    return out
