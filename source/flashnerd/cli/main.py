"""Entry point of the `flashnerd` command: list-envs, train, play, eval, bench, record, fit, export-model,
fit-contact-head, evaluate-model, plan, plan-table, compare-video, report, convert-checkpoint, import-logs, improve,
variant."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from flashnerd.cli.common import CLIError
from flashnerd.envs.registry import registered_tasks, task_spec
from flashnerd.utils.allocator import retain_freed_memory

# The module (under flashnerd.cli) that registers each command, in the order of the help. A run imports only its
# command's module: most commands then start without importing rsl_rl or pandas (about half the start-up time).
COMMANDS = {"train": "train", "play": "play", "eval": "eval", "bench": "bench", "record": "record", "fit": "fit",
            "export-model": "fit", "fit-contact-head": "fit", "evaluate-model": "evaluate_model", "plan": "plan",
            "plan-table": "plan_table", "compare-video": "video", "report": "report",
            "convert-checkpoint": "convert", "import-logs": "import_logs", "improve": "improve", "variant": "variant"}


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


class _ExactFlagParser(argparse.ArgumentParser):
    """A parser (and, through `add_subparsers`, every command's) that takes only whole flags: argparse's default
    reads `--eval_episode` as `--eval_episodes`, so a misspelt flag in a script would pass unnoticed, and a later
    flag sharing the prefix would silently change what an old command line means."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. With `argv` naming a known command, only that command's module is imported and registered
    (its own help and errors are unchanged); otherwise every command's, for the top-level help and the docs."""
    parser = _ExactFlagParser(prog="flashnerd", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True)
    words = [a for a in argv or () if not a.startswith("-")]  # --debug is the only top-level option and takes no value
    command = words[0] if words else None
    if command not in COMMANDS:
        le = sub.add_parser("list-envs", help="list the registered task ids")
        le.add_argument("--json", action="store_true", help="print entry points as JSON")
        le.set_defaults(func=_list_envs)
    if command == "list-envs":
        modules = []
    else:
        modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        module = importlib.import_module(f"flashnerd.cli.{name}")
        if name == "bench":
            module.add_parser(sub, words[1] if len(words) > 1 else None)
        else:
            module.add_parser(sub)
    return parser


def _one_line(err: BaseException) -> str:
    """An exception's message on one line (libraries sometimes raise multi-line ones), at most 1000 characters: long
    enough for the list of every task id, short enough that a library's dump does not flood the terminal."""
    return " ".join(str(err).split())[:1000]


def main(argv: list[str] | None = None) -> int:
    """Run the command; user errors print one line to stderr and exit with status 2."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    retain_freed_memory()  # CPU steps and fits allocate MB-sized tensors every step (utils/allocator.py)
    try:
        args.func(args)
    except (CLIError, ValueError, OSError) as err:  # OSError: missing, unreadable and unwritable files
        if args.debug:
            raise
        print(f"flashnerd {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as err:
        # torch reports a failed CPU or CUDA allocation as a RuntimeError; any other RuntimeError is a bug to show
        if args.debug or not (isinstance(err, MemoryError) or _allocation_failed(err)):
            raise
        worlds = getattr(args, "num_envs", None) or getattr(args, "num_worlds", None)
        print(f"flashnerd {args.command}: error: out of memory ({_one_line(err) or 'allocation failed'})"
              + (f" with {worlds} worlds; lower --num_envs/--num_worlds" if worlds else ""), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = "; where it saved work, the same command with --resume continues it" if hasattr(args, "resume") else ""
        print(f"flashnerd {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
    return 0


def _allocation_failed(err: RuntimeError) -> bool:
    """Whether torch's RuntimeError says an allocation failed (its CPU allocator's or CUDA's out-of-memory)."""
    text = str(err)
    return "DefaultCPUAllocator" in text or "can't allocate memory" in text or "out of memory" in text.lower()


if __name__ == "__main__":
    sys.exit(main())
