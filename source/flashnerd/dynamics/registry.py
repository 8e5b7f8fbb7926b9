"""One registry of dynamics backends: each registered once, with what it can do and the typed config it takes.

Every CLI choice list, error message and capability check asks this module (`backend_names(analytical=True)`,
`backend_info(name).objects`, ...); no other module keeps a list of backend names. `make_dynamics` builds a backend
by name, turning its keyword options into the backend's config dataclass, so a keyword a backend does not take is a
one-line error that lists the ones it does.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from flashnerd.dynamics.coupled import ONE_WAY, TWO_WAY, CoupledConfig, CoupledDynamics
from flashnerd.dynamics.learned import LearnedConfig, LearnedDynamics
from flashnerd.models import MODEL_KINDS, MODEL_LABELS
from flashnerd.robots import RobotSpec
from flashnerd.sim.config import MjwarpConfig, MujocoConfig
from flashnerd.sim.mujoco_backend import MujocoDynamics
from flashnerd.types import Dynamics
from flashnerd.utils.hints import is_number, union_members

REFERENCE_BACKEND = "mujoco"  # the analytical simulator that every policy is finally evaluated in


@dataclass(frozen=True)
class BackendInfo:
    """A registered backend: how to build it and what it can do.

    `factory(robot, num_worlds, device, terrain, config)` builds it from an instance of `config`. Capabilities:
    `analytical` (physics from MuJoCo; data can be recorded from it), `learned` (the robot's motion comes from a
    learned model of kind `model_kind`), `objects` (simulates scene objects: `ObjectDynamics`), `planning` (DIAL-MPC
    can roll out on it), `checkpoint` (takes a learned-model checkpoint, defaulting to the shipped one), `devices`
    (torch device types it runs on)."""

    name: str
    factory: Callable[..., Dynamics]
    config: type
    label: str
    analytical: bool = False
    learned: bool = False
    objects: bool = False
    planning: bool = False
    checkpoint: bool = False
    devices: tuple[str, ...] = ("cpu", "cuda")
    model_kind: str | None = None

    def options(self) -> list[str]:
        """The keyword options `make_dynamics` accepts for this backend (its config's fields)."""
        return [f.name for f in dataclasses.fields(self.config)]

    def make_config(self, options: dict[str, Any]):
        """The backend's config from keyword options; an option it does not take is a one-line error."""
        unknown = sorted(set(options) - set(self.options()))
        if unknown:
            raise ValueError(f"backend '{self.name}' takes no option '{unknown[0]}'; its options are: "
                             f"{', '.join(self.options())}")
        hints = typing.get_type_hints(self.config)
        for key, value in options.items():
            if not _fits(value, hints[key]):
                raise ValueError(f"backend '{self.name}' option {key}={value!r} is not of type "
                                 f"{_hint_name(hints[key])}")
            numbers = [a for a in union_members(hints[key]) if a in (int, float)]
            if numbers and is_number(value) and not (math.isfinite(value) and value > 0):
                raise ValueError(f"backend '{self.name}' option {key} must be a positive number, got {value!r}")
        return self.config(**options)


def _fits(value: Any, hint: Any) -> bool:
    """Whether `value` is of the config field type `hint` (ints count as floats; unknown classes are not checked)."""
    for alt in union_members(hint):
        origin = typing.get_origin(alt)
        if alt is type(None) and value is None:
            return True
        if alt is bool and isinstance(value, bool):
            return True
        if alt is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if alt is float and is_number(value):
            return True
        if alt in (str, Path) and isinstance(value, (str, Path)) and (alt is Path or isinstance(value, str)):
            return True
        if origin is tuple and isinstance(value, (tuple, list)):
            inner = typing.get_args(alt)[:1]
            return all(_fits(v, inner[0]) for v in value) if inner else True
        if isinstance(alt, type) and alt not in (bool, int, float, str, Path, type(None)) and origin is None:
            return True  # a protocol or class (e.g. a free-motion model object): checked where it is used
    return False


def _hint_name(hint: Any) -> str:
    return " or ".join(getattr(a, "__name__", str(a)).replace("NoneType", "None") for a in union_members(hint))


_BACKENDS: dict[str, BackendInfo] = {}
_CAPABILITIES = ("analytical", "learned", "objects", "planning", "checkpoint")


def register_backend(info: BackendInfo) -> None:
    """Make a backend available to `make_dynamics(info.name, ...)` and to every task's `dynamics=` argument."""
    _BACKENDS[info.name] = info


def backend_info(name: str) -> BackendInfo:
    """The registry entry of `name`, or a one-line error listing the registered backends."""
    if name not in _BACKENDS:
        raise ValueError(f"unknown dynamics backend '{name}'; choose one of: {', '.join(sorted(_BACKENDS))}")
    return _BACKENDS[name]


def backend_names(**capabilities: bool) -> list[str]:
    """Registered backend names (in registration order) whose capabilities match, e.g. `backend_names(learned=True)`."""
    bad = sorted(set(capabilities) - set(_CAPABILITIES))
    if bad:
        raise ValueError(f"unknown backend capability '{bad[0]}'; choose from: {', '.join(_CAPABILITIES)}")
    return [n for n, b in _BACKENDS.items() if all(getattr(b, k) == v for k, v in capabilities.items())]


def available_backends() -> list[str]:
    """Names accepted by `make_dynamics` and by `gym.make(..., dynamics=NAME)`, sorted."""
    return sorted(_BACKENDS)


def check_backend(name: str, *, what: str = "", **capabilities: bool) -> BackendInfo:
    """The entry of `name` if it has `capabilities`; otherwise a one-line error naming the backends that do
    (`what` says what they are needed for, e.g. "recording")."""
    info = backend_info(name)
    if any(getattr(info, k) != v for k, v in capabilities.items()):
        fit = backend_names(**capabilities)
        raise ValueError(f"{what or 'this'} needs one of the backends {', '.join(fit)}; '{name}' is not one")
    return info


def make_dynamics(name: str, robot: RobotSpec, num_worlds: int, device: str | torch.device = "cpu",
                  terrain: str = "flat", **options: Any) -> Dynamics:
    """Build the backend `name` for `num_worlds` worlds of `robot` on `terrain`; `options` are the fields of its
    config (`backend_info(name).options()`). Unknown names and options are one-line errors."""
    info = backend_info(name)
    if num_worlds < 1:
        raise ValueError(f"num_worlds must be at least 1, got {num_worlds}")
    device = torch.device(device)
    if device.type not in info.devices:
        raise ValueError(f"backend '{name}' runs on {', '.join(info.devices)}, not '{device}'")
    return info.factory(robot, num_worlds, device, terrain, info.make_config(options))


def _mjwarp(robot: RobotSpec, num_worlds: int, device: torch.device, terrain: str, config: MjwarpConfig) -> Dynamics:
    # Importing MuJoCo Warp loads Warp (about a second, and a CUDA probe) that the other backends should not pay.
    from flashnerd.sim.mjwarp_backend import MjwarpDynamics

    return MjwarpDynamics(robot, num_worlds, device, terrain, config)


register_backend(BackendInfo("mujoco", MujocoDynamics, MujocoConfig, "MuJoCo", analytical=True, objects=True,
                             planning=True))
register_backend(BackendInfo("mjwarp", _mjwarp, MjwarpConfig, "MuJoCo Warp", analytical=True, objects=True,
                             planning=True))
for _kind in MODEL_KINDS:  # a learned backend per model kind, named after it
    register_backend(BackendInfo(_kind, partial(LearnedDynamics, kind=_kind), LearnedConfig, MODEL_LABELS[_kind],
                                 learned=True, planning=True, checkpoint=True, model_kind=_kind))
register_backend(BackendInfo(TWO_WAY, partial(CoupledDynamics, mode=TWO_WAY), CoupledConfig,
                             "FlashNeRD + MuJoCo (two-way)", learned=True, objects=True, checkpoint=True))
register_backend(BackendInfo(ONE_WAY, partial(CoupledDynamics, mode=ONE_WAY), CoupledConfig,
                             "FlashNeRD + MuJoCo (one-way)", learned=True, objects=True, checkpoint=True))
