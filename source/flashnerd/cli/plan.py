"""`flashnerd plan`: DIAL-MPC platform climbing, planning with a chosen dynamics backend and executing in MuJoCo."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from flashnerd.cli.common import (
    CLIError,
    check_device,
    check_positive,
    check_writable,
    checkpoint_sha256,
    checkpoints_by_kind,
    refuse_unless,
    write_json,
)
from flashnerd.cli.plan_args import (
    add_planner_args,
    backend_kwargs,
    check_refinable,
    parse_backends,
    parse_lanes,
    planning_cfg,
)
from flashnerd.dynamics import backend_names
from flashnerd.planning.climb import RolloutRecorder, climb_platform
from flashnerd.sim.scene import variant_robot
from flashnerd.utils.hints import finite_number
from flashnerd.utils.machine import describe_machine

RECORD_PER_CALL = 4  # planning rollouts kept per iteration when recording them


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="climb platforms with DIAL-MPC on a chosen dynamics backend (JSON)")
    p.add_argument("--task", default="FlashNeRD-Climb-Platform-Anymal-C-v0", help="a task with a plan_cfg_entry_point")
    p.add_argument("--dynamics", default="flashnerd",
                   help="backend(s) the planner rolls out on, comma-separated: "
                        f"{', '.join(backend_names(planning=True))}")
    p.add_argument("--platforms", default="0,1,2,3,4,5", help="comma-separated platform lanes (0-5, lowest first)")
    p.add_argument("--episode_s", type=float, default=None, help="seconds per platform")
    add_planner_args(p)
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
                   help="keep the platforms a backend already has in --out (same settings, and a checkpoint of the "
                        "same content) and plan only the others, e.g. after an interrupted run")
    p.add_argument("--record_rollouts", default=None,
                   help="write some planning rollouts as a ground-truth dataset (a learned backend's kept action "
                        "sequences are replayed in MuJoCo; planning times then include the replay)")
    p.add_argument("--record_per_call", type=int, default=None,
                   help=f"rollouts kept per planning iteration (--record_rollouts; default {RECORD_PER_CALL})")
    p.set_defaults(func=run)


PLAN_SETTINGS = ("task", "seed", "num_samples", "horizon", "iterations", "episode_s", "lookahead_in_stance",
                 "stand_at_goal", "weights", "device", "robot_variant", "grad_steps", "grad_lr")
# a file written before a setting existed is read as holding its default (no refinement)
SETTING_DEFAULTS = {"grad_steps": 0, "grad_lr": None}


def is_backend_result(r: object) -> bool:
    """Whether `r` has the shape of a backend's entry in a plan JSON (what `--resume` and `flashnerd plan-table`
    read of it: its model's path and digest as text or null, each platform once)."""
    return (isinstance(r, dict) and isinstance(r.get("per_platform"), list)
        and all(isinstance(r.get(k), str | None) for k in ("checkpoint", "checkpoint_sha256")) and all(
        isinstance(p, dict) and isinstance(p.get("lane"), int) and finite_number(p.get("height"))
        and isinstance(p.get("climbed"), bool) and isinstance(p.get("planning_ms", []), list)
        and all(finite_number(ms) for ms in p.get("planning_ms", [])) for p in r["per_platform"])
        and len({p["lane"] for p in r["per_platform"]}) == len(r["per_platform"]))


def entry_sha256(entry: dict) -> str | None:
    """The digest of a backend entry's model: recorded, else (an entry written before digests were) the file's at its
    path now, None where that file is gone."""
    return entry.get("checkpoint_sha256") or checkpoint_sha256(entry.get("checkpoint"))


def same_checkpoint(a: dict, b: dict) -> bool:
    """Whether two backend entries of plan JSON planned with the same model. By content, so that a run made from
    another checkout (another absolute path to the same shipped file) counts as the same and a file refitted in place
    does not; where either digest is unknown (no digest recorded and no file at its path), by path."""
    if a.get("checkpoint") is None or b.get("checkpoint") is None:
        return a.get("checkpoint") == b.get("checkpoint")
    if not (a.get("checkpoint_sha256") or b.get("checkpoint_sha256")) and a["checkpoint"] == b["checkpoint"]:
        return True  # neither recorded a digest: the same path is all the two entries can tell
    da, db = entry_sha256(a), entry_sha256(b)
    return da == db if da is not None and db is not None else a["checkpoint"] == b["checkpoint"]


def _earlier(path: Path | None, summary: dict) -> dict:
    """The backends of an earlier --out file written with the same settings ({} if there is none)."""
    if path is None or not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except (ValueError, RecursionError) as err:
        raise CLIError(f"--out '{path}' exists and is not JSON; remove it or choose another file") from err
    if not (isinstance(old, dict) and isinstance(old.get("backends", {}), dict)
            and all(is_backend_result(r) for r in old.get("backends", {}).values())):
        raise CLIError(f"--out '{path}' exists and is not a `flashnerd plan --out` JSON (settings, and backends with "
                       "per_platform results); remove it or choose another file")
    if any(old.get(k, SETTING_DEFAULTS.get(k)) != summary[k] for k in PLAN_SETTINGS):
        raise CLIError(f"--out '{path}' holds a run with other settings ({', '.join(PLAN_SETTINGS)}); remove it or "
                       "choose another file")
    return old.get("backends", {})


def _backend_result(checkpoint: str | None, digest: str | None, results: list[dict], lanes: list[int]) -> dict:
    """A backend's entry: its model (path and content digest), climbs over the platforms done so far (of `lanes`),
    the median planning time over all their decisions, and each platform's result."""
    return {"checkpoint": checkpoint, "checkpoint_sha256": digest,
            "climbs": sum(r["climbed"] for r in results), "platforms": len(results),
            "complete": len(results) == len(lanes),
            "median_planning_ms": float(np.median([ms for r in results for ms in r["planning_ms"]])),
            "per_platform": [{**r, "planning_ms": [round(ms, 1) for ms in r["planning_ms"]]} for r in results]}


def _resumable(old: dict | None, checkpoint: str | None, digest: str | None) -> dict[int, dict]:
    """Platforms of an earlier entry of this backend that can be kept: same checkpoint (by content), planning times
    recorded."""
    if not old or not same_checkpoint(old, {"checkpoint": checkpoint, "checkpoint_sha256": digest}):
        return {}
    return {r["lane"]: r for r in old.get("per_platform", []) if "planning_ms" in r}


def run(args: argparse.Namespace) -> dict:
    """Climb every requested platform with each backend; print (and optionally write) JSON keyed by backend, each
    with `climbs` and `median_planning_ms`."""
    refuse_unless(args.record_rollouts is not None, args, ("record_per_call",),
                  "sets how many rollouts --record_rollouts keeps; add --record_rollouts FILE, or drop it")
    args.record_per_call = RECORD_PER_CALL if args.record_per_call is None else args.record_per_call
    for name in ("num_samples", "horizon", "iterations", "record_per_call"):
        check_positive(name, getattr(args, name))
    for flag in ("out", "record_rollouts"):
        if getattr(args, flag):
            check_writable(flag, getattr(args, flag))
    if args.episode_s is not None and not args.episode_s > 0:
        raise CLIError(f"--episode_s must be positive, got {args.episode_s}")
    check_device(args.device)
    lanes = parse_lanes(args.platforms)
    backends = parse_backends(args.dynamics)
    if args.resume and not args.out:
        raise CLIError("--resume keeps the platforms already in --out; name the file with --out")
    if args.resume and args.record_rollouts:
        raise CLIError("--resume skips platforms whose rollouts --record_rollouts would then miss; record in a run "
                       "without --resume")
    checkpoints = checkpoints_by_kind(args.dynamics_checkpoint, backends)
    cfg = planning_cfg(args)
    check_refinable(cfg, backends)
    planner = cfg.planner
    robot = variant_robot(cfg.robot, args.robot_variant)
    recorder = RolloutRecorder(args.record_per_call, seed=args.seed) if args.record_rollouts else None
    summary = {"task": args.task, "seed": args.seed, "num_samples": planner.num_samples, "horizon": planner.horizon,
               "iterations": planner.iterations, "grad_steps": planner.grad_steps,
               "grad_lr": planner.grad_lr if planner.grad_steps else None,
               "episode_s": cfg.episode_s,
               "lookahead_in_stance": cfg.lookahead_in_stance, "stand_at_goal": cfg.stand_at_goal,
               "weights": cfg.weights, "threads": torch.get_num_threads(), "device": args.device,
               "robot_variant": ({"name": robot.variant.name, "digest": robot.variant.digest()}
                                 if robot.variant else None),
               "backends": {}}
    out = Path(args.out) if args.out else None
    earlier = _earlier(out, summary)
    for backend in backends:
        kwargs = backend_kwargs(cfg, robot, backend, checkpoints)
        digest = checkpoint_sha256(checkpoints.get(backend))  # of the model as the run starts
        kept = _resumable(earlier.get(backend), checkpoints.get(backend), digest) if args.resume else {}
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
            # per platform: a run continued with --resume may have planned its platforms on other machines
            results[-1]["machine"] = describe_machine(args.device)
            done = results[-1]  # one line per platform on stderr: a run in the background (no progress bar) shows it
            verdict = "climbed" if done["climbed"] else "not climbed"
            print(f"{backend} platform {lane} ({done['height']:.3f} m): {verdict}, median "
                  f"{done['median_planning_ms']:.0f} ms per decision", file=sys.stderr, flush=True)
            if out is not None:  # after every platform: an interrupted run loses one platform at most
                entry = _backend_result(checkpoints.get(backend), digest, results, lanes)
                write_json(out, {**summary, "backends": {**earlier, **summary["backends"], backend: entry}})
        # platforms all kept by --resume are not written: the file already holds them (and maybe more)
        summary["backends"][backend] = _backend_result(checkpoints.get(backend), digest, results, lanes)
    drop = ("base_path", "planning_ms")
    brief = {**summary, "backends": {b: {**r, "per_platform": [{k: v for k, v in p.items() if k not in drop}
                                                               for p in r["per_platform"]]}
                                     for b, r in summary["backends"].items()}}
    print(json.dumps(brief))
    if recorder is not None:
        summary["recorded"] = recorder.write(args.record_rollouts, robot, "platforms", {"seed": args.seed})
        print(json.dumps(summary["recorded"]))
    return summary
