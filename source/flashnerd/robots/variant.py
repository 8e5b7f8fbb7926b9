"""Robot variants: how a robot differs from its nominal MJCF (payload, masses, joints, actuators, friction), as data.

A variant is a YAML file (read with `utils.strict_yaml`, a safe loader, so it runs no code):

    robot: anymal_c
    payload: {body: base, mass: 8.0, pos: [0.0, 0.0, 0.05]}            # a point mass welded to a body
    mass_scale: {".*THIGH": 1.1}                                       # body-name regex -> factor (mass, inertia)
    joints: {".*": {damping: 3.0, armature: 0.03, frictionloss: 1.0}}  # joint-name regex -> absolute values
    actuators: {".*": {kp_scale: 0.75, kv_scale: 1.0, effort_scale: 0.7,  # actuator-name regex -> factors,
                       delay_s: 0.01, no_load_speed: 12.0}}                # and actuation (sim/actuation.py)
    friction_scale: {".*FOOT": 0.6}                                    # geom- or body-name regex -> sliding factor
    randomize: {payload.mass: [0.0, 10.0], actuators.effort_scale: [0.6, 1.0]}  # per-world, per-reset ranges

`randomize` draws the named values per world, uniformly in their ranges, whenever a world is built or reset (domain
randomization; `flashnerd.sim.randomize`, on the analytical backends). A drawn value replaces the file's own value of
that key for the same elements: `payload.mass` the payload's mass (the file needs a `payload`), `mass_scale` and
`friction_scale` the factor of every body or geom their patterns match (the file needs the section), `joints.<key>`
and `actuators.<key>` the value of every joint or actuator the section's patterns match (every one without the
section). One draw per world and path: all elements of a path share it.

This module parses and checks the values; `flashnerd.sim.variant` applies a variant to a scene with MuJoCo's
`MjSpec` editing API (and refuses a regex that matches nothing), and `flashnerd.sim.actuation` adds what an MJCF
cannot say: `delay_s` (the actuators see the joint targets that late) and `no_load_speed` (the torque limit falls
linearly to zero at that joint speed, a DC motor's curve). Every backend builds its scene through
`build_scene`, so `mujoco`, `mjwarp` and the learned backends' contact scenes all see the variant.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from flashnerd.utils.atomic import write_text_atomic
from flashnerd.utils.name_patterns import NamePatternError, compiled
from flashnerd.utils.strict_yaml import brief, dump_yaml_text, load_yaml, yaml_problem

JOINT_KEYS = ("damping", "armature", "frictionloss")
# actuator key -> (low, high, low excluded): scales are positive factors, a delay may be zero
ACTUATOR_KEYS = {"kp_scale": (0.0, 100.0, True), "kv_scale": (0.0, 100.0, True), "effort_scale": (0.0, 100.0, True),
                 "delay_s": (0.0, 1.0, False), "no_load_speed": (0.0, 1e4, True)}
TOP_KEYS = ("robot", "payload", "mass_scale", "joints", "actuators", "friction_scale", "randomize")
# randomizable path -> the value range of the file's own key (low, high, low excluded)
RANDOM_PATHS = {"payload.mass": (0.0, 1e4, False), "mass_scale": (0.0, 100.0, True),
                "friction_scale": (0.0, 100.0, True),
                **{f"joints.{k}": (0.0, 1e4, False) for k in JOINT_KEYS},
                **{f"actuators.{k}": v for k, v in ACTUATOR_KEYS.items()}}
# a randomized path whose elements come from a section of the file that must be there
NEEDS_SECTION = {"payload.mass": "payload", "mass_scale": "mass_scale", "friction_scale": "friction_scale"}
# sections whose pattern order is content: a joint or actuator two patterns match takes the later one's values
ORDERED_SECTIONS = ("joints", "actuators")


@dataclass(frozen=True)
class RobotVariant:
    """A parsed variant: `spec` is the checked content (plain JSON types), `source` the file it came from."""

    name: str
    spec: dict[str, Any]
    source: str = ""

    @property
    def robot(self) -> str:
        return self.spec["robot"]

    def digest(self) -> str:
        """A short hash of the content (not of the file's formatting): datasets and checkpoints record it, and a
        resumed recording must match it. The order of the entries of `ORDERED_SECTIONS` is content, so it counts
        where it is not the sorted order (a variant in sorted order hashes as its sorted content)."""
        keys = {s: list(self.spec[s]) for s in ORDERED_SECTIONS if s in self.spec}
        order = {s: k for s, k in keys.items() if k != sorted(k)}
        content = {**self.spec, " order": order} if order else self.spec
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        """What datasets and checkpoints store about the variant they came from."""
        return {"name": self.name, "digest": self.digest(), "spec": self.spec}

    @property
    def randomized(self) -> dict[str, tuple[float, float]]:
        """The `randomize` ranges, path -> (low, high); empty when the variant draws nothing."""
        return {k: (lo, hi) for k, (lo, hi) in self.spec.get("randomize", {}).items()}

    def fixed(self) -> RobotVariant:
        """This variant without its `randomize` ranges: one robot, the file's own values (bench reality-gap's
        stand-in for the real robot)."""
        spec = {k: v for k, v in self.spec.items() if k != "randomize"}
        return RobotVariant(self.name, spec, self.source)

    def ranges_only(self) -> RobotVariant:
        """The nominal robot with this variant's `randomize` ranges alone: what a lab that knows only the ranges
        trains a domain-randomized policy on. The sections a path draws for keep their patterns (which elements) and
        the payload its body and place; every value the file fixes is dropped (a drawn key's value is a placeholder
        the draw replaces)."""
        ranges = self.randomized
        spec: dict[str, Any] = {"robot": self.robot}
        if "payload.mass" in ranges:
            spec["payload"] = dict(self.spec["payload"], mass=ranges["payload.mass"][1] or 1.0)
        for section in ("mass_scale", "friction_scale"):
            if section in ranges:
                spec[section] = {pattern: 1.0 for pattern in self.spec[section]}
        for section in ("joints", "actuators"):
            drawn = {p.split(".", 1)[1]: lo for p, (lo, _) in ranges.items() if p.startswith(section + ".")}
            if drawn and section in self.spec:
                spec[section] = {pattern: dict(drawn) for pattern in self.spec[section]}
        if ranges:
            spec["randomize"] = self.spec["randomize"]
        return RobotVariant(f"{self.name}_ranges", spec, self.source)

    def write(self, path: str | Path) -> None:
        """Write the checked content as a variant file that `load_variant` reads back to the same content (a
        temporary file renamed into place)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, dump_yaml_text(self.spec))


MAX_VARIANT_BYTES = 1 << 20  # a variant is a few lines; anything near this is not one


class VariantError(ValueError):
    """A variant file that cannot be used, with a one-line reason."""


def number_in_range(where: str, value: Any, low: float, high: float = math.inf, low_open: bool = False,
                    error: type[ValueError] = ValueError) -> float:
    """`value` as a float if it is a finite number in [low, high] ((low, high] with `low_open`), else `error` with a
    one-line reason naming `where` (the robot files' shared check)."""
    try:
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite:
        raise error(f"{where} must be a finite number, got {brief(value)}")
    if value < low or (low_open and value == low) or value > high:
        bound = f"{'>' if low_open else '>='} {low:g}" + ("" if high == math.inf else f" and <= {high:g}")
        raise error(f"{where} must be {bound}, got {brief(value)}")
    return float(value)


def _number(where: str, value: Any, low: float, high: float = math.inf, low_open: bool = False) -> float:
    return number_in_range(where, value, low, high, low_open, VariantError)


def _regex(where: str, pattern: Any) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise VariantError(f"{where}: a name regex must be a non-empty string, got {brief(pattern)}")
    try:
        compiled(pattern)
    except NamePatternError as err:
        raise VariantError(f"{where}: {err}") from err
    return pattern


def _mapping(where: str, value: Any) -> dict:
    if not isinstance(value, dict) or not value:
        raise VariantError(f"{where} must be a non-empty mapping, got {brief(value)}")
    return value


def _fields(where: str, value: Any, allowed, check) -> dict[str, float]:
    value = _mapping(where, value)
    out = {}
    for key, v in value.items():
        if key not in allowed:
            raise VariantError(f"{where}: unknown key {brief(key)}; use {', '.join(allowed)}")
        out[key] = check(f"{where}.{key}", v, key)
    return out


def parse_variant(data: Any, name: str, source: str = "") -> RobotVariant:
    """Check the content of a variant file (see the module docstring); every problem is a one-line error."""
    where = source or name
    if not isinstance(data, dict):
        raise VariantError(f"variant '{where}' must be a YAML mapping with a 'robot' key")
    for key in data:
        if key not in TOP_KEYS:
            raise VariantError(f"variant '{where}': unknown key {brief(key)}; use {', '.join(TOP_KEYS)}")
    if not isinstance(data.get("robot"), str):
        raise VariantError(f"variant '{where}' must name its robot ('robot: anymal_c')")
    spec: dict[str, Any] = {"robot": data["robot"]}
    if "payload" in data:
        p = _mapping(f"{where}: payload", data["payload"])
        unknown = set(p) - {"body", "mass", "pos"}
        if unknown:
            raise VariantError(f"{where}: payload has unknown key {brief(sorted(map(str, unknown))[0])}; use body, "
                               "mass, pos")
        if not isinstance(p.get("body"), str):
            raise VariantError(f"{where}: payload.body must name a body")
        if "mass" not in p:
            raise VariantError(f"{where}: payload has no mass; give it in kg (payload: {{body: ..., mass: 2.0}})")
        pos = p.get("pos", [0.0, 0.0, 0.0])
        if not isinstance(pos, list) or len(pos) != 3:
            raise VariantError(f"{where}: payload.pos must be [x, y, z], got {brief(pos)}")
        spec["payload"] = {"body": p["body"], "mass": _number(f"{where}: payload.mass", p.get("mass"), 0.0, 1e4, True),
                           "pos": [_number(f"{where}: payload.pos", x, -10.0, 10.0) for x in pos]}
    if "mass_scale" in data:
        spec["mass_scale"] = {_regex(f"{where}: mass_scale", k): _number(f"{where}: mass_scale['{k}']", v, 0.0, 100.0,
                                                                           True)
                              for k, v in _mapping(f"{where}: mass_scale", data["mass_scale"]).items()}
    if "joints" in data:
        spec["joints"] = {_regex(f"{where}: joints", k): _fields(f"{where}: joints['{k}']", v, JOINT_KEYS,
                                                                  lambda w, x, _: _number(w, x, 0.0, 1e4))
                          for k, v in _mapping(f"{where}: joints", data["joints"]).items()}
    if "actuators" in data:
        in_range = lambda w, x, key: _number(w, x, *ACTUATOR_KEYS[key])  # noqa: E731
        spec["actuators"] = {_regex(f"{where}: actuators", k): _fields(f"{where}: actuators['{k}']", v, ACTUATOR_KEYS,
                                                                        in_range)
                             for k, v in _mapping(f"{where}: actuators", data["actuators"]).items()}
    if "friction_scale" in data:
        spec["friction_scale"] = {_regex(f"{where}: friction_scale", k): _number(f"{where}: friction_scale['{k}']",
                                                                                   v, 0.0, 100.0, True)
                                  for k, v in _mapping(f"{where}: friction_scale", data["friction_scale"]).items()}
    if "randomize" in data:
        spec["randomize"] = _ranges(where, data["randomize"], spec)
    return RobotVariant(name, spec, source)


def _ranges(where: str, value: Any, spec: dict[str, Any]) -> dict[str, list[float]]:
    """Check `randomize`: path -> [low, high] within the range of the file's own key, each path's section present."""
    out = {}
    for path, bounds in _mapping(f"{where}: randomize", value).items():
        if path not in RANDOM_PATHS:
            raise VariantError(f"{where}: randomize has unknown path {brief(path)}; use {', '.join(RANDOM_PATHS)}")
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise VariantError(f"{where}: randomize '{path}' must be a range [low, high], got {brief(bounds)}")
        lo, hi = (_number(f"{where}: randomize '{path}'", b, *RANDOM_PATHS[path]) for b in bounds)
        if lo > hi:
            raise VariantError(f"{where}: randomize '{path}' has low {lo:g} above high {hi:g}; write [low, high]")
        section = NEEDS_SECTION.get(path)
        if section is not None and section not in spec:
            raise VariantError(f"{where}: randomize '{path}' needs a '{section}' entry saying which "
                               f"{'body carries the payload' if section == 'payload' else 'elements it scales'}")
        out[path] = [lo, hi]
    return out


def load_variant(path: str | Path) -> RobotVariant:
    """Read and check a variant file (YAML, safe loader)."""
    path = Path(path)
    if path.is_dir():
        raise VariantError(f"robot variant '{path}' is a folder; pass the variant's YAML file")
    if not path.is_file():
        raise FileNotFoundError(f"robot variant '{path}' does not exist")
    if path.stat().st_size > MAX_VARIANT_BYTES:
        raise VariantError(f"robot variant '{path}' is {path.stat().st_size} bytes; a variant file is a few lines of "
                           "YAML")
    try:
        data = load_yaml(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        raise VariantError(f"robot variant '{path}' is not valid YAML: {yaml_problem(err)}") from None
    return parse_variant(data, path.stem, str(path))
