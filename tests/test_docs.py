"""The documentation site builds with `mkdocs build --strict`, its generated reference pages cover every registered
task and every CLI command, and the commands and Python the pages show name what exists."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap
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


PYTHON_BLOCK = re.compile(r"^(?P<indent>[ \t]*)```python\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
EXCERPT = "# an excerpt of"  # the first line of a block that quotes code without its imports (checked to parse only)


def _python_blocks(page: Path) -> list[str]:
    return [textwrap.dedent(m["body"]) for m in PYTHON_BLOCK.finditer(page.read_text())]


PAGES_WITH_PYTHON = [p for p in (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))) if _python_blocks(p)]


def _flashnerd_modules(tree: ast.AST) -> dict[str, object]:
    """Import what the code imports from the project (failing on a name that does not exist); the names it binds to
    modules."""
    modules = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("flashnerd"):
                    module = importlib.import_module(a.name)
                    modules[a.asname or a.name.split(".")[0]] = module if a.asname else importlib.import_module(
                        a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flashnerd"):
            module = importlib.import_module(node.module)
            for a in node.names:
                value = getattr(module, a.name, None)
                if value is None:  # a submodule, or nothing
                    value = importlib.import_module(f"{node.module}.{a.name}")
                if inspect.ismodule(value):
                    modules[a.asname or a.name] = value
    return modules


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_python_in_the_docs_parses_and_names_what_exists(page, tmp_path):
    """Every Python block of a page parses; the page's blocks, read in order as one script (excerpts apart), use no
    undefined name (ruff's F821), and every name they import from the project, every attribute they read off a
    project module (`mdp.time_out`) and every task id they make exists."""
    from flashnerd.envs.registry import registered_tasks

    where = str(page.relative_to(ROOT))
    blocks = _python_blocks(page)
    for code in blocks:
        try:
            ast.parse(code)
        except SyntaxError as e:
            pytest.fail(f"{where}: a Python block does not parse ({e.msg}, its line {e.lineno})")
    script = "\n\n".join(code for code in blocks if not code.startswith(EXCERPT))
    snippet = tmp_path / "snippet.py"
    snippet.write_text(script)
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select", "F821",
                           "--output-format", "concise", str(snippet)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{where}: {proc.stdout.strip() or proc.stderr.strip()}"
    tree = ast.parse(script)
    modules = _flashnerd_modules(tree)
    missing = [f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
               and isinstance(n.value, ast.Name) and n.value.id in modules and not hasattr(modules[n.value.id], n.attr)]
    assert not missing, f"{where}: {', '.join(missing)} do not exist"
    made = [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "make" and n.args and isinstance(n.args[0], ast.Constant)
            and str(n.args[0].value).startswith("FlashNeRD-")]
    assert set(made) <= set(registered_tasks()), f"{where}: unregistered task ids {set(made) - set(registered_tasks())}"
