"""The documentation site builds with `mkdocs build --strict`, and its generated reference pages cover every registered
task and every CLI command."""

from __future__ import annotations

import argparse
import os
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
