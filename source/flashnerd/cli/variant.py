"""`flashnerd variant`: check a robot variant file against its robot (compiled, as every command would), show what it
changes there (each value against the nominal robot's, and what each randomize range draws for), and write
the two variants a reality-gap study needs: its fixed robot (`--fixed`, nothing drawn) and its `randomize` ranges
alone over the nominal robot (`--ranges_only`, what a domain-randomized baseline trains on)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flashnerd.cli.common import CLIError, check_writable
from flashnerd.robots import ROBOTS, get_robot
from flashnerd.robots.variant import load_variant
from flashnerd.sim.scene import variant_robot
from flashnerd.sim.variant_report import variant_report


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("variant", help="check a robot variant file; write its fixed robot or its ranges alone")
    p.add_argument("file", help="robot variant YAML (see variants/)")
    p.add_argument("--robot", default=None,
                   help="the robot's spec file, for a variant of a robot from outside the package (bring your robot)")
    p.add_argument("--fixed", default=None, help="write the variant without its randomize ranges to this file")
    p.add_argument("--ranges_only", default=None,
                   help="write the nominal robot with the variant's randomize ranges alone to this file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Check the file (every regex, the actuation and the ranges against the compiled robot); print it as JSON with
    what it changes: every compiled value of its fixed robot that differs from the nominal robot's, its actuation,
    and the elements each randomize range draws for (sim/variant_report.py)."""
    variant = load_variant(args.file)
    if args.robot is not None:
        if get_robot(args.robot).name != variant.robot:
            raise CLIError(f"robot variant '{args.file}' is for robot '{variant.robot}'; --robot {args.robot} is robot "
                           f"'{get_robot(args.robot).name}'")
    elif variant.robot not in ROBOTS:
        raise CLIError(f"robot variant '{args.file}' is for robot '{variant.robot}', which is not built in; pass its "
                       "spec file (--robot path/to/robot.yaml)")
    robot = variant_robot(variant.robot, args.file)  # compiles the scene: what matches nothing fails here, in one line
    outputs = {"fixed": variant.fixed, "ranges_only": variant.ranges_only}
    seen = {Path(args.file).resolve(): "the variant file itself"}
    for flag in outputs:
        if getattr(args, flag) is not None:
            check_writable(flag, getattr(args, flag))
            target = Path(getattr(args, flag)).resolve()
            if target in seen:
                raise CLIError(f"--{flag} '{getattr(args, flag)}' is {seen[target]}; write each to a file of its own")
            seen[target] = f"--{flag}'s file too"
    if args.ranges_only is not None and not variant.randomized:
        raise CLIError(f"robot variant '{args.file}' has no randomize ranges; --ranges_only needs some")
    written = {}
    for flag, make in outputs.items():
        path = getattr(args, flag)
        if path is not None:
            make().write(path)
            variant_robot(variant.robot, path)  # the written file compiles as it is
            written[flag] = path
    out = {"variant": variant.name, "robot": variant.robot, "digest": variant.digest(),
           "randomize": variant.randomized, "written": written, **variant_report(robot)}
    print(json.dumps(out))
    return out
