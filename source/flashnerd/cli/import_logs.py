"""`flashnerd import-logs`: robot logs (Parquet or CSV, docs/reference/robot_logs.md) into an HDF5 dataset."""

from __future__ import annotations

import argparse
import json

from flashnerd.cli.common import check_positive, check_writable
from flashnerd.data.logs import import_logs
from flashnerd.robots import ROBOTS, get_robot


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-logs", help="import robot logs (Parquet/CSV) into a dataset for fitting")
    p.add_argument("logs", nargs="+", help="log files (.parquet or .csv), one row per sample")
    p.add_argument("--robot", default="anymal_c",
                   help=f"the robot the logs come from: {', '.join(sorted(ROBOTS))}, or a spec file "
                        "(path/to/robot.yaml)")
    p.add_argument("--out", required=True, help="output .h5 dataset")
    p.add_argument("--traj_len", type=int, default=100, help="control steps per trajectory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Import the logs and print the counts as JSON."""
    check_positive("traj_len", args.traj_len)
    check_writable("out", args.out)
    result = import_logs(args.logs, get_robot(args.robot), args.out, traj_len=args.traj_len)
    print(json.dumps(result))
    return result
