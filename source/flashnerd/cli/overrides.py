"""Config overrides on the command line, as Isaac Lab's Hydra ones: `env.rewards.feet_air_time.weight=0.5`,
`agent.algorithm.learning_rate=3e-4`, `shac.actor_lr=5e-4`, `env.rewards.undesired_contacts=null` (drops a term).

A value is read with YAML's safe loader (numbers, booleans, null, `[lists]`, strings; never code) and must fit the
value it replaces: an int where an int was, a number where a float was (`3e-4` too, which YAML 1.1 reads as a string),
a list of as many numbers where a tuple was; a string field takes the text as written.
A term's function and other code cannot be set from the command line. Every problem is a one-line error naming the
key and what it takes."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
from typing import Any

import yaml

from flashnerd.cli.common import CLIError, load_task_cfgs


def add_override_arg(p: argparse.ArgumentParser, roots: str = "env, agent") -> None:
    """Positional `KEY=VALUE` overrides of the task's configs (the roots named in `roots`)."""
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help=f"set a config field ({roots}), e.g. env.rewards.feet_air_time.weight=0.5 or "
                        "agent.algorithm.learning_rate=3e-4; KEY=null drops a reward, termination, event or "
                        "observation term")


def task_cfgs_with_overrides(args: argparse.Namespace, later: tuple[str, ...] = ()):
    """`load_task_cfgs(args)` with the `env.` and `agent.` overrides of `args.overrides` applied after the flags;
    overrides of the roots in `later` are left for the caller (e.g. `shac.`, whose config comes later)."""
    env_cfg, agent_cfg = load_task_cfgs(args)
    apply_overrides({"env": env_cfg, "agent": agent_cfg}, getattr(args, "overrides", None) or [], later=later)
    return env_cfg, agent_cfg


def apply_overrides(configs: dict[str, Any], items: list[str], later: tuple[str, ...] = ()) -> list[str]:
    """Apply every `root.path=value` of `items` to `configs` (root name -> config object, edited in place) in order,
    skipping the roots in `later`; returns the items applied. Any other root is an error."""
    applied = []
    for item in items:
        key, sep, text = item.partition("=")
        path = key.split(".")
        if not sep or len(path) < 2 or not all(path):
            raise CLIError(f"override '{item}' is not KEY=VALUE with a dotted key (e.g. "
                           f"{next(iter(configs))}.seed=1); roots here: {', '.join(configs)}")
        if path[0] in later:
            continue
        if path[0] not in configs:
            raise CLIError(f"override '{item}': unknown root '{path[0]}'; this command takes "
                           f"{', '.join((*configs, *later))}")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as err:
            raise CLIError(f"override '{item}': the value is not YAML ({str(err).splitlines()[0]})") from None
        parent = configs[path[0]]
        for depth, name in enumerate(path[1:-1], start=1):
            parent = _child(parent, name, ".".join(path[:depth]))
        _set(parent, path[-1], value, key, text)
        applied.append(item)
    return applied


def _names(node: Any) -> list[str]:
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [f.name for f in dataclasses.fields(node)]
    return [str(k) for k in node] if isinstance(node, dict) else []


def _unknown(name: str, node: Any, where: str) -> CLIError:
    names = _names(node)
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"it has {', '.join(names)[:300] or 'no fields'}"
    return CLIError(f"override: {where} has no '{name}'; {hint}")


def _child(node: Any, name: str, where: str) -> Any:
    if isinstance(node, dict) and name in node:
        return node[name]
    if dataclasses.is_dataclass(node) and name in _names(node):
        return getattr(node, name)
    raise _unknown(name, node, where)


def _set(node: Any, name: str, value: Any, key: str, text: str) -> None:
    """Replace the field or entry `name` of `node` with `value`, checked against what it replaces."""
    where = key.rpartition(".")[0]
    if node is None:
        raise CLIError(f"override {key}: {where} is not set (null) on this task; there is nothing to set inside it")
    if isinstance(node, dict):
        if name not in node:
            raise _unknown(name, node, where)
        if value is None and _is_term(node[name]):  # a term dropped, as Isaac Lab's `term=null`
            del node[name]
            return
        node[name] = _checked(node[name], value, key, text)
    elif dataclasses.is_dataclass(node) and name in _names(node):
        annotation = str(next(f for f in dataclasses.fields(node) if f.name == name).type)
        old = getattr(node, name)
        if value is None and "None" in annotation and not (dataclasses.is_dataclass(old) or callable(old)):
            # an optional plain field unset (a group of fields is not: its code would then miss it)
            setattr(node, name, None)
        elif old is None and isinstance(value, list) and annotation.startswith("tuple"):
            setattr(node, name, tuple(value))
        else:
            setattr(node, name, _checked(old, value, key, text))
    else:
        raise _unknown(name, node, where)


def _is_term(x: Any) -> bool:
    """A term of a manager dict (reward, termination, event, observation): a dataclass holding a function."""
    return dataclasses.is_dataclass(x) and callable(getattr(x, "func", None))


def _as_number(x: Any) -> Any:
    """A string YAML 1.1 left unread that is a finite number (`3e-4`) as that number; anything else as it was."""
    if isinstance(x, str):
        try:
            number = float(x)
        except ValueError:
            return x
        return int(number) if number.is_integer() and "e" not in x.lower() and "." not in x else number
    return x


def _checked(old: Any, new: Any, key: str, text: str | None = None) -> Any:
    """`new` (read from `text`) in the type of `old`, or a one-line error saying what the key takes."""
    def refuse(takes: str) -> CLIError:
        return CLIError(f"override {key}={new!r}: {key} takes {takes}")

    if callable(old) or dataclasses.is_dataclass(old):
        raise refuse("no value from the command line (it is code or a group of fields; set a field inside it)")
    if isinstance(old, bool):
        if not isinstance(new, bool):
            raise refuse("true or false")
        return new
    if isinstance(old, (int, float)):
        new = _as_number(new)
    if isinstance(old, int):
        if isinstance(new, bool) or not isinstance(new, int):
            raise refuse("an integer")
        return new
    if isinstance(old, float):
        if isinstance(new, bool) or not isinstance(new, (int, float)) or not math.isfinite(new):
            raise refuse("a finite number")
        return float(new)
    if isinstance(old, str):
        if isinstance(new, (dict, list)) or new is None:
            raise refuse("a string")
        return text if text is not None else str(new)
    if isinstance(old, (list, tuple)):
        if not isinstance(new, list) or (isinstance(old, tuple) and len(new) != len(old)):
            raise refuse(f"a list of {len(old)} values" if isinstance(old, tuple) else "a list")
        items = [_checked(o, n, f"{key}[{i}]") for i, (o, n) in enumerate(zip(old, new))] if old else list(new)
        items += [_checked(old[-1], n, f"{key}[{i}]") for i, n in enumerate(new[len(old):], start=len(old))] \
            if old else []
        return tuple(items) if isinstance(old, tuple) else items
    if isinstance(old, dict):
        raise refuse("no whole mapping; set its entries one by one (KEY.entry=VALUE)")
    if old is None:  # an unset optional field: any plain value
        if isinstance(new, dict):
            raise refuse("a plain value or a list")
        return new
    raise refuse(f"no value from the command line (a {type(old).__name__})")


__all__ = ["add_override_arg", "apply_overrides", "task_cfgs_with_overrides"]
