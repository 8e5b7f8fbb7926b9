"""`flashnerd report`: regenerate the result tables and figures of a docs page from the benchmark JSON files."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from flashnerd.cli.common import CLIError
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
    if args.check:  # render into a scratch copy, so checking never touches the committed figures
        with tempfile.TemporaryDirectory() as scratch:
            shutil.copytree(folder, scratch, dirs_exist_ok=True)
            text, names = rebuild(page, scratch)
        if text != page.read_text():
            raise CLIError(f"'{page}' is out of date with '{folder}/*.json'; run `flashnerd report`")
        result = {"page": str(page), "blocks": names, "up_to_date": True}
    else:
        text, names = rebuild(page, folder)
        tmp = page.with_suffix(page.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, page)
        result = {"page": str(page), "blocks": names, "written": True}
    print(json.dumps(result))
    return result
