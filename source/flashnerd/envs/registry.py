"""Gym registry helpers: resolve 'module:attr' entry points and load a task's env and agent configs."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import gymnasium as gym

from flashnerd.dynamics import backend_info, backend_names
from flashnerd.robots import get_robot
from flashnerd.sim.scene import variant_robot


def load_entry_point(entry: Any) -> Any:
    """Resolve 'package.module:Attr' to the attribute; callables and objects pass through unchanged."""
    if not isinstance(entry, str):
        return entry
    module_name, _, attr = entry.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


def registered_tasks() -> list[str]:
    """Ids of every FlashNeRD task known to gymnasium (after `import flashnerd_tasks`)."""
    # The one upward import: the task package (above this layer) registers its ids with gymnasium when imported.
    import flashnerd_tasks  # noqa: F401

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


def with_robot(env_cfg: Any, robot: str, task: str = "this task") -> Any:
    """`env_cfg` on another robot (a name or a spec file path, see robots/spec_file.py): refused unless the task is
    written for any robot (`EnvCfg.any_robot`) and the robot has a floating base and every contact group the task's
    terms name (and `feet` for an air-time reward); each a one-line error."""
    spec = get_robot(robot)
    if spec.name == get_robot(env_cfg.robot).name:
        return dataclasses.replace(env_cfg, robot=robot)
    if not env_cfg.any_robot:
        raise ValueError(f"task '{task}' is written for robot '{env_cfg.robot}'; another robot runs the tasks that "
                         "take any robot (the velocity tasks)")
    if not spec.floating_base:
        raise ValueError(f"robot '{spec.name}' has a fixed base; task '{task}' moves a floating-base robot")
    terms = [*env_cfg.rewards.values(), *env_cfg.terminations.values()]
    needed = {t.params["group"] for t in terms if isinstance(t.params.get("group"), str)}
    needed |= {"feet"} if any(getattr(t.func, "__name__", "") == "feet_air_time" for t in terms) else set()
    missing = sorted(needed - set(spec.contact_bodies))
    if missing:
        raise ValueError(f"robot '{spec.name}' has no contact group {', '.join(missing)}, which task '{task}' uses; "
                         f"name it under contact_bodies in the robot's spec file")
    return dataclasses.replace(env_cfg, robot=robot)


def task_cfgs(task: str, num_envs: int | None = None, seed: int | None = None, device: str = "cpu",
              dynamics: str | None = None, dynamics_checkpoint: str | None = None,
              experiment_name: str | None = None, robot_variant: str | None = None,
              robot: str | None = None) -> tuple[Any, Any]:
    """(env_cfg, agent_cfg) of `task` with the given overrides (None keeps the task's value); a checkpoint for a
    backend that takes none, a robot the task cannot take, or a robot variant file that is malformed or for another
    robot, is a one-line error. On another robot the experiment folder is named after it."""
    env_cfg = load_cfg_from_registry(task, "env_cfg_entry_point")
    agent_cfg = load_cfg_from_registry(task, "rsl_rl_cfg_entry_point")
    if robot is not None:
        old = get_robot(env_cfg.robot).name
        env_cfg = with_robot(env_cfg, robot, task)
        new = get_robot(robot).name
        if new != old:
            name = agent_cfg.experiment_name
            agent_cfg.experiment_name = name.replace(old, new) if old in name else f"{new}_{name}"
    if num_envs is not None:
        env_cfg.num_envs = num_envs
    if seed is not None:
        env_cfg.seed = agent_cfg.seed = seed
    if dynamics is not None:
        env_cfg.dynamics = dynamics
    if dynamics_checkpoint:
        if not backend_info(env_cfg.dynamics).checkpoint:
            raise ValueError(f"--dynamics_checkpoint applies to the backends that take a checkpoint "
                             f"({', '.join(backend_names(checkpoint=True))}), not '{env_cfg.dynamics}'")
        env_cfg.dynamics_kwargs = {**env_cfg.dynamics_kwargs, "checkpoint": dynamics_checkpoint}
    if robot_variant:
        variant_robot(env_cfg.robot, robot_variant)  # checked now; the env applies it
        env_cfg.robot_variant = robot_variant
    env_cfg.device = agent_cfg.device = device
    if experiment_name:
        agent_cfg.experiment_name = experiment_name
    return env_cfg, agent_cfg


def play_variant(task: str, env_cfg: Any) -> tuple[str, Any]:
    """(task id, env config) to evaluate a policy of `task` with: the registered `...-Play-vN` variant if there is
    one (Isaac Lab's naming; e.g. no mid-roll starts, no observation noise), on `env_cfg`'s device, seed and robot
    variant."""
    base, _, version = task.rpartition("-v")
    play = f"{base}-Play-v{version}"
    if not base or play not in registered_tasks():
        return task, env_cfg
    cfg = load_cfg_from_registry(play, "env_cfg_entry_point")
    cfg.device, cfg.seed, cfg.robot_variant = env_cfg.device, env_cfg.seed, env_cfg.robot_variant
    if cfg.robot != env_cfg.robot:
        cfg = with_robot(cfg, env_cfg.robot, play)
    return play, cfg
