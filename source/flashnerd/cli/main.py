"""Entry point of the `flashnerd` command: list-envs, train, play, eval, bench, record, fit, evaluate-model, plan,
plan-table, compare-video, report, convert-checkpoint, import-logs, improve, variant."""

from __future__ import annotations

import argparse
import json
import sys

from flashnerd.cli import (
    bench,
    convert,
    eval,
    evaluate_model,
    fit,
    import_logs,
    improve,
    plan,
    plan_table,
    play,
    record,
    report,
    train,
    variant,
    video,
)
from flashnerd.cli.common import CLIError
from flashnerd.envs.registry import registered_tasks, task_spec
from flashnerd.utils.allocator import retain_freed_memory


def _list_envs(args: argparse.Namespace) -> list[dict]:
    rows = []
    for task in registered_tasks():
        kw = task_spec(task).kwargs
        rows.append({"task": task, "env_cfg_entry_point": kw.get("env_cfg_entry_point"),
                     "rsl_rl_cfg_entry_point": kw.get("rsl_rl_cfg_entry_point")})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for row in rows:
            print(row["task"])
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flashnerd", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True)
    le = sub.add_parser("list-envs", help="list the registered task ids")
    le.add_argument("--json", action="store_true", help="print entry points as JSON")
    le.set_defaults(func=_list_envs)
    train.add_parser(sub)
    play.add_parser(sub)
    eval.add_parser(sub)
    bench.add_parser(sub)
    record.add_parser(sub)
    fit.add_parser(sub)
    evaluate_model.add_parser(sub)
    plan.add_parser(sub)
    plan_table.add_parser(sub)
    video.add_parser(sub)
    report.add_parser(sub)
    convert.add_parser(sub)
    import_logs.add_parser(sub)
    improve.add_parser(sub)
    variant.add_parser(sub)
    return parser


def _one_line(err: BaseException) -> str:
    """An exception's message on one line (libraries sometimes raise multi-line ones), at most 1000 characters: long
    enough for the list of every task id, short enough that a library's dump does not flood the terminal."""
    return " ".join(str(err).split())[:1000]


def main(argv: list[str] | None = None) -> int:
    """Run the command; user errors print one line to stderr and exit with status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    retain_freed_memory()  # CPU steps and fits allocate MB-sized tensors every step (utils/allocator.py)
    try:
        args.func(args)
    except (CLIError, ValueError, OSError) as err:  # OSError: missing, unreadable and unwritable files
        if args.debug:
            raise
        print(f"flashnerd {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except MemoryError as err:
        if args.debug:
            raise
        worlds = getattr(args, "num_envs", None) or getattr(args, "num_worlds", None)
        print(f"flashnerd {args.command}: error: out of memory ({_one_line(err) or 'allocation failed'})"
              + (f" with {worlds} worlds; lower --num_envs/--num_worlds" if worlds else ""), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"flashnerd {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
