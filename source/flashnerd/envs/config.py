"""Plain dataclass configs for term-based environments (the Isaac Lab manager layout without its inheritance)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from flashnerd.dynamics import REFERENCE_BACKEND


@dataclass
class ObsTerm:
    """One observation term: `func(env, **params) -> (N, d)`, plus uniform noise of half-width `noise`, then scale.

    `func` reads the env and changes nothing: a term with the same function and parameters in several groups is
    computed once per step and shared (the returned tensor is not modified in place)."""

    func: Callable[..., torch.Tensor]
    params: dict[str, Any] = field(default_factory=dict)
    noise: float = 0.0
    scale: float = 1.0
    clip: tuple[float, float] | None = None


@dataclass
class ObsGroup:
    """Terms concatenated in order into one (N, D) tensor; noise is added only when `enable_corruption`."""

    terms: dict[str, ObsTerm]
    enable_corruption: bool = True


@dataclass
class RewTerm:
    """One reward term: `weight * func(env, **params) * step_dt` is added each control step."""

    func: Callable[..., torch.Tensor]
    weight: float
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class DoneTerm:
    """One termination term: `func(env, **params) -> (N,) bool`. `time_out` terms truncate instead of terminate."""

    func: Callable[..., torch.Tensor]
    params: dict[str, Any] = field(default_factory=dict)
    time_out: bool = False


@dataclass
class EventTerm:
    """A state change `func(env, env_ids, **params)` applied on `mode` = "reset" or "interval" (every few seconds)."""

    func: Callable[..., None]
    mode: str
    params: dict[str, Any] = field(default_factory=dict)
    interval_range_s: tuple[float, float] | None = None


@dataclass
class VelocityCommandCfg:
    """Uniform base-velocity commands (vx, vy, wz) with optional heading control, as Isaac Lab's velocity task."""

    resampling_time_range: tuple[float, float] = (10.0, 10.0)
    rel_standing_envs: float = 0.02
    heading_command: bool = True
    rel_heading_envs: float = 1.0
    heading_control_stiffness: float = 0.5
    lin_vel_x: tuple[float, float] = (-1.0, 1.0)
    lin_vel_y: tuple[float, float] = (-1.0, 1.0)
    ang_vel_z: tuple[float, float] = (-1.0, 1.0)
    heading: tuple[float, float] = (-math.pi, math.pi)


@dataclass
class OrientationGoalCfg:
    """Goal orientations for an object (Isaac Lab's in-hand reorientation command): uniformly random, replaced when
    reached (the rotation angle to the goal is at most `success_tolerance` rad), at `position` in the world."""

    success_tolerance: float = 0.1
    position: tuple[float, float, float] = (0.0, 0.0, 0.545)
    # None: each goal is a uniformly random orientation (Isaac Lab). (lo, hi): each goal is the object's orientation
    # when the goal is drawn, turned about the world's vertical axis by +-uniform(lo, hi) rad (a rotate-in-place skill
    # that PPO can learn on a CPU budget).
    yaw_range: tuple[float, float] | None = None


@dataclass
class EnvCfg:
    """Everything that defines a task; the dynamics backend is a separate choice (`dynamics`)."""

    robot: str  # a robot name, or the path of a robot spec file (robots/spec_file.py)
    observations: dict[str, ObsGroup]
    rewards: dict[str, RewTerm]
    terminations: dict[str, DoneTerm]
    events: dict[str, EventTerm] = field(default_factory=dict)
    # Per-world task state that terms read (e.g. a roll's accumulated pitch): name -> factory(env) of an object with
    # `update()` (after every step, before terminations and rewards), `reset(env_ids)` and `log(env_ids) -> dict`.
    trackers: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    commands: VelocityCommandCfg | None = None
    goal: OrientationGoalCfg | None = None  # an object-orientation goal (in-hand tasks)
    terrain: str = "flat"
    objects: tuple[str, ...] = ()  # scene objects ("cube"); only backends with `object_state()` simulate them
    object_mass: float | None = None  # kg of the cube on every backend, MuJoCo's evaluation included (None: 0.1 kg)
    robot_variant: str | None = None  # a variant YAML file (robots/variant.py) applied to the robot; None: nominal
    # True when the task is written for any robot with the contact groups its terms name (velocity tracking: `base`,
    # `feet`); then `robot=` on gym.make and `--robot` on the CLI swap the robot. False: the task is its robot's.
    any_robot: bool = False
    num_envs: int = 4096
    episode_length_s: float = 20.0
    action_scale: float = 0.5
    # "offset": targets = default + action_scale * a (Isaac Lab's JointPositionAction); "ema_limits": a in [-1, 1]
    # mapped onto each joint's range, then an exponential moving average with `action_ema_alpha` on the new value
    # (Isaac Lab's EMAJointPositionToLimitsAction, the in-hand tasks' choice).
    action_mode: str = "offset"
    action_ema_alpha: float = 0.95
    seed: int = 42
    dynamics: str = REFERENCE_BACKEND
    dynamics_kwargs: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    # Training on a learned ensemble (backends that report `RobotState.disagreement`): a reward of
    # -uncertainty_penalty x disagreement per second (MOPO), and a termination where the disagreement exceeds
    # uncertainty_threshold (the world left the model's known region, as MOReL halts it); 0 turns either off.
    uncertainty_penalty: float = 0.0
    uncertainty_threshold: float = 0.0


def cfg_to_dict(obj: Any) -> Any:
    """A YAML-safe view of a config: dataclasses become dicts, callables become 'module:name' strings."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: cfg_to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): cfg_to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [cfg_to_dict(v) for v in obj]
    if callable(obj):
        return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', repr(obj))}"
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return repr(obj)
