"""The documentation site builds with `mkdocs build --strict`, and its generated reference pages cover every registered
task and every CLI command."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_every_registered_task_is_in_the_generated_table(site):
    from flashnerd.envs.registry import registered_tasks

    html = (site / "reference" / "tasks.html").read_text()
    tasks = registered_tasks()
    assert tasks and all(f"<code>{task}</code>" in html for task in tasks)


def test_every_cli_command_is_in_the_generated_reference(site):
    from flashnerd.cli.main import build_parser

    html = (site / "reference" / "cli.html").read_text()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) >= 9
    for name in sub.choices:
        assert f"flashnerd {name}</h2>" in html or f"flashnerd {name}<a" in html, name


def test_the_quick_start_is_the_readme(site):
    html = (site / "index.html").read_text()
    assert ".13.0" in html and "Main job" in html and 'href="architecture.html"' in html


def _command_flags(words: list[str]) -> set[str] | None:
    """Every option string of `flashnerd WORDS...` (a bench subcommand included), or None for no such command."""
    from flashnerd.cli.main import COMMANDS, build_parser

    if words[0] not in COMMANDS:
        return None
    sub = next(a for a in build_parser(words)._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[words[0]]
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if nested and len(words) > 1 and words[1] in nested[0].choices:
        parser = nested[0].choices[words[1]]
    return {o for a in parser._actions for o in a.option_strings}


def test_every_flag_the_docs_and_scripts_write_is_a_whole_flag_of_its_command():
    """The CLI takes whole flags only (no argparse prefixes), so each `flashnerd CMD ... --flag` written in the README,
    the docs, the checkpoint cards and the scripts must name one of CMD's own flags exactly."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "checkpoints").rglob("*.md"),
             *(ROOT / "scripts").glob("*.sh")]
    wrong = []
    for path in files:
        text = path.read_text().replace("\\\n", " ")  # a command continued over lines is one command
        for m in re.finditer(r"flashnerd\s+([a-z][a-z-]*)(?:\s+([a-z][a-z-]*))?([^\n`\"'|;&]*)", text):
            words = [w for w in m.group(1, 2) if w]
            flags = _command_flags(words)
            if flags is None:  # prose such as "flashnerd is ...", or the package name in a path
                continue
            wrong += [f"{path.relative_to(ROOT)}: flashnerd {' '.join(words)} {flag}"
                      for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", m.group(3))
                      if flag not in flags]
    assert not wrong, wrong


def test_a_prefix_of_a_flag_is_refused():
    from flashnerd.cli.main import build_parser

    for command, whole, prefix in ((["train", "--task", "T"], "--eval_episodes", "--eval_episode"),
                                   (["bench", "ppo", "--task", "T"], "--max_iterations", "--max_iteration")):
        argv = [*command, whole, "3"]
        assert getattr(build_parser(argv).parse_args(argv), whole[2:]) == 3
        argv = [*command, prefix, "3"]
        with pytest.raises(SystemExit):
            build_parser(argv).parse_args(argv)
