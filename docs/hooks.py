"""MkDocs hook: fill generated sections from the code, so the pages never drift from it.

`<!-- flashnerd:readme -->` becomes the README (the quick start); `<!-- flashnerd:tasks -->` a table of every
registered task; `<!-- flashnerd:cli -->` the help text of every `flashnerd` command, from the argument parsers.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _tasks_table() -> str:
    from flashnerd.envs.registry import load_cfg_from_registry, registered_tasks, task_spec

    rows = ["| task id | robot | worlds | episode (s) | default backend | env config | PPO config |",
            "|---|---|---|---|---|---|---|"]
    for task in registered_tasks():
        cfg = load_cfg_from_registry(task, "env_cfg_entry_point")
        kw = task_spec(task).kwargs
        rows.append(f"| `{task}` | {cfg.robot} | {cfg.num_envs} | {cfg.episode_length_s:g} | `{cfg.dynamics}` | "
                    f"`{kw.get('env_cfg_entry_point')}` | `{kw.get('rsl_rl_cfg_entry_point')}` |")
    return "\n".join(rows)


def _cli_reference() -> str:
    from flashnerd.cli.main import build_parser

    parser = build_parser()
    parts = ["## flashnerd", "", "```text", parser.format_help().rstrip(), "```"]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        parts += ["", f"## flashnerd {name}", "", "```text", p.format_help().rstrip(), "```"]
        nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        for action in nested:
            for child, cp in action.choices.items():
                parts += ["", f"### flashnerd {name} {child}", "", "```text", cp.format_help().rstrip(), "```"]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001  (MkDocs hook signature)
    if "<!-- flashnerd:readme -->" in markdown:  # the README; its links point into docs/ from the repository root
        readme = (Path(config["docs_dir"]).parent / "README.md").read_text()
        markdown = markdown.replace("<!-- flashnerd:readme -->", readme.replace("](docs/", "]("))
    if "<!-- flashnerd:tasks -->" in markdown:
        markdown = markdown.replace("<!-- flashnerd:tasks -->", _tasks_table())
    if "<!-- flashnerd:cli -->" in markdown:
        markdown = markdown.replace("<!-- flashnerd:cli -->", _cli_reference())
    return markdown
