"""`flashnerd record`: exploration trajectories from the analytical backend into an HDF5 dataset."""

from __future__ import annotations

import argparse
import json

from flashnerd.cli.common import check_positive
from flashnerd.data.record import record
from flashnerd.robots import get_robot


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record trajectories to HDF5 for fitting learned models")
    p.add_argument("--robot", default="anymal_c", help="robot name")
    p.add_argument("--num_worlds", type=int, default=256, help="parallel worlds")
    p.add_argument("--steps", type=int, default=1000, help="control steps per world")
    p.add_argument("--traj_len", type=int, default=100, help="control steps per trajectory")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--out", required=True, help="output .h5 file (written to <out>.tmp, then renamed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    for name in ("num_worlds", "steps", "traj_len"):
        check_positive(name, getattr(args, name))
    result = record(get_robot(args.robot), args.num_worlds, args.steps, args.out, traj_len=args.traj_len,
                    seed=args.seed)
    print(json.dumps(result))
    return result
