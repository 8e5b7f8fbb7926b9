"""`flashnerd bench ...`: benchmarks that print JSON, one module per subcommand (every speed claim is measured here)."""

from __future__ import annotations

import argparse
import importlib

# subcommand -> its module here, in the order of the help; a run imports only its own
SUBCOMMANDS = {"env": "env", "model": "model", "ppo": "ppo", "suite": "suite", "coupled": "coupled",
               "finetune": "finetune", "plan": "plan", "reality-gap": "reality_gap", "reaction": "reaction"}


def add_parser(sub: argparse._SubParsersAction, subcommand: str | None = None) -> None:
    """Register `flashnerd bench` and the parser of `subcommand` (a known one), or of every subcommand."""
    p = sub.add_parser("bench", help="benchmarks that print JSON")
    bsub = p.add_subparsers(dest="bench", required=True)
    for name in [subcommand] if subcommand in SUBCOMMANDS else SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{SUBCOMMANDS[name]}").add_parser(bsub)
