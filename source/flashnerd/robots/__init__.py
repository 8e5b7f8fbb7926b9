"""Robots: those shipped with the package (a spec file next to each MJCF in `assets/`, read as a user's robot is),
looked up by name, and any robot from a spec file next to its MJCF."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from flashnerd.robots.spec import ASSET_DIR, Probe, RobotSpec, included_files
from flashnerd.robots.spec_file import RobotFileError, load_robot_file

BUILT_IN = ("allegro", "anymal_c", "cartpole", "franka", "g1", "microduck")  # assets/<name>.yaml and <name>.xml


def _built_in(name: str) -> RobotSpec:
    """A shipped robot: its spec file read by the same parser as a user's, known by name (no `source`: datasets
    and checkpoints of it name the robot, not a path) with its MJCF under assets/."""
    robot = load_robot_file(ASSET_DIR / f"{name}.yaml")
    if robot.name != name:
        raise RobotFileError(f"assets/{name}.yaml names robot '{robot.name}'; a shipped robot's file is its name")
    return dataclasses.replace(robot, mjcf=Path(robot.mjcf).name, source="")


ROBOTS: dict[str, RobotSpec] = {name: _built_in(name) for name in BUILT_IN}
_FROM_FILES: dict[str, RobotSpec] = {}  # robots read from spec files in this process, by name
_BY_PATH: dict[str, tuple[tuple, tuple, RobotSpec]] = {}  # resolved spec path -> (files read, their stamps, robot)


def is_spec_path(name: str) -> bool:
    """True when a robot argument is a spec file path rather than a robot name."""
    return name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name


def get_robot(name: str | os.PathLike) -> RobotSpec:
    """The robot registered under `name`, or the robot of the spec file at path `name` (robots/spec_file.py; read
    again only when the spec file or its MJCF changed, then known by its name too); anything else is a one-line error
    listing the known robots."""
    name = os.fspath(name)  # a pathlib.Path names a spec file too
    if name in ROBOTS:
        return ROBOTS[name]
    if is_spec_path(name):
        robot = _read_spec_file(name)
        _FROM_FILES[robot.name] = robot
        return robot
    if name in _FROM_FILES:
        return _FROM_FILES[name]
    raise ValueError(f"unknown robot '{name}'; choose one of: {', '.join(sorted(ROBOTS))}, or give a robot spec file "
                     "(path/to/robot.yaml, see docs/howto/bring_your_robot.md)")


def _stamp(*paths: str | Path) -> tuple:
    """(modification time, size) of each file, None for one that cannot be read: a cached robot is reused while its
    spec file, MJCF and the files that includes keep theirs."""
    out = []
    for p in paths:
        try:
            st = Path(p).stat()
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def _read_spec_file(name: str) -> RobotSpec:
    path = str(Path(name).expanduser().resolve())
    cached = _BY_PATH.get(path)
    if cached is not None and None not in cached[1] and cached[1] == _stamp(*cached[0]):
        return cached[2]
    robot = load_robot_file(path)
    _check_name(robot)
    files = (path, robot.mjcf, *included_files(Path(robot.mjcf)))  # the files the robot was read from
    _BY_PATH[path] = (files, _stamp(*files), robot)
    return robot


def _check_name(robot: RobotSpec) -> None:
    """A spec file's robot may not take a built-in robot's name, nor the name of another spec file's robot that
    differs (a copy of the same robot elsewhere is the same robot; a file read again after an edit replaces its
    own). Files since edited or removed are not held against it: they are checked again when read."""
    if robot.name in ROBOTS:
        raise RobotFileError(f"robot spec '{robot.source}' names robot '{robot.name}', which is built in; set "
                             "another 'name:'")
    for files, stamps, other in list(_BY_PATH.values()):
        if other.name != robot.name or other.source == robot.source or None in stamps or stamps != _stamp(*files):
            continue
        if dataclasses.replace(other, mjcf=robot.mjcf, source=robot.source) != robot \
                or other.model_hash() != robot.model_hash():
            raise RobotFileError(f"robot spec '{robot.source}' names robot '{robot.name}', as '{other.source}' "
                                 "does, for another robot; give one of them another 'name:'")


def robot_of_record(name: str, spec: str = "") -> RobotSpec:
    """The robot a dataset or checkpoint names: built in, read from a spec file in this process, or read from the
    spec file the record names (`spec`, an absolute path) when that file is here and names the same robot."""
    if name in ROBOTS or name in _FROM_FILES or not spec:
        return get_robot(name)
    if not Path(spec).is_file():
        raise ValueError(f"robot '{name}' came from spec file '{spec}', which is not here; pass --robot "
                         "path/to/its_spec.yaml")
    robot = get_robot(str(spec))
    if robot.name != name:
        raise ValueError(f"spec file '{spec}' now names robot '{robot.name}', the record '{name}'; pass --robot "
                         "with the robot's spec file")
    return robot


__all__ = ["ROBOTS", "Probe", "RobotFileError", "RobotSpec", "get_robot", "is_spec_path", "robot_of_record"]
