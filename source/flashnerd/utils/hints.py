"""Small readers of type hints and plain values, shared by the config checks (backend options, CLI overrides) and
the readers of JSON files from other people."""

from __future__ import annotations

import types
import typing
from typing import Any


def union_members(hint: Any) -> tuple:
    """The members of a union hint (`int | None` -> (int, NoneType)), or the hint itself."""
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def is_number(value: Any) -> bool:
    """An int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


__all__ = ["is_number", "union_members"]
