"""`flashnerd bench suite`: model-only accuracy and throughput of several models on several robots (Table I and
the radar plot of Fig. 4)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from flashnerd.cli.common import CLIError, check_device, check_file_stem, check_positive, check_writable
from flashnerd.training.suite import SuiteConfig, run_suite
from flashnerd.viz.suite import write_outputs


def add_parser(bsub: argparse._SubParsersAction) -> None:
    d = SuiteConfig()
    p = bsub.add_parser("suite", help="model-only accuracy and throughput of several models on several robots "
                                      "(Table I / Fig. 4): JSON, Markdown table, radar plot")
    p.add_argument("--robots", default=",".join(d.robots), help="comma-separated robot names or spec files")
    p.add_argument("--models", default=",".join(d.models), help="comma-separated model kinds")
    p.add_argument("--fit_seconds", type=float, default=d.fit_seconds, help="wall-time budget of each fit")
    p.add_argument("--fit_steps", type=int, default=d.fit_steps, help="optimizer-step cap of each fit")
    p.add_argument("--refit", action="store_true", help="fit even where a checkpoint exists in --checkpoint_dir")
    p.add_argument("--checkpoint_dir", default=d.checkpoint_dir,
                   help="checkpoints <dir>/<robot>/<model>.safetensors are reused; fitted ones are exported there")
    p.add_argument("--data_dir", default=d.data_dir, help="datasets and fitting checkpoints (reused if present)")
    p.add_argument("--record_worlds", type=int, default=d.record_worlds, help="worlds recorded for the training set")
    p.add_argument("--record_steps", type=int, default=d.record_steps, help="control steps per recorded world")
    p.add_argument("--traj_len", type=int, default=d.traj_len, help="steps per training trajectory")
    p.add_argument("--eval_rollouts", type=int, default=d.eval_rollouts, help="held-out rollouts per robot")
    p.add_argument("--horizons", default=",".join(map(str, d.horizons)), help="comma-separated NRMSE horizons")
    p.add_argument("--batches", default=",".join(map(str, d.batches)), help="comma-separated throughput batches")
    p.add_argument("--max_batch", type=int, default=None,
                   help="largest batch tried, halved while it does not fit (default 512000 on cuda, 65536 on cpu)")
    p.add_argument("--size", default=d.size, help="size class of every model: cpu, paper_small, paper")
    p.add_argument("--device", default=d.device, help="torch device")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed of recording and fitting")
    p.add_argument("--out_dir", default="docs/results", help="folder for <name>.json, <name>.md and <name>.png")
    p.add_argument("--name", default="model_suite", help="file stem of the outputs")
    p.set_defaults(func=run)


def _int_list(flag: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError as err:
        raise CLIError(f"--{flag} must be comma-separated integers, got '{text}'") from err
    for v in values:
        check_positive(flag, v)
    return values


def run(args: argparse.Namespace) -> dict:
    """Record, fit (or reuse), evaluate and time every model on every robot; write JSON, table and radar plot."""
    check_device(args.device)
    for name in ("fit_steps", "record_worlds", "record_steps", "traj_len", "eval_rollouts"):
        check_positive(name, getattr(args, name))
    check_file_stem(args.name)
    check_writable("out_dir", args.out_dir)
    check_writable("checkpoint_dir", args.checkpoint_dir)
    if args.fit_seconds < 0:
        raise CLIError(f"--fit_seconds must be >= 0, got {args.fit_seconds}")
    max_batch = args.max_batch or (512_000 if args.device.startswith("cuda") else 65_536)
    check_positive("max_batch", max_batch)
    cfg = SuiteConfig(
        robots=tuple(args.robots.split(",")), models=tuple(args.models.split(",")), data_dir=args.data_dir,
        checkpoint_dir=args.checkpoint_dir, refit=args.refit, fit_seconds=args.fit_seconds, fit_steps=args.fit_steps,
        record_worlds=args.record_worlds, record_steps=args.record_steps, traj_len=args.traj_len,
        eval_rollouts=args.eval_rollouts, horizons=_int_list("horizons", args.horizons),
        batches=_int_list("batches", args.batches), max_batch=max_batch, size=args.size, device=args.device,
        seed=args.seed, command="flashnerd " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    )
    try:
        results = run_suite(cfg)
    except ValueError as err:
        raise CLIError(str(err)) from err
    results["outputs"] = write_outputs(results, args.out_dir, args.name)
    print(json.dumps(results))
    return results
