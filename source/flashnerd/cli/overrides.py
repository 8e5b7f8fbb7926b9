"""Config overrides on the command line, as Isaac Lab's Hydra ones: `env.rewards.feet_air_time.weight=0.5`,
`agent.algorithm.learning_rate=3e-4`, `shac.actor_learning_rate=5e-4`, `env.rewards.undesired_contacts=null` (drops
a term).

A value is read with YAML's safe loader (numbers, booleans, null, `[lists]`, strings; never code) and must fit the
field's declared type: an integer for an `int`, a finite number for a `float` (`3e-4` too, which YAML 1.1 reads as a
string), as many values as a `tuple[float, float]` has, null only where the field is optional; an entry of a mapping
without a declared type (a term's `params`) takes the type of the value it replaces. A string field takes the text as
written where YAML would read a number, boolean or date. A term's function, a whole group of fields and the fields
the command sets with a flag of its own (`--num_envs`, `--seed`, `--robot`, ...) cannot be set this way. Every problem
is a one-line error naming the key."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import typing
from typing import Any

import yaml

from flashnerd.cli.common import CLIError, load_task_cfgs
from flashnerd.utils.hints import is_number, union_members

# fields a command sets with a flag (and checks there), refused as overrides by the commands that have the flag
FLAG_KEYS = {
    "env.num_envs": "--num_envs", "env.seed": "--seed", "agent.seed": "--seed", "env.device": "--device",
    "agent.device": "--device", "env.dynamics": "--dynamics", "env.dynamics_kwargs.checkpoint": "--dynamics_checkpoint",
    "env.dynamics_kwargs.members": "--members",
    "env.robot": "--robot", "env.robot_variant": "--robot_variant", "agent.experiment_name": "--experiment_name",
    "agent.run_name": "--run_name", "agent.max_iterations": "--max_iterations",
    "agent.save_interval": "--save_interval", "agent.logger": "--logger",
    "env.uncertainty_penalty": "--uncertainty_penalty", "env.uncertainty_threshold": "--uncertainty_threshold",
    "shac.horizon": "--shac_horizon",
}


def add_override_arg(p: argparse.ArgumentParser, roots: str = "env, agent") -> None:
    """Positional `KEY=VALUE` overrides of the task's configs (the roots named in `roots`), given after the flags."""
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help=f"after the flags: set a config field ({roots}), e.g. env.rewards.feet_air_time.weight=0.5 "
                        "or agent.algorithm.learning_rate=3e-4; KEY=null drops a reward, termination, event or "
                        "observation term")


def task_cfgs_with_overrides(args: argparse.Namespace):
    """`load_task_cfgs(args)` with the `env.` and `agent.` overrides of `args.overrides` applied after the flags."""
    env_cfg, agent_cfg = load_task_cfgs(args)
    apply_overrides({"env": env_cfg, "agent": agent_cfg}, getattr(args, "overrides", None) or [], flags=vars(args))
    return env_cfg, agent_cfg


def of_root(items: list[str], root: str) -> list[str]:
    """The overrides of `items` whose key starts with `root.`."""
    return [item for item in items if item.partition(".")[0] == root]


def apply_overrides(configs: dict[str, Any], items: list[str], later: tuple[str, ...] = (),
                    flags: dict | None = None, owned_by: dict[str, str] | None = None,
                    skip_missing: bool = False) -> list[str]:
    """Apply every `root.path=value` of `items` to `configs` (root name -> config object, edited in place) in order,
    skipping the roots in `later` (applied by the caller once their config exists); returns the items applied. Any
    other root is an error, and so is a field of FLAG_KEYS whose flag is among the command's `flags` (its parsed
    arguments, `vars(args)`), or one of `owned_by` (field -> what sets it in this command: a flag of another name,
    such as `--num_worlds` for env.num_envs, or the reason the command sets it itself). With `skip_missing` an item
    whose field or term the configs lack is left out (a variant of a task without some of its terms, e.g. the -Play-
    one without pushes, takes the overrides of the terms it has)."""
    applied = []
    for item in items:
        key, sep, text = item.partition("=")
        path = key.split(".")
        if not sep or len(path) < 2 or not all(path):
            raise CLIError(f"override '{item}' is not KEY=VALUE with a dotted key (e.g. "
                           f"{next(iter(configs))}.seed=1), given after the flags; roots here: {', '.join(configs)}")
        if path[0] in later:
            continue
        if path[0] not in configs:
            raise CLIError(f"override '{item}': unknown root '{path[0]}'; this command takes "
                           f"{', '.join((*configs, *later))}")
        owners = {**{k: f for k, f in FLAG_KEYS.items() if f.lstrip("-") in (flags or {})}, **(owned_by or {})}
        owned = next((k for k in owners if key == k or key.startswith(k + ".")), None)
        if owned is not None:
            how = owners[owned]
            raise CLIError(f"override '{item}': {owned} is set with {how} (and checked there); use that flag"
                           if how.startswith("--") else f"override '{item}': {owned} is not free here: {how}")
        if skip_missing and not _has_path(configs[path[0]], path[1:]):
            continue
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except Exception as err:  # noqa: BLE001 (the safe loader runs no code; a bad tag raises IndexError, KeyError..)
            why = (str(err).splitlines() or [type(err).__name__])[0]
            raise CLIError(f"override '{item}': the value is not YAML ({why})") from None
        node, hint = configs[path[0]], type(configs[path[0]])
        for depth, name in enumerate(path[1:-1], start=1):
            node, hint = _child(node, hint, name, ".".join(path[:depth]))
            if node is None:
                raise CLIError(f"override {key}: {'.'.join(path[:depth + 1])} is not set (null) on this task; there "
                               "is nothing to set inside it")
        _set(node, hint, path[-1], value, key, text)
        applied.append(item)
    return applied


def _has_path(node: Any, names: list[str]) -> bool:
    """Whether the config `node` has the nested field or entry `names`."""
    try:
        for name in names:
            node, _ = _child(node, Any, name, "")
    except CLIError:  # _child's "has no" error
        return False
    return True


def _field_hints(node: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(type(node))
    except (NameError, TypeError):  # an annotation that does not resolve: checked against the value it replaces
        return {}


def _names(node: Any) -> list[str]:
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [f.name for f in dataclasses.fields(node)]
    return [str(k) for k in node] if isinstance(node, dict) else []


def _unknown(name: str, node: Any, where: str) -> CLIError:
    names = _names(node)
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"it has {', '.join(names)[:300] or 'no fields'}"
    return CLIError(f"override: {where} has no '{name}'; {hint}")


def _child(node: Any, hint: Any, name: str, where: str) -> tuple[Any, Any]:
    """The entry or field `name` of `node` and its declared type (Any where there is none)."""
    if isinstance(node, dict) and name in node:
        args = typing.get_args(hint) if typing.get_origin(hint) is dict else ()
        return node[name], (args[1] if len(args) == 2 else Any)
    if dataclasses.is_dataclass(node) and name in _names(node):
        return getattr(node, name), _field_hints(node).get(name, Any)
    raise _unknown(name, node, where)


def _set(node: Any, hint: Any, name: str, value: Any, key: str, text: str) -> None:
    """Replace the field or entry `name` of `node` with `value` (read from `text`), checked against its type."""
    old, field_hint = _child(node, hint, name, key.rpartition(".")[0])
    if callable(old) or dataclasses.is_dataclass(old) or isinstance(old, dict):
        if value is None and isinstance(node, dict) and _is_term(old):  # a term dropped, as Isaac Lab's `term=null`
            del node[name]
            return
        if callable(old) and not dataclasses.is_dataclass(old):
            raise CLIError(f"override {key}={text}: {key} is code, which the command line cannot set")
        raise CLIError(f"override {key}={text}: {key} is a group of fields; set a field inside it (KEY.field=VALUE)")
    if field_hint is Any:  # an entry of a mapping of any values (a term's params): the type of the value it replaces
        field_hint = Any if old is None else _hint_of(old)
    converted = _convert(value, field_hint, text)
    if converted is _REFUSED:
        raise CLIError(f"override {key}={text}: {key} takes {_describe(field_hint)}")
    if isinstance(node, dict):
        node[name] = converted
    else:
        setattr(node, name, converted)


def _is_term(x: Any) -> bool:
    """A term of a manager dict (reward, termination, event, observation): a dataclass holding a function."""
    return dataclasses.is_dataclass(x) and callable(getattr(x, "func", None))


def _hint_of(value: Any) -> Any:
    """The type a plain value has, as a hint (a tuple keeps its length; an int may become any number)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int | float
    if isinstance(value, tuple):
        return tuple[tuple(_hint_of(v) for v in value)] if value else tuple[Any, ...]
    if isinstance(value, list):
        return list[_hint_of(value[0])] if value else list
    return type(value)


_REFUSED = object()


def _as_number(x: Any) -> Any:
    """A string YAML 1.1 left unread that is a number (`3e-4`) as that number; anything else as it was."""
    if isinstance(x, str):
        try:
            return int(x)
        except ValueError:
            pass
        try:
            return float(x)
        except ValueError:
            return x
    return x


def _convert(value: Any, hint: Any, text: str | None) -> Any:
    """`value` as the type `hint`, or `_REFUSED`; `text` is what was written (kept as such by a string field)."""
    if hint is Any:  # plain values only (no sets, bytes or dates)
        plain = (bool, int, float, str, list, type(None))
        return value if isinstance(value, plain) and not (isinstance(value, list) and any(
            _convert(v, Any, None) is _REFUSED for v in value)) else _REFUSED
    for alt in union_members(hint):
        origin, args = typing.get_origin(alt), typing.get_args(alt)
        if alt is type(None):
            if value is None:
                return None
        elif alt is bool:
            if isinstance(value, bool):
                return value
        elif alt in (int, float):
            number = _as_number(text.strip() if text is not None else value)  # 010 is 10, not YAML 1.1's octal 8
            if alt is int and is_number(number) and isinstance(number, int):
                return number
            if alt is float and is_number(number):
                try:
                    if math.isfinite(number := float(number)):
                        return number
                except OverflowError:
                    pass
        elif alt is str:
            if isinstance(value, str):
                return value
            if text is not None and not isinstance(value, (list, dict)) and value is not None:
                return text.strip()  # YAML read a number, boolean or date: the field wants the text
        elif origin in (tuple, list) or alt in (tuple, list):
            if not isinstance(value, list):
                continue
            if origin is tuple and args and args[-1] is not Ellipsis:
                inner = args
                if len(value) != len(inner):
                    continue
            else:
                inner = (args[0] if args else Any,) * len(value)
            items = [_convert(v, h, None) for v, h in zip(value, inner)]
            if _REFUSED not in items:
                return tuple(items) if (origin or alt) is tuple else items
    return _REFUSED


def _describe(hint: Any, plural: bool = False) -> str:
    """What a value of type `hint` is, in words (`plural`: what values of it are)."""
    words = {bool: ("true or false", "true/false values"), int: ("an integer", "integers"),
             float: ("a finite number", "finite numbers"), str: ("a string", "strings"), type(None): ("null", "nulls")}
    if hint is Any:
        return "plain values" if plural else "a plain value (a number, true/false, a string or a list)"
    names = []
    for alt in union_members(hint):
        origin, args = typing.get_origin(alt), typing.get_args(alt)
        if alt in words:
            names.append(words[alt][plural])
        elif origin is tuple and args and args[-1] is not Ellipsis:
            names.append(f"a list of {len(args)} values ({', '.join(_describe(a) for a in args)})")
        elif origin in (tuple, list) or alt in (tuple, list):
            names.append(f"a list of {_describe(args[0], plural=True)}" if args else "a list")
        else:
            names.append(f"no value from the command line (a {getattr(alt, '__name__', alt)})")
    return " or ".join(names)


__all__ = ["FLAG_KEYS", "add_override_arg", "apply_overrides", "of_root", "task_cfgs_with_overrides"]
