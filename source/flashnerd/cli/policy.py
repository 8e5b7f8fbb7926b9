"""Policy checkpoints for the commands that run a trained policy: found like Isaac Lab's (a file, or the newest run and
its highest-numbered checkpoint), read safely before any env is built, loaded into a runner. Kept apart from
`common` because it needs rsl_rl, whose import (tensordict, torch's compiler) commands without a policy skip."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from flashnerd.cli.common import CLIError
from flashnerd.cli.overrides import task_cfgs_with_overrides
from flashnerd.envs.rsl_rl import make_runner, read_policy_checkpoint


def resolve_checkpoint(log_root: str, experiment: str, load_run: str | None, checkpoint: str | None) -> Path:
    """Find a policy checkpoint like Isaac Lab: an explicit file, or the newest run matching `load_run` and the
    highest-numbered file matching `checkpoint` inside it; the file found must read as an rsl_rl checkpoint."""
    if checkpoint and Path(checkpoint).is_file():
        return _checked(Path(checkpoint))
    root = Path(log_root) / experiment
    if checkpoint and os.sep in checkpoint:
        raise CLIError(f"checkpoint file '{checkpoint}' does not exist")
    if not root.is_dir():
        raise CLIError(f"no runs under '{root}'; train first or pass --checkpoint PATH")
    run_re = _pattern("load_run", load_run or ".*")
    runs = sorted(d for d in root.iterdir() if d.is_dir() and run_re.fullmatch(d.name))
    if not runs:
        raise CLIError(f"no run in '{root}' matches --load_run '{load_run}'")
    ckpt_re = _pattern("checkpoint", checkpoint or r"model_\d+\.pt")
    files = [f for f in runs[-1].iterdir() if ckpt_re.fullmatch(f.name)]
    if not files:
        raise CLIError(f"no checkpoint in '{runs[-1]}' matches '{checkpoint or 'model_<it>.pt'}'")
    return _checked(max(files, key=lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", f.name)]))


def _pattern(flag: str, text: str) -> re.Pattern:
    """--load_run or --checkpoint (not a file) as the regex it is then read as; a bad one is a one-line error."""
    try:
        return re.compile(text)
    except re.error as err:
        raise CLIError(f"--{flag} '{text}' is {'not a file, nor' if flag == 'checkpoint' else 'not'} a valid regex "
                       f"({err})") from err


def _checked(path: Path) -> Path:
    """`path` after reading it safely once, so a hostile or foreign file fails before any env or log is built."""
    read_policy_checkpoint(str(path))
    return path


def load_policy(runner, path: Path, device: str):
    """Load the actor of a runner checkpoint (read safely, see `read_policy_checkpoint`) and return its inference
    policy; the critic and optimizer, which acting never reads, are left out."""
    runner.load(str(path), {"actor": True}, map_location=device)
    return runner.get_inference_policy(device=device)


def env_and_policy(args: argparse.Namespace):
    """For play/eval: (wrapped env, runner, inference policy, checkpoint path, env_cfg) of `args`."""
    env_cfg, agent_cfg = task_cfgs_with_overrides(args)
    path = resolve_checkpoint(args.log_root, agent_cfg.experiment_name, args.load_run, args.checkpoint)
    env, runner = make_runner(args.task, env_cfg, agent_cfg)
    return env, runner, load_policy(runner, path, agent_cfg.device), path, env_cfg
