"""Small readers of type hints and plain values, shared by the config checks (backend options, CLI overrides) and
the readers of JSON files from other people."""

from __future__ import annotations

import math
import types
import typing
from typing import Any


def union_members(hint: Any) -> tuple:
    """The members of a union hint (`int | None` -> (int, NoneType)), or the hint itself."""
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def is_number(value: Any) -> bool:
    """An int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_number(value: Any) -> bool:
    """A finite int or float, not a bool (JSON and checkpoints from elsewhere may hold NaN, Infinity or huge ints)."""
    try:
        return is_number(value) and math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


__all__ = ["finite_number", "is_number", "union_members"]


def nesting_depth(value: Any) -> int:
    """How deeply dicts and lists nest in `value` (0 for a plain value), walked with a stack: JSON from someone else
    may nest past Python's recursion limit."""
    depth, todo = 0, [(value, 0)]
    while todo:
        node, level = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, (list, tuple)) else None
        if children is not None:
            depth = max(depth, level + 1)
            todo.extend((child, level + 1) for child in children)
    return depth
