"""`flashnerd convert-checkpoint`: rewrite a pickled (format-1) dynamics checkpoint as safetensors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flashnerd.cli.common import CLIError, check_writable
from flashnerd.models.checkpoint import SUFFIX, convert_pickled


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert-checkpoint", help="rewrite a pickled dynamics checkpoint as safetensors")
    p.add_argument("src", help="format-1 checkpoint (.pt) written by an older `flashnerd fit`")
    p.add_argument("--out", default=None, help=f"output path (default: SRC with the suffix {SUFFIX})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    src = Path(args.src)
    out = Path(args.out) if args.out else src.with_suffix(SUFFIX)
    if out.resolve() == src.resolve():
        raise CLIError(f"--out '{out}' is the input file; write the converted checkpoint elsewhere")
    check_writable("out", out)
    result = convert_pickled(src, out)
    print(json.dumps(result))
    return result
