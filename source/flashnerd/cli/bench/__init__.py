"""`flashnerd bench ...`: benchmarks that print JSON, one module per subcommand (every speed claim is measured here)."""

from __future__ import annotations

import argparse

from flashnerd.cli.bench import coupled, env, finetune, model, plan, ppo, reaction, reality_gap, suite

SUBCOMMANDS = (env, model, ppo, suite, coupled, finetune, plan, reality_gap, reaction)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `flashnerd bench` and each subcommand's parser."""
    p = sub.add_parser("bench", help="benchmarks that print JSON")
    bsub = p.add_subparsers(dest="bench", required=True)
    for command in SUBCOMMANDS:
        command.add_parser(bsub)
