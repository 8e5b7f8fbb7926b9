"""Gym registry helpers: resolve 'module:attr' entry points and load a task's env and agent configs."""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym


def load_entry_point(entry: Any) -> Any:
    """Resolve 'package.module:Attr' to the attribute; callables and objects pass through unchanged."""
    if not isinstance(entry, str):
        return entry
    module_name, _, attr = entry.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


def registered_tasks() -> list[str]:
    """Ids of every FlashNeRD task known to gymnasium (after `import flashnerd_tasks`)."""
    import flashnerd_tasks  # noqa: F401  (registers the ids)

    return sorted(k for k in gym.registry if k.startswith("FlashNeRD-"))


def task_spec(task: str) -> gym.envs.registration.EnvSpec:
    """The registry entry of `task`, or a one-line error listing the known ids."""
    tasks = registered_tasks()
    if task not in tasks:
        raise ValueError(f"unknown task '{task}'; registered tasks: {', '.join(tasks)}")
    return gym.spec(task)


def load_cfg_from_registry(task: str, key: str) -> Any:
    """Build the config named by registry kwarg `key` ('env_cfg_entry_point' or 'rsl_rl_cfg_entry_point')."""
    entry = task_spec(task).kwargs.get(key)
    if entry is None:
        raise ValueError(f"task '{task}' has no '{key}' in its registry entry")
    return load_entry_point(entry)()
