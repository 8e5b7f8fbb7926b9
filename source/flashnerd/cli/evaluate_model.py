"""`flashnerd evaluate-model`: recursive-rollout NRMSE of a checkpoint on held-out trajectories (JSON)."""

from __future__ import annotations

import argparse
import json

import torch

from flashnerd.cli.common import CLIError, add_robot_file_arg, check_device, check_positive, load_robot_file_arg
from flashnerd.data.dataset import load_dataset
from flashnerd.dynamics import make_dynamics
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.robots import robot_of_record
from flashnerd.training.contact_head import contact_report
from flashnerd.training.evaluate import HORIZONS, rollout_errors


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate-model", help="long-horizon accuracy of a learned model")
    p.add_argument("--checkpoint", required=True, help="checkpoint written by `flashnerd fit`")
    p.add_argument("--data", required=True, help="held-out dataset (record it with another --seed)")
    p.add_argument("--num_rollouts", type=int, default=256, help="trajectories to roll out (at most)")
    p.add_argument("--horizons", default=",".join(map(str, HORIZONS)), help="comma-separated horizons")
    p.add_argument("--device", default="cpu", help="torch device")
    add_robot_file_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    load_robot_file_arg(args)
    check_positive("num_rollouts", args.num_rollouts)
    check_device(args.device)
    try:
        horizons = [int(h) for h in args.horizons.split(",")]
    except ValueError as err:
        raise CLIError(f"--horizons must be comma-separated positive integers, got '{args.horizons}'") from err
    if min(horizons) < 1:
        raise CLIError(f"--horizons must be comma-separated positive integers, got '{args.horizons}'")
    ckpt = read_checkpoint(args.checkpoint)
    robot = robot_of_record(ckpt["robot"], str(ckpt.get("robot_spec", "")))
    data = load_dataset(args.data, robot)
    n = min(args.num_rollouts, data.num_trajectories)
    data = data.select(torch.arange(n))
    # the model rolls out in the scene the data was recorded in (a contact-rows model sees its terrain)
    dyn = make_dynamics(ckpt["kind"], robot, n, device=args.device, terrain=str(data.attrs.get("terrain", "flat")),
                        checkpoint=args.checkpoint)
    errors = rollout_errors(dyn, data, horizons)
    result = {"checkpoint": args.checkpoint, "model": ckpt["kind"], "rollouts": n,
              "dropped_on_read": data.attrs["dropped_on_read"],
              "train_seconds": round(ckpt.get("train_seconds", 0.0), 1),
              "nrmse": {str(h): e["nrmse"] for h, e in errors.items()},
              **{key: {str(h): e[key] for h, e in errors.items()}
                 for key in ("base_pos_err_m", "base_rot_err_rad") if robot.floating_base},
              # an ensemble: its disagreement, and how well it ranks the rollouts by their error
              **{key: {str(h): e[key] for h, e in errors.items()}
                 for key in ("disagreement", "disagreement_quantiles", "disagreement_error_rank_corr")
                 if key in errors[min(errors)]}}
    contacts = contact_report(dyn, data)
    if contacts:  # the head and the probe estimate on the recorded states, per contact group
        result["contacts"] = contacts
    print(json.dumps(result))
    return result
