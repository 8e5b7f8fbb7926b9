"""`flashnerd record`: trajectories from the analytical backend into an HDF5 dataset, under exploration controls or
driven by a trained policy of a task (`--task` with `--checkpoint`/`--load_run`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from flashnerd.cli.common import (
    CLIError,
    add_variant_arg,
    check_device,
    check_positive,
    check_writable,
    checkpoint_sha256,
    refuse_unless,
    uninterrupted_cfg,
)
from flashnerd.cli.overrides import add_override_arg, apply_overrides
from flashnerd.cli.policy import load_policy, resolve_checkpoint
from flashnerd.data.dataset import robot_layout
from flashnerd.data.logs import OUT_SUFFIXES as LOG_SUFFIXES
from flashnerd.data.logs import dataset_to_log
from flashnerd.data.record import (
    PolicySource,
    finished_recording,
    merge_recordings,
    partial_path,
    record,
    stopped_batches,
)
from flashnerd.dynamics import REFERENCE_BACKEND, backend_names
from flashnerd.envs.memory import check_dynamics_memory, check_env_memory
from flashnerd.envs.registry import task_cfgs
from flashnerd.envs.rsl_rl import make_runner
from flashnerd.robots import get_robot
from flashnerd.sim.scene import variant_robot
from flashnerd.sim.terrain import TERRAINS
from flashnerd.utils.distributed import barrier, dist_info, init_distributed, shutdown


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record trajectories to HDF5 for fitting learned models")
    p.add_argument("--robot", default=None,
                   help="robot name or spec file (path/to/robot.yaml); default anymal_c, with --task the task's robot")
    p.add_argument("--num_worlds", type=int, default=256, help="parallel worlds")
    p.add_argument("--steps", type=int, default=1000, help="control steps per world")
    p.add_argument("--traj_len", type=int, default=100, help="control steps per trajectory")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--out", required=True, help="output .h5 file (batches kept in <out>.parts/ until it is complete); "
                                                "with --format logs a .parquet or .csv robot log, or a ROS 2 bag "
                                                "(.mcap or .db3)")
    p.add_argument("--format", default="hdf5", choices=("hdf5", "logs"),
                   help="hdf5: the dataset; logs: a robot log as a lab keeps one (docs/reference/robot_logs.md), "
                        "for `flashnerd import-logs`")
    p.add_argument("--dynamics", default=REFERENCE_BACKEND, choices=backend_names(analytical=True),
                   help="analytical backend to record")
    p.add_argument("--device", default="cpu", help="torch device (mjwarp runs on cuda; mujoco computes on the CPU)")
    p.add_argument("--terrain", default=None, choices=list(TERRAINS),
                   help="terrain to record on (default flat; with --task, the task's terrain unless given)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted recording (<out>.parts/) made with the same settings")
    add_variant_arg(p)
    g = p.add_argument_group("policy-driven recording (instead of exploration controls)")
    g.add_argument("--task", default=None, help="task whose trained policy drives the robot (mujoco backend)")
    g.add_argument("--checkpoint", default=None, help="policy checkpoint file, or a file-name regex inside the run")
    g.add_argument("--load_run", default=None, help="run folder name (regex) under the experiment's log folder")
    g.add_argument("--log_root", default=None, help=f"root of the log folders (default {LOG_ROOT})")
    g.add_argument("--action_noise", type=float, default=None,
                   help=f"largest per-world std of Gaussian noise added to the policy's actions (default "
                        f"{ACTION_NOISE})")
    add_override_arg(p)
    p.set_defaults(func=run)


LOG_ROOT = "logs/rsl_rl"  # where --load_run looks for runs (train's default)
ACTION_NOISE = 0.3  # default largest per-world std of the noise on a policy's actions


# config fields `record` sets itself, refused as overrides (the common flag-owned ones are refused by their flags)
RECORD_OWNS = {"env.num_envs": "--num_worlds", "env.terrain": "--terrain",
               "env.episode_length_s": "recording runs every world through --steps without time-outs"}


def policy_source(args: argparse.Namespace, gen: torch.Generator) -> PolicySource:
    """Task env on the mujoco backend (no time-outs, no interval pushes) driven by the loaded policy."""
    env_cfg, agent_cfg = task_cfgs(args.task, device=args.device, robot_variant=args.robot_variant, robot=args.robot)
    # the configs the policy was trained with (its observations, its network); what recording sets is refused
    apply_overrides({"env": env_cfg, "agent": agent_cfg}, args.overrides, flags=vars(args), owned_by=RECORD_OWNS)
    path = resolve_checkpoint(args.log_root, agent_cfg.experiment_name, args.load_run, args.checkpoint)
    # Worlds walk on through every batch (the last one may run past `steps`); falls still end a world's episode.
    env_cfg = dataclasses.replace(uninterrupted_cfg(env_cfg, args.steps + args.traj_len), dynamics=args.dynamics,
                                  num_envs=args.num_worlds, seed=args.seed, device=args.device,
                                  terrain=args.terrain or env_cfg.terrain)
    check_env_memory(args.task, env_cfg, None,
                     _buffer_bytes(get_robot(env_cfg.robot), args.traj_len), flag="--num_worlds")
    wrapped, runner = make_runner(args.task, env_cfg, agent_cfg)
    policy = load_policy(runner, path, args.device)
    clip = agent_cfg.clip_actions

    def act(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        actions = policy(wrapped.to_tensordict(obs))  # (N, na)
        return actions.clamp(-clip, clip) if clip is not None else actions

    # HDF5 attributes as well as the resume check: plain strings
    identity = {"task": args.task, "policy_sha256": checkpoint_sha256(path) or "",
                "overrides": json.dumps(list(args.overrides))}
    return PolicySource(wrapped.unwrapped, act, args.action_noise, gen, identity)


def record_policy(task: str, variant: str | None, policy: str, num_worlds: int, steps: int, traj_len: int,
                  action_noise: float, seed: int, device: str, out: Path,
                  overrides: Sequence[str] = (), robot: str | None = None) -> tuple[dict, object]:
    """`steps` control steps on each of `num_worlds` MuJoCo worlds of `task` (robot variant file `variant`, or the
    nominal robot; `robot` another robot for a task that takes any) driven by the policy checkpoint `policy` plus
    action noise, recorded to `out` (as `flashnerd record --task ... --checkpoint ...` does), with the
    `env.`/`agent.` overrides the policy was trained with. Returns
    `record`'s summary and the robot."""
    how = argparse.Namespace(task=task, device=device, robot_variant=variant, robot=robot, log_root="", load_run=None,
                             checkpoint=policy, steps=steps, traj_len=traj_len, dynamics=REFERENCE_BACKEND,
                             num_worlds=num_worlds, seed=seed, terrain=None, action_noise=action_noise,
                             overrides=list(overrides))
    source = policy_source(how, torch.Generator().manual_seed(seed))
    recorded = record(source.env.robot, num_worlds, steps, out, traj_len=traj_len, seed=seed, source=source,
                      progress=False)
    return recorded, source.env.robot


def run(args: argparse.Namespace) -> dict:
    """Record one dataset; under torchrun each rank records its shard of the worlds and rank 0 merges them."""
    for name in ("num_worlds", "steps", "traj_len"):
        check_positive(name, getattr(args, name))
    if (args.checkpoint or args.load_run) and args.task is None:
        raise CLIError("--checkpoint/--load_run drive recording with a policy; add --task TASK")
    if args.overrides and args.task is None:
        raise CLIError(f"override '{args.overrides[0]}' sets the config of a task's policy; add --task TASK (and "
                       "--checkpoint), or drop it")
    refuse_unless(args.task is not None, args, ("log_root", "action_noise"),
                  "apply to policy-driven recording; add --task TASK (and --checkpoint), or drop them")
    args.log_root = LOG_ROOT if args.log_root is None else args.log_root
    args.action_noise = ACTION_NOISE if args.action_noise is None else args.action_noise
    if args.steps < args.traj_len:
        raise CLIError(f"--steps {args.steps} is shorter than one trajectory (--traj_len {args.traj_len}); "
                       "record at least --traj_len steps")
    check_writable("out", args.out)
    if args.format == "logs" and Path(args.out).suffix not in LOG_SUFFIXES:
        raise CLIError(f"--format logs writes a robot log; --out must end in {' or '.join(LOG_SUFFIXES)}")
    if args.format == "hdf5" and Path(args.out).suffix in LOG_SUFFIXES:
        raise CLIError(f"--out {args.out} names a robot log; add --format logs, or write a .h5 dataset")
    if not math.isfinite(args.action_noise) or args.action_noise < 0:
        raise CLIError(f"--action_noise must be a finite number >= 0, got {args.action_noise}")
    check_device(args.device)
    info, device = init_distributed(args.device)
    if info.world_size > args.num_worlds:
        raise CLIError(f"--num_worlds {args.num_worlds} is fewer than the {info.world_size} processes")
    log_out = None
    if args.format == "logs":  # record the dataset next to the log, then write the log from it
        log_out, args.out = args.out, str(Path(args.out).with_name(Path(args.out).name + ".record.h5"))
    try:
        if not args.resume:
            _refuse_stopped_recording([_part_path(args.out, r) for r in range(info.world_size)] if info.enabled
                                      else [args.out])
            if info.enabled:  # every rank has looked before any writes its first batch
                barrier()
        shard = argparse.Namespace(**{**vars(args), "device": device})
        if info.enabled:  # this rank's worlds, its own seed and its own part file
            shard.num_worlds = args.num_worlds // info.world_size + (info.rank < args.num_worlds % info.world_size)
            shard.seed = args.seed + 100_003 * info.rank
            shard.out = _part_path(args.out, info.rank)
        expected = {"seed": shard.seed, "num_worlds": shard.num_worlds, "steps": args.steps, "traj_len": args.traj_len}
        if info.enabled and args.resume and finished_recording(shard.out, expected):
            result = {"out": str(shard.out)}  # this rank's shard was complete when the others stopped: merged as is
        else:
            result = _record_one(shard)
        if info.enabled:
            barrier()
            if info.is_main:
                parts = [_part_path(args.out, r) for r in range(info.world_size)]
                result = merge_recordings(parts, args.out, [args.seed + 100_003 * r for r in range(info.world_size)])
                result["transitions"] = result["trajectories"] * args.traj_len
            barrier()
        if log_out is not None and info.is_main:
            recorded = result["out"]
            result = {**result, **dataset_to_log(recorded, log_out)}
            Path(recorded).unlink()
    finally:
        shutdown()
    if info.is_main:
        print(json.dumps(result))
    return result


def _refuse_stopped_recording(outs: Sequence[str | Path]) -> None:
    """A recording started afresh would delete the batches a stopped one kept: refuse, naming --resume."""
    for out in outs:
        if done := stopped_batches(out):
            raise CLIError(f"'{partial_path(out)}' holds {done} complete batch(es) of a stopped recording of '{out}'; "
                           "add --resume to continue it, or delete that folder to record afresh")


def _part_path(out: str, rank: int) -> Path:
    path = Path(out)
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def _buffer_bytes(robot, traj_len: int) -> int:
    """Bytes a world's batch buffers take while recording (states, controls, torques, contacts, probes): this batch
    and the previous one (which a fall reaches back into), the rows kept of each, and the copy a write makes."""
    nq, nv, nu, _ = robot_layout(robot)
    width = nq + nv + 2 * nu + len(robot.all_contact_bodies) + len(robot.probes)
    return 5 * 4 * (traj_len + 1) * width


def _record_one(args: argparse.Namespace) -> dict:
    source = None
    robot = variant_robot(args.robot or "anymal_c", None if args.task else args.robot_variant)
    if args.task is None:
        check_dynamics_memory(args.dynamics, robot, args.num_worlds, args.device, args.terrain or "flat",
                              _buffer_bytes(robot, args.traj_len))
    else:
        source = policy_source(args, torch.Generator().manual_seed(args.seed))
        robot = source.env.robot
    return record(robot, args.num_worlds, args.steps, args.out, traj_len=args.traj_len, seed=args.seed,
                  source=source, resume=args.resume, progress=dist_info().is_main, backend=args.dynamics,
                  device=args.device, terrain=args.terrain or "flat")
