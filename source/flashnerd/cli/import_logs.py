"""`flashnerd import-logs`: robot logs (Parquet or CSV, or ROS 2 bags; docs/reference/robot_logs.md) into an HDF5
dataset."""

from __future__ import annotations

import argparse
import json

from flashnerd.cli.common import CLIError, check_positive, check_writable
from flashnerd.data.logs import import_logs
from flashnerd.data.rosbag import ROLES, STAMPS, is_bag, topics_of
from flashnerd.robots import ROBOTS, get_robot


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-logs", help="import robot logs (Parquet/CSV, ROS 2 bags) into a dataset for fitting")
    p.add_argument("logs", nargs="+",
                   help="log files (.parquet or .csv, one row per sample) or ROS 2 bags (rosbag2 folder, .mcap, .db3)")
    p.add_argument("--robot", default="anymal_c",
                   help=f"the robot the logs come from: {', '.join(sorted(ROBOTS))}, or a spec file "
                        "(path/to/robot.yaml)")
    p.add_argument("--out", required=True, help="output .h5 dataset")
    p.add_argument("--traj_len", type=int, default=100, help="control steps per trajectory")
    p.add_argument("--stamps", default="header", choices=STAMPS,
                   help="a bag's message times: header (the stamps, when each sample was measured) or received (when "
                        "the bag received it: for topics stamped by different clocks)")
    p.add_argument("--topics", default=None,
                   help="a bag's topics where they are not the defaults, as role=/topic[,role=/topic]: "
                        + ", ".join(f"{role} (default {topic})" for role, topic in ROLES.items()))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Import the logs and print the counts as JSON."""
    check_positive("traj_len", args.traj_len)
    check_writable("out", args.out)
    topics = topics_of(args.topics)
    if (args.topics is not None or args.stamps != "header") and not any(is_bag(p) for p in args.logs):
        raise CLIError("--topics and --stamps read a bag's topics, and no log given is a ROS 2 bag; drop them")
    result = import_logs(args.logs, get_robot(args.robot), args.out, traj_len=args.traj_len, topics=topics,
                         stamps=args.stamps)
    print(json.dumps(result))
    return result
