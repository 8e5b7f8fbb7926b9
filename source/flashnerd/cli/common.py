"""Pieces shared by the CLI commands: Isaac Lab flag names, log-directory layout, checkpoint lookup, policy loading."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import gymnasium as gym
import torch
import yaml

from flashnerd.dynamics import check_backend
from flashnerd.dynamics.learned import default_checkpoint
from flashnerd.envs.config import cfg_to_dict
from flashnerd.envs.memory import check_env_memory
from flashnerd.envs.registry import task_cfgs, task_spec
from flashnerd.robots import get_robot, is_spec_path
from flashnerd.utils.atomic import write_text_atomic
from flashnerd.utils.digest import file_sha256


class CLIError(ValueError):
    """A user error: printed as one line, exit status 2."""


def add_env_args(p: argparse.ArgumentParser, num_envs: int | None = None) -> None:
    """--task --num_envs --seed --device --dynamics (Isaac Lab's names)."""
    p.add_argument("--task", required=True, help="task id, e.g. FlashNeRD-Velocity-Flat-Anymal-C-v0")
    p.add_argument("--num_envs", type=int, default=num_envs, help="number of parallel worlds")
    p.add_argument("--seed", type=int, default=None, help="random seed")
    p.add_argument("--device", default="cpu", help="torch device: cpu or cuda[:i]")
    p.add_argument("--dynamics", default=None, help="dynamics backend (default: the task's, usually mujoco)")
    p.add_argument("--dynamics_checkpoint", default=None,
                   help="learned-model checkpoint for --dynamics flashnerd/nerd (default: the shipped one)")
    p.add_argument("--robot", default=None,
                   help="another robot for a task that takes any (the velocity tasks): a name or a spec file "
                        "(path/to/robot.yaml, docs/howto/bring_your_robot.md)")
    add_variant_arg(p)


def add_variant_arg(p: argparse.ArgumentParser) -> None:
    """--robot_variant: a YAML file of how the robot differs from its MJCF (robots/variant.py)."""
    p.add_argument("--robot_variant", default=None,
                   help="YAML file of how the robot differs from its MJCF (payload, masses, joints, actuators, "
                        "friction; see variants/)")


def add_robot_file_arg(p: argparse.ArgumentParser) -> None:
    """--robot for commands that read the robot from their data or checkpoint: the spec file of a robot that is not
    built in, where the spec path recorded in the file is not on this machine."""
    p.add_argument("--robot", default=None,
                   help="spec file (path/to/robot.yaml) of the robot the data or checkpoint names, when it is not "
                        "built in and its recorded spec path is not here")


def load_robot_file_arg(args: argparse.Namespace) -> None:
    """Read `--robot` (if given) so the robot is known by name to the readers of datasets and checkpoints."""
    if getattr(args, "robot", None):
        if not is_spec_path(args.robot):
            raise CLIError(f"--robot takes a robot spec file (path/to/robot.yaml) here, got '{args.robot}'; a "
                           "built-in robot needs no --robot")
        get_robot(args.robot)


def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    """--checkpoint --load_run --experiment_name --log_root."""
    p.add_argument("--checkpoint", default=None, help="checkpoint file, or a file-name regex inside the run")
    p.add_argument("--load_run", default=None, help="run folder name (regex) under the experiment's log folder")
    p.add_argument("--experiment_name", default=None, help="experiment folder under logs/rsl_rl")
    p.add_argument("--log_root", default="logs/rsl_rl", help="root of the log folders")


def check_positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise CLIError(f"--{name} must be a positive integer, got {value}")


def check_positive_number(name: str, value: float | None) -> None:
    """One-line error unless `value` (None: not given) is a finite number above zero (seconds, minutes, ...)."""
    if value is not None and not (0.0 < value < float("inf")):
        raise CLIError(f"--{name} must be a finite number > 0, got {value}")


def check_device(device: str) -> None:
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise CLIError(f"invalid --device '{device}'; use cpu or cuda[:index]") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CLIError(f"--device {device} requested but CUDA is not available here; use --device cpu")


def load_task_cfgs(args: argparse.Namespace):
    """(env_cfg, agent_cfg) of `args.task` with the CLI overrides applied (checked first, each a one-line error)."""
    task_spec(args.task)  # one-line error for an unknown id
    check_positive("num_envs", getattr(args, "num_envs", None))
    check_device(args.device)
    try:
        env_cfg, agent_cfg = task_cfgs(args.task, num_envs=args.num_envs, seed=args.seed, device=args.device,
                                       dynamics=args.dynamics,
                                       dynamics_checkpoint=getattr(args, "dynamics_checkpoint", None),
                                       experiment_name=getattr(args, "experiment_name", None),
                                       robot_variant=getattr(args, "robot_variant", None),
                                       robot=getattr(args, "robot", None))
    except ValueError as err:
        raise CLIError(str(err)) from err
    return env_cfg, agent_cfg


def make_env(task: str, env_cfg) -> gym.Env:
    """`gym.make` with the given config (flashnerd_tasks is imported by the registry lookup); a world count that
    would not fit in memory is a one-line error first (`make_runner` checks the same, with PPO's share)."""
    check_env_memory(task, env_cfg)
    return gym.make(task, cfg=env_cfg)


def uninterrupted_cfg(env_cfg, steps: int):
    """The task config for one unbroken rollout of `steps` control steps: no time-out inside it and no interval events
    (a push between two steps is a velocity jump that no action explains). Terminations are kept."""
    control_dt = get_robot(env_cfg.robot).control_dt
    return dataclasses.replace(env_cfg, episode_length_s=max(env_cfg.episode_length_s, (steps + 1) * control_dt),
                               events={k: e for k, e in env_cfg.events.items() if e.mode != "interval"})


def new_log_dir(log_root: str, experiment: str, run_name: str) -> Path:
    """logs/rsl_rl/<experiment>/<YYYY-mm-dd_HH-MM-SS>[_<run_name>]."""
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return Path(log_root) / experiment / (f"{stamp}_{run_name}" if run_name else stamp)


def write_json(path: Path, data) -> None:
    """Write `data` as indented JSON through a temporary file (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=1))


# settings that name files or folders: a resumed run may spell the same one another way (`logs/x`, `./logs/x`,
# `/abs/logs/x`), so they compare as resolved paths; a list of them (--data, --policy) compares item by item
PATH_SETTINGS = frozenset({"out_dir", "robot_variant", "dynamics_checkpoint", "baselines_from", "data", "policy"})


def _resolved(value):
    """`value` (a path, a list of paths, or None) with every path resolved against the working folder."""
    if isinstance(value, str) and value:
        return Path(value).resolve()
    if isinstance(value, list):
        return [_resolved(v) for v in value]
    return value


def _same_setting(name: str, stored, given) -> bool:
    """Whether a resumed run's setting equals the stopped run's. Settings that name files (PATH_SETTINGS, and --robot
    where both runs gave a spec file rather than a robot's name) compare as resolved paths."""
    if name == "robot" and all(isinstance(v, str) and is_spec_path(v) for v in (stored, given)):
        return Path(stored).resolve() == Path(given).resolve()
    if name in PATH_SETTINGS:
        return _resolved(stored) == _resolved(given)
    return stored == given


def read_json(flag: str, path: Path, fix: str):
    """The JSON document in `path` (given by `flag`); an unreadable file or text that is no JSON is a one-line error
    ending in `fix`. JSON holds data only: reading another person's file runs nothing from it."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CLIError(f"{flag}: '{path}' is not readable JSON ({type(err).__name__}); {fix}") from None


def checkpoint_sha256(path: str | None) -> str | None:
    """Content digest of a model checkpoint (None for no path, e.g. an analytical backend's, or where no regular file
    can be read at `path`: a JSON from someone else may name anything). Read in chunks, never past its stated size."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a FIFO or a device would block or never end
                return None
            return file_sha256(f)
    except (OSError, ValueError):
        return None


def run_state(path: Path, settings: dict, resume: bool, fresh: dict, defaults: dict | None = None,
              upgrade: Callable[[dict], dict] | None = None) -> dict:
    """The state of a multi-stage command kept in the JSON `path` (rewritten after every stage): `fresh` with
    `settings` for a new run, or the stopped run's state with --resume. A new run over an existing file, a missing or
    unreadable file to resume, or a resume with other settings is a one-line error; a setting the stopped run's file
    lacks (it predates it) is read as `defaults` gives it, and `upgrade` brings a file of an older layout to the
    current one before the settings are compared. A new run may replace the file of a run that finished no stage
    (every list and mapping of `fresh` still empty in it: it failed or was stopped in its first stage), so a first
    stage that failed on its settings can be run again with others."""
    if not resume:
        if path.exists() and not _no_stage_done(path, fresh):
            raise CLIError(f"'{path}' exists; add --resume to continue that run, or give a new --out_dir")
        return {"settings": settings, **fresh}
    if not path.is_file():
        raise CLIError(f"--resume given but '{path}' does not exist; give the --out_dir and --name of the stopped "
                       "run, or start without --resume")
    state = read_json("--resume", path, "give a new --out_dir")
    if not isinstance(state, dict) or not isinstance(state.get("settings"), dict):
        raise CLIError(f"--resume: '{path}' holds no run state of this command; give a new --out_dir")
    missing = [k for k in fresh if k not in state]
    if missing:
        raise CLIError(f"--resume: '{path}' lacks {', '.join(missing)}; give a new --out_dir")
    mistyped = [k for k, v in fresh.items() if isinstance(v, (dict, list)) and not isinstance(state[k], type(v))]
    if mistyped:
        raise CLIError(f"--resume: '{path}' holds {mistyped[0]} as a {type(state[mistyped[0]]).__name__}, not the "
                       f"{type(fresh[mistyped[0]]).__name__} this command writes (edited or damaged); give a new "
                       "--out_dir")
    if upgrade is not None:
        state = upgrade(state)
    defaults = defaults or {}
    stored = {k: state["settings"].get(k, defaults.get(k)) for k in settings}
    changed = sorted(k for k in settings if not _same_setting(k, stored[k], settings[k]))
    if changed:
        raise CLIError(f"--resume with other settings than the stopped run ({', '.join(changed)}); give the same "
                       "ones, or a new --out_dir")
    return state


def _no_stage_done(path: Path, fresh: dict) -> bool:
    """Whether the run state in `path` is readable and still holds every list and mapping of `fresh` empty."""
    try:
        state = read_json("--resume", path, "")
    except CLIError:  # unreadable: kept, and refused as before
        return False
    return isinstance(state, dict) and all(
        isinstance(state.get(k), type(v)) and not state[k] for k, v in fresh.items() if isinstance(v, (dict, list)))


def check_same_inputs(state: dict, inputs: dict[str, list[str]]) -> None:
    """The digest of every input file a multi-stage run reads ({role: [paths]}: a model, datasets, policies), kept in
    its state as `inputs_sha256` ({role: [digests]}, by role and position, so a path that now resolves elsewhere is
    still compared) when the run starts; a resumed run must find the same files, or its later stages would act on
    other inputs under the stopped run's names: a one-line error. A state from before the field gets it now."""
    digests = {role: [checkpoint_sha256(p) for p in paths] for role, paths in inputs.items()}
    kept = state.setdefault("inputs_sha256", digests)
    if not (isinstance(kept, dict) and all(isinstance(kept.get(r), list) and len(kept[r]) == len(d)
                                           for r, d in digests.items())):
        raise CLIError("--resume: the run's inputs_sha256 is not what this command writes for these inputs (edited "
                       "or damaged); give a new --out_dir")
    for role, paths in inputs.items():
        for path, was, now in zip(paths, kept[role], digests[role]):
            if was != now:
                raise CLIError(f"--resume: '{path}' is not the file this run started from as its {role} (sha256 "
                               f"{str(was)[:12]}..., now {str(now)[:12]}...); put that file back, or give a new "
                               "--out_dir")


def checkpoints_by_kind(text: str, backends: Sequence[str]) -> dict[str, str]:
    """--dynamics_checkpoint "kind=path[,kind=path]" as {kind: path}; a malformed value, or a kind that is not among
    `backends` (the checkpoint would go unused) or takes no checkpoint, is a one-line error."""
    try:
        checkpoints = dict(item.split("=", 1) for item in text.split(",") if item)
    except ValueError as err:
        raise CLIError(f"--dynamics_checkpoint takes kind=path[,kind=path], got '{text}'") from err
    for kind in checkpoints:
        if kind not in backends:
            raise CLIError(f"--dynamics_checkpoint names '{kind}', which is not among --dynamics "
                           f"{','.join(backends)}; add the backend or drop its checkpoint")
        check_backend(kind, what="--dynamics_checkpoint", checkpoint=True)
    return checkpoints


def add_training_bench_args(p: argparse.ArgumentParser, out_dir: str, name: str, outputs: str) -> None:
    """--device --out_dir --name --dynamics_checkpoint of a benchmark that trains policies on several backends."""
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--out_dir", default=out_dir, help=f"folder for runs, {outputs}")
    p.add_argument("--name", default=name, help=f"file stem of {outputs} in --out_dir")
    p.add_argument("--dynamics_checkpoint", default="",
                   help="learned checkpoints as kind=path[,kind=path] (default: the shipped ones)")
    add_variant_arg(p)


def check_plain_name(flag: str, name: str | None) -> None:
    """One-line error unless `name` is one plain folder or file name (no separator, not '.' or '..')."""
    if name is not None and (not name or Path(name).name != name or name in (".", "..") or os.sep in name):
        raise CLIError(f"--{flag} must be a plain name such as 'my_run' (no folders), got '{name}'")


def check_writable(flag: str, path: str | Path) -> None:
    """One-line error, before any work, when `path` (a file or folder to create) cannot be written: its nearest
    existing ancestor must be a folder this process may write into."""
    path = Path(path).absolute()
    folder = flag == "log_root" or flag.endswith("_dir")
    if path.is_dir() and not folder:
        raise CLIError(f"--{flag} '{path}' is a folder; give a file path")
    if path.exists() and not path.is_dir() and folder:
        raise CLIError(f"--{flag} '{path}' is a file; give a folder")
    ancestor = path if path.is_dir() else path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CLIError(f"--{flag} '{path}' cannot be written: '{ancestor}' is not a folder")
    try:  # permissions alone do not say (root, read-only and virtual file systems): create and remove a file
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as err:
        raise CLIError(f"--{flag} '{path}' cannot be written: '{ancestor}' takes no new files "
                       f"({err.strerror or type(err).__name__})") from err


def refuse_unless(condition: bool, args: argparse.Namespace, flags: tuple[str, ...], reason: str) -> None:
    """One-line error naming every flag of `flags` that was given (not None) when `condition` does not hold: a flag
    that would have no effect is refused rather than silently ignored."""
    given = [f"--{f}" for f in flags if getattr(args, f, None) is not None]
    if given and not condition:
        raise CLIError(f"{'/'.join(given)} {reason}")


def check_file_stem(name: str) -> None:
    """One-line error unless --name is a plain file name stem (no folder part; the folder is --out_dir)."""
    if not name or Path(name).name != name or name in (".", ".."):
        raise CLIError(f"--name must be a plain file name stem such as 'cube_reorient', got '{name}'; "
                       "put the folder in --out_dir")


def dump_yaml(path: Path, cfg) -> None:
    """Write a config as YAML through a temporary file (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, yaml.safe_dump(cfg_to_dict(cfg), sort_keys=False))


def model_to_start_from(checkpoint: str | None, robot, kind: str, terrain: str) -> str:
    """The model a loop adapts or refits first: --dynamics_checkpoint, else the model of `kind` shipped for `robot`
    on `terrain`; a robot no model is shipped for (one from a spec file) is a one-line error saying how to get one."""
    init = checkpoint or str(default_checkpoint(robot, kind, terrain))
    if not checkpoint and not Path(init).is_file():
        raise CLIError(f"no {kind} model is shipped for robot '{robot.name}' ({init}); fit one on its data "
                       "(`flashnerd record --robot ...`, `flashnerd fit`) and pass it as --dynamics_checkpoint")
    return init
