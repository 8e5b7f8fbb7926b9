"""Outputs that are never torn where they land: every file is written under a temporary name in its own folder and
renamed over the target once complete (a rename is atomic on POSIX). The temporary name is hidden and unique (the
process id and a random suffix), so two processes writing one output never write into each other's file, and no
file of the user's (a `model.pt.tmp` of their own) is overwritten or deleted."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def temporary_path(path: str | Path, suffix: str = "") -> Path:
    """A fresh hidden name beside `path` (ending in `suffix`, for writers that infer the format from it)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp{suffix}")


@contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path` to write; it is renamed onto `path` when the block ends without error and
    removed when it raises (a Ctrl-C included). The folder must exist."""
    tmp = temporary_path(path, suffix)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """`Path(path).write_text(text)`, never torn."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
