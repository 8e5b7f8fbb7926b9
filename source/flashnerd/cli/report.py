"""`flashnerd report`: regenerate the result tables and figures of a docs page from the benchmark JSON files."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from flashnerd.cli.common import CLIError
from flashnerd.utils.atomic import atomic_path, write_text_atomic
from flashnerd.viz.report import rebuild


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="rebuild docs/results.md tables and plots from docs/results/*.json")
    p.add_argument("--page", default="docs/results.md", help="Markdown page with <!-- report:NAME --> blocks")
    p.add_argument("--results", default="docs/results", help="folder of NAME.json files (figures are written here)")
    p.add_argument("--check", action="store_true", help="only check that the page is up to date (exit 2 if not)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    page, folder = Path(args.page), Path(args.results)
    if not page.is_file():
        raise CLIError(f"page '{page}' does not exist")
    # every block renders into a scratch copy of the folder first: checking never touches the committed figures, and
    # a block that fails leaves the page and every figure as they were
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copytree(folder, scratch, dirs_exist_ok=True)
        try:
            text, names = rebuild(page, scratch)
        except ValueError as err:  # name the user's file, not its scratch copy (gone once this returns)
            raise CLIError(str(err).replace(scratch, str(folder))) from err
        if args.check:
            if text != page.read_text():
                raise CLIError(f"'{page}' is out of date with '{folder}/*.json'; run `flashnerd report`")
            result = {"page": str(page), "blocks": names, "up_to_date": True}
        else:
            _copy_changed(Path(scratch), folder)
            write_text_atomic(page, text)
            result = {"page": str(page), "blocks": names, "written": True}
    print(json.dumps(result))
    return result


def _copy_changed(scratch: Path, folder: Path) -> None:
    """Each file of `scratch` that is new or differs from its copy in `folder` replaces it (temp file, then rename)."""
    for new in sorted(p for p in scratch.rglob("*") if p.is_file()):
        old = folder / new.relative_to(scratch)
        if old.is_file() and old.read_bytes() == new.read_bytes():
            continue
        old.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(old) as tmp:
            shutil.copyfile(new, tmp)
