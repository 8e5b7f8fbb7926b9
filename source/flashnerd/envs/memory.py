"""How much memory a run needs at its world count, estimated before anything big is allocated.

A probe env of `PROBE_WORLDS` worlds is built on the same backend and device; every tensor and array it (and its
backend) holds whose leading axis is the world axis is summed, which gives the bytes each world costs. PPO adds its
rollout storage and the activations of one update mini-batch (`ppo_bytes_per_world`). The sum is multiplied by
`HEADROOM` for what neither holds for long. The probe runs only when the world count is large enough for memory to
matter at all. Checked against peak RSS on this CPU: see docs/safety.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import gymnasium as gym
import mujoco
import numpy as np
import torch

from flashnerd.dynamics import make_dynamics
from flashnerd.envs.registry import task_spec
from flashnerd.utils.host_memory import available_bytes

PROBE_WORLDS = 8  # not a size any per-world table has on another axis (so axis sizes identify world axes)
HEADROOM = 1.5  # allocator slack, activations of a (learned) step and copies the env does not hold
GENEROUS_PER_WORLD = 1 << 20  # no task here needs 1 MiB a world; below that bound no probe is run


@dataclass
class MemoryEstimate:
    """Bytes per world by what holds them (e.g. "the env and backend", "PPO's rollout storage and update") and the
    estimated total at `num_worlds` worlds, headroom included."""

    num_worlds: int
    per_world: dict[str, int]

    @property
    def total(self) -> int:
        return int(self.num_worlds * sum(self.per_world.values()) * HEADROOM)

    def describe(self) -> str:
        parts = ", ".join(f"{_size(b)} per world for {what}" for what, b in self.per_world.items())
        return f"about {_size(self.total)} ({parts}, x{HEADROOM:g} headroom)"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"


def world_axis_bytes(root: object, n: int, depth: int = 3) -> int:
    """Bytes of every distinct tensor/array reachable from `root` (attributes, dicts, lists; `depth` levels) whose
    first axis has length `n` (for tensors also the second: per-layer states are (L, n, ...)), the tensors of model
    caches on the world axis their class declares (`world_axes`; an ensemble's member cache inside it), and the
    buffers of a list of `n` distinct MuJoCo models (one per world)."""
    seen: set[int] = set()
    total = 0

    def add(t: torch.Tensor) -> None:
        """Count a tensor with a world axis: its storage, once however many views share it."""
        nonlocal total
        key = t.untyped_storage().data_ptr() if t.numel() else id(t)
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()

    def visit(obj: object, level: int) -> None:
        nonlocal total
        cache = getattr(obj, "inner", obj)  # an ensemble's cache wraps its member's, members stacked in front
        axes = getattr(type(cache), "world_axes", None)
        if isinstance(axes, dict) and id(cache) not in seen:
            seen.add(id(cache))
            for name, axis in axes.items():
                t = getattr(cache, name, None)
                if isinstance(t, torch.Tensor) and t.dim() >= -axis and t.shape[axis] == n:
                    add(t)
            return
        if isinstance(obj, torch.Tensor):
            if obj.dim() and n in tuple(obj.shape[:2]):  # the world axis leads, or follows a layer axis (L, N, ...)
                add(obj)
            return
        if isinstance(obj, np.ndarray):
            if obj.ndim and obj.shape[0] == n and id(obj) not in seen:
                seen.add(id(obj))
                total += obj.nbytes
            return
        if level == 0 or id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
            return
        seen.add(id(obj))
        if isinstance(obj, list) and len(obj) == n and obj and isinstance(obj[0], mujoco.MjModel):
            # one model per world (a randomized variant on `mujoco`): the distinct ones are per-world memory
            distinct = {id(m): m.nbuffer for m in obj}
            total += sum(distinct.values()) if len(distinct) == n else 0
            return
        if isinstance(obj, dict):
            children = obj.values()
        elif isinstance(obj, (list, tuple)):
            children = obj
        else:
            children = getattr(obj, "__dict__", {}).values()
        for child in children:
            visit(child, level - 1)

    visit(root, depth)
    return total


def ppo_bytes_per_world(agent_cfg, obs_dim: int, num_actions: int) -> tuple[int, int]:
    """(rollout storage, peak update activations) in bytes per world for the PPO settings `agent_cfg`: the storage
    holds `num_steps_per_env` steps of observations, actions, action mean and std and six scalars; an update runs
    one mini-batch of `num_steps_per_env / num_mini_batches` samples a world through actor and critic, keeping
    every hidden activation and its gradient."""
    steps = agent_cfg.num_steps_per_env
    storage = steps * (obs_dim + 3 * num_actions + 6) * 4
    hidden = sum(agent_cfg.policy.actor_hidden_dims) + sum(agent_cfg.policy.critic_hidden_dims)
    update = math.ceil(steps / agent_cfg.algorithm.num_mini_batches) * (hidden + obs_dim) * 4 * 2
    return storage, update


def _probe_bytes(probe, width: int) -> int:
    """World-axis bytes per world of `probe` (PROBE_WORLDS worlds) after one step of zero inputs (`width` wide), so
    caches built on first use are counted; the probe is closed."""
    try:
        probe.step(torch.zeros(PROBE_WORLDS, width, device=probe.device))
        return world_axis_bytes(probe, PROBE_WORLDS) // PROBE_WORLDS
    finally:
        probe.close()


def estimate_env_memory(task: str, env_cfg, agent_cfg=None, extra_per_world: int = 0) -> MemoryEstimate:
    """Estimated bytes of `task` at `env_cfg.num_envs` worlds, plus PPO's storage and update for `agent_cfg` (None:
    no PPO) and `extra_per_world` bytes of the caller's own buffers a world (counted with the env)."""
    task_spec(task)  # registers the task ids
    probe = gym.make(task, cfg=dataclasses.replace(env_cfg, num_envs=PROBE_WORLDS)).unwrapped
    obs = sum(int(np.prod(s.shape)) for s in probe.single_observation_space.spaces.values())
    ppo = {"PPO's rollout storage and update": sum(ppo_bytes_per_world(agent_cfg, obs, probe.num_actions))
           } if agent_cfg is not None else {}
    env = _probe_bytes(probe, probe.num_actions) + extra_per_world
    return MemoryEstimate(env_cfg.num_envs, {"the env and backend": env, **ppo})


def _refuse(flag: str, est: MemoryEstimate, free: int, device) -> None:
    """One-line error when `est` does not fit in the `free` bytes of `device`, with the largest world count that
    would."""
    if est.total > free:
        fits = int(free / max(1.0, est.total / est.num_worlds))
        raise ValueError(f"{flag} {est.num_worlds} needs {est.describe()}, more than the {_size(free)} available on "
                         f"{device}; use at most about {fits:,} worlds")


def check_dynamics_memory(backend: str, robot, num_worlds: int, device: str, terrain: str,
                          extra_per_world: int = 0, flag: str = "--num_worlds") -> None:
    """One-line error before the run when backend `backend` at `num_worlds` worlds, plus `extra_per_world` bytes of
    the caller's own buffers a world, would not fit in memory."""
    free = available_bytes(device)
    if num_worlds * (GENEROUS_PER_WORLD + extra_per_world) < free:
        return
    probe = make_dynamics(backend, robot, PROBE_WORLDS, device=device, terrain=terrain)
    backend_bytes = _probe_bytes(probe, probe.nu)
    _refuse(flag, MemoryEstimate(num_worlds, {"the backend": backend_bytes, "buffers": extra_per_world}), free,
            device)


def check_env_memory(task: str, env_cfg, agent_cfg=None, extra_per_world: int = 0,
                     flag: str = "--num_envs") -> None:
    """One-line error before the run when `task` at `env_cfg.num_envs` worlds would not fit in memory."""
    free = available_bytes(env_cfg.device)
    if env_cfg.num_envs * (GENEROUS_PER_WORLD + extra_per_world) < free:
        return
    _refuse(flag, estimate_env_memory(task, env_cfg, agent_cfg, extra_per_world), free, env_cfg.device)
