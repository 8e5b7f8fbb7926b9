"""`RslRlVecEnvWrapper`: presents a FlashNeRD env as `rsl_rl.env.VecEnv` with Isaac Lab's semantics."""

from __future__ import annotations

import contextlib
import io
import math
import os
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import torch
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict

from flashnerd.envs.core import FlashNeRDEnv
from flashnerd.envs.memory import check_env_memory
from flashnerd.models.checkpoint import check_optimizer_state, load_plain_pickle
from flashnerd.utils.atomic import atomic_path
from flashnerd.utils.distributed import dist_info, init_distributed
from flashnerd.utils.machine import describe_machine
from flashnerd.utils.seeding import seed_everything


class RslRlVecEnvWrapper(VecEnv):
    """Observations as a TensorDict of groups, `dones = terminated | truncated`, `extras["time_outs"] = truncated`.

    Actions are clipped to [-clip_actions, clip_actions] when `clip_actions` is given.
    """

    def __init__(self, env: gym.Env | FlashNeRDEnv, clip_actions: float | None = None) -> None:
        self.env = env
        self.unwrapped: FlashNeRDEnv = env.unwrapped  # type: ignore[assignment]
        if not isinstance(self.unwrapped, FlashNeRDEnv):
            raise ValueError(f"RslRlVecEnvWrapper wraps FlashNeRD envs, got {type(self.unwrapped).__name__}")
        self.clip_actions = clip_actions
        self.num_envs = self.unwrapped.num_envs
        self.num_actions = self.unwrapped.num_actions
        self.device = self.unwrapped.device
        self.max_episode_length = self.unwrapped.max_episode_length
        self.cfg = self.unwrapped.cfg
        # rsl_rl never calls reset(); do it once here (this also satisfies gymnasium's order checks).
        self.env.reset()

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.unwrapped.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        # rsl_rl randomizes episode lengths at start (init_at_random_ep_len); write into the env's own buffer.
        self.unwrapped.episode_length_buf.copy_(value)

    def to_tensordict(self, obs: dict[str, torch.Tensor]) -> TensorDict:
        """Observation groups {group: (N, D)} as the TensorDict that rsl_rl models read."""
        return TensorDict(obs, batch_size=[self.num_envs], device=self.device)

    def get_observations(self) -> TensorDict:
        """Current observation groups as a TensorDict with batch size (num_envs,)."""
        return self.to_tensordict(self.unwrapped.get_observations())

    def reset(self) -> tuple[TensorDict, dict]:
        obs, extras = self.env.reset()
        return self.to_tensordict(obs), extras

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """One control step; returns (obs, rewards (N,), dones (N,) long, extras)."""
        if self.clip_actions is not None:
            actions = torch.clamp(actions, -self.clip_actions, self.clip_actions)
        obs, rew, terminated, truncated, extras = self.env.step(actions)
        dones = (terminated | truncated).to(torch.long)
        extras["time_outs"] = truncated
        return self.to_tensordict(obs), rew, dones, extras

    def close(self) -> None:
        self.env.close()


def read_policy_checkpoint(path: str, map_location: str | None = None) -> dict:
    """An rsl_rl policy checkpoint read with `torch.load(weights_only=True)`: its networks, optimizer and counters
    are tensors and plain types, and a pickle that asks to build anything else is refused before it runs code."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"policy checkpoint '{path}' does not exist")
    loaded = load_plain_pickle(path, "policy checkpoint", map_location)
    if not isinstance(loaded, dict) or "actor_state_dict" not in loaded or "iter" not in loaded:
        raise ValueError(f"'{path}' is not an rsl_rl policy checkpoint (no actor_state_dict/iter); pass a "
                         "model_<it>.pt written by `flashnerd train`")
    it = loaded["iter"]
    if isinstance(it, bool) or not isinstance(it, int) or it < 0:
        raise ValueError(f"policy checkpoint '{path}' is corrupt: its iteration count is {str(it)[:40]!r}, not a "
                         "whole number >= 0")
    if not all(isinstance(key, str) for key in loaded):
        raise ValueError(f"policy checkpoint '{path}' is corrupt: its entries are not all named by text")
    for key, value in loaded.items():
        if key.endswith("state_dict") and not isinstance(value, dict):
            raise ValueError(f"policy checkpoint '{path}' is corrupt: {key} is not a mapping")
    for key in ("actor_state_dict", "critic_state_dict"):
        weights = loaded.get(key, {})
        if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()):
            raise ValueError(f"policy checkpoint '{path}' is corrupt: {key} is not a mapping of names to tensors")
    _check_finite(loaded, "actor_state_dict", path)  # the critic and optimizer matter to training only (`load`)
    return loaded


def _check_finite(loaded: dict, key: str, path: str) -> None:
    """Refuse a checkpoint whose `key` state dict holds NaN or infinite floating-point values."""
    weights = loaded.get(key, {})
    bad = [k for k, v in weights.items() if v.is_floating_point() and not bool(v.isfinite().all())]
    if bad:
        raise ValueError(f"policy checkpoint '{path}' holds non-finite values in {key}.{bad[0]}; it cannot be used")


class _TimeBudgetSpent(Exception):
    """Raised after the iteration that spent the runner's `max_seconds`; `FlashNeRDRunner.learn` catches it."""


class FlashNeRDRunner(OnPolicyRunner):
    """rsl_rl's `OnPolicyRunner` whose checkpoints are written to a temporary file and renamed (never torn), which
    knows the last iteration it completed (for saving on Ctrl-C and resuming to an exact iteration count), and which
    stops early once `max_seconds` of training (collect + update, summed over iterations) are spent."""

    def __init__(self, *args, verbose: bool = False, max_seconds: float | None = None, **kwargs) -> None:
        # rsl_rl prints the networks on construction: to stderr when `verbose` (training), else nowhere, because
        # stdout carries our JSON and a user error must stay one line on stderr.
        with contextlib.redirect_stdout(sys.stderr if verbose else io.StringIO()):
            super().__init__(*args, **kwargs)
        self.last_completed_iteration = -1
        # (accumulated collect + learn seconds, mean episode return) after each iteration of this process
        self.iteration_curve: list[tuple[float, float]] = []
        # the two halves of those seconds: rollouts in the env (policy inference included), and the PPO update
        self.collect_seconds = self.learn_seconds = 0.0
        # a training-time budget (equal-wall-time comparisons, "train for 30 minutes"); None: iterations only
        self.max_seconds = max_seconds
        self.stopped_by_time = False
        self._spent_before = 0.0  # training seconds before the current `learn` call
        self.seconds_before = 0.0  # training seconds of the stopped process a resumed run continues (`train_policy`)
        # what the checkpoint a resumed run continues from recorded of the iterations before it (`restore_progress`):
        # their curve, on the run's own clock, and their collect / update seconds
        self.curve_before: list[tuple[float, float]] = []
        self.collect_before = self.learn_before = 0.0
        # (first iteration, machine) of each stretch of the run on one machine before this process (a run resumed
        # in another session may have trained on another), and the iteration this process started from
        self.machines_before: list[tuple[int, str]] = []
        self.resumed_from = 0
        self.checkpoint_infos: dict = {}  # what the caller has every checkpoint record besides (`train_policy`)
        self.tracker_state: dict[str, float] = {}  # the env's trackers at the end of training (`train_policy`)
        self.dynamics_checkpoint: str | None = None  # the learned model it trained on (`train_policy`), if any
        self.resumed_at = 0  # iterations a stopped run had done when `train_policy(resume=True)` continued it
        log = self.logger.log

        def log_and_record(**kw) -> None:  # rsl_rl logs once per iteration, after the policy update
            self.last_completed_iteration = kw["it"]
            self.collect_seconds += kw["collect_time"]
            self.learn_seconds += kw["learn_time"]
            elapsed = (self.iteration_curve[-1][0] if self.iteration_curve else 0.0)
            returns = self.logger.rewbuffer
            self.iteration_curve.append((elapsed + kw["collect_time"] + kw["learn_time"],
                                         statistics.mean(returns) if len(returns) else float("nan")))
            log(**kw)
            if self.max_seconds is not None and self._budget_spent(self.iteration_curve[-1][0] - self._spent_before):
                raise _TimeBudgetSpent

        self.logger.log = log_and_record

    def _budget_spent(self, seconds: float) -> bool:
        """Whether `seconds` of training reach `max_seconds`; under torchrun rank 0's clock decides for every rank
        (ranks whose clocks disagree would otherwise stop at different iterations and hang in the collectives)."""
        spent = seconds >= self.max_seconds
        if self.is_distributed:
            flag = torch.tensor([float(spent)], device=self.device)  # (1,) on the runner's device: nccl needs CUDA
            torch.distributed.broadcast(flag, src=0)
            spent = bool(flag.item())
        return spent

    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> None:
        """rsl_rl's loop; when `max_seconds` runs out it stops after that iteration and, as rsl_rl does at the end,
        saves `model_<it>.pt` and closes the log writer (`stopped_by_time` says it did). The budget counts this
        call's iterations, as SHAC's `learn` does."""
        self.stopped_by_time = False
        self._spent_before = self.iteration_curve[-1][0] if self.iteration_curve else 0.0
        try:
            super().learn(num_learning_iterations, init_at_random_ep_len)
        except _TimeBudgetSpent:
            self.stopped_by_time = True
            if self.logger.writer is not None:
                self.save(os.path.join(self.logger.log_dir, f"model_{self.current_learning_iteration}.pt"))
                self.logger.stop_logging_writer()

    def _configure_multi_gpu(self) -> None:
        """rsl_rl's multi-process PPO needs CUDA and nccl; on the CPU the same collectives run over gloo."""
        info = dist_info()
        if not info.enabled or torch.device(self.device).type == "cuda":
            super()._configure_multi_gpu()
            return
        self.gpu_world_size, self.is_distributed = info.world_size, True
        self.gpu_local_rank, self.gpu_global_rank = info.local_rank, info.rank
        self.cfg["multi_gpu"] = {"global_rank": info.rank, "local_rank": info.local_rank,
                                 "world_size": info.world_size}
        init_distributed("cpu")  # the process group every flashnerd job uses: gloo on the CPU

    def load(self, path: str, load_cfg: dict | None = None, strict: bool = True,
             map_location: str | None = None) -> dict:
        """rsl_rl's `load` on a file read with `read_policy_checkpoint` (tensors and plain types only); a checkpoint
        of another task or network shape, or a non-finite critic or broken optimizer state where `load_cfg` asks for
        them (everything by default, as a resumed run needs), is a one-line error."""
        loaded = read_policy_checkpoint(path, map_location)
        if load_cfg is None or load_cfg.get("critic"):
            _check_finite(loaded, "critic_state_dict", path)
        try:
            load_iteration = self.alg.load(loaded, load_cfg, strict)
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError, AttributeError) as err:
            # (AttributeError: torch's optimizer reads `state.items()` of whatever the file holds there)
            lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [""]
            # torch's first line only names the module; the size mismatch or missing key comes after it
            found = (line for line in lines if line.startswith(("size mismatch", "Missing key", "Unexpected key")))
            detail = next(found, lines[0])[:200]
            raise ValueError(f"policy checkpoint '{path}' does not fit this task's policy ({detail}); pass a "
                             "checkpoint trained on this task with the same observations and network (and give "
                             "eval/play the observation overrides the policy was trained with)") from err
        if load_cfg is None or load_cfg.get("optimizer"):
            check_optimizer_state(self.alg.optimizer, f"policy checkpoint '{path}'")
        if load_iteration:
            self.current_learning_iteration = loaded["iter"]
        return loaded.get("infos")

    def full_curve(self) -> list[tuple[float, float]]:
        """(training seconds, mean episode return) after every iteration of the whole run, a resumed run's earlier
        iterations (from its checkpoint) included, on one clock."""
        return self.curve_before + [(self.seconds_before + t, r) for t, r in self.iteration_curve]

    def save(self, path: str, infos: dict | None = None) -> None:
        # the training seconds, the curve and its halves so far go with every checkpoint, so a run resumed from it
        # can report its whole time and curve
        curve = self.full_curve()
        spent = curve[-1][0] if curve else self.seconds_before
        progress = {"train_seconds": round(spent, 3), "curve": [[t, r] for t, r in curve],
                    "collect_seconds": self.collect_before + self.collect_seconds,
                    "learn_seconds": self.learn_before + self.learn_seconds,
                    "machines": [[it, m] for it, m in self.machines()],
                    "trackers": self.env.unwrapped.tracker_checkpoint()}  # e.g. each world's terrain level
        # rsl_rl's own save, written through a temporary file: the upload to external loggers names the final file
        saved = self.alg.save()
        saved["iter"] = self.current_learning_iteration
        saved["infos"] = {**progress, **self.checkpoint_infos, **(infos or {})}
        with atomic_path(path) as tmp:
            torch.save(saved, tmp)
        self.logger.save_model(path, self.current_learning_iteration)

    def machines(self) -> list[tuple[int, str]]:
        """(first iteration, machine) of each stretch of the whole run trained on one machine, this process's last."""
        here = describe_machine(self.device)
        same = self.machines_before and self.machines_before[-1][1] == here
        return self.machines_before + ([] if same else [(self.resumed_from, here)])

    def restore_progress(self, infos, done: int) -> None:
        """Continue the clock of the checkpoint a run resumes from, `done` iterations into it: its training seconds
        (`seconds_in`) and, where it recorded them as `save` does, its curve of `done` points, its collect / update
        seconds and the machines it trained on (`curve_before` stays empty otherwise: a checkpoint of rsl_rl itself or
        of an older flashnerd); and the env's trackers where it recorded them (the terrain curriculum continues from
        each world's level instead of starting over; every world then starts a fresh episode)."""
        if isinstance(infos, dict) and "trackers" in infos:
            self.env.unwrapped.restore_trackers(infos["trackers"])
        self.seconds_before, self.resumed_from = seconds_in(infos), done
        curve = curve_in(infos, done)
        if curve:
            self.curve_before, self.seconds_before = curve, curve[-1][0]  # the unrounded seconds of the curve
            self.collect_before, self.learn_before = (_seconds(infos.get(k)) or 0.0 for k in ("collect_seconds",
                                                                                                "learn_seconds"))
            self.machines_before = machines_in(infos, done)


def make_runner(task: str, env_cfg, agent_cfg, log_dir: str | None = None, verbose: bool = False,
                max_seconds: float | None = None) -> tuple[RslRlVecEnvWrapper, FlashNeRDRunner]:
    """The wrapped env of `task` on `env_cfg` and a PPO runner with `agent_cfg` that logs to `log_dir` (None: no
    logs) and stops after `max_seconds` of training (None: no limit), as `flashnerd train`, `eval`, `play` and the
    benchmarks build them. A world count that would not fit in memory is a one-line error before anything is built."""
    check_env_memory(task, env_cfg, agent_cfg)
    env = RslRlVecEnvWrapper(gym.make(task, cfg=env_cfg), clip_actions=agent_cfg.clip_actions)
    runner = FlashNeRDRunner(env, agent_cfg.to_rsl_rl_dict(), log_dir, device=agent_cfg.device, verbose=verbose,
                             max_seconds=max_seconds)
    return env, runner


CHECKPOINT_EVERY = 100  # iterations between the checkpoints a long stage (a bench, an improve round) resumes from


def _seconds(value) -> float | None:
    """`value` as seconds where it is a plain finite number >= 0 (no bool, no int too large for a float), else None."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def seconds_in(infos) -> float:
    """The training seconds a policy checkpoint's `infos` record (`FlashNeRDRunner.save`); 0 where there are none or
    they are not a finite number >= 0 (a checkpoint of rsl_rl itself, or an edited one)."""
    spent = _seconds(infos.get("train_seconds")) if isinstance(infos, dict) else None
    return spent or 0.0


def curve_in(infos, done: int) -> list[tuple[float, float]] | None:
    """The training curve a policy checkpoint's `infos` record (`FlashNeRDRunner.save`): `done` pairs of (training
    seconds, mean return), the seconds finite, >= 0 and never falling, the returns floats (NaN before the first
    episode ends). None where there is no such curve (an rsl_rl checkpoint, an older flashnerd one, an edited one)."""
    curve = infos.get("curve") if isinstance(infos, dict) else None
    if not isinstance(curve, list) or len(curve) != done:
        return None
    out = []
    for point in curve:
        if not (isinstance(point, (list, tuple)) and len(point) == 2 and isinstance(point[1], float)):
            return None
        t, r = _seconds(point[0]), point[1]
        if t is None or t < (out[-1][0] if out else 0.0) or math.isinf(r):
            return None
        out.append((t, r))
    return out


def machines_in(infos: dict, done: int) -> list[tuple[int, str]]:
    """The (first iteration, machine) stretches a policy checkpoint's `infos` record (`FlashNeRDRunner.save`): the
    first at iteration 0, each later one after the one before and below `done`, a machine a short string; empty
    where there are none such."""
    found = infos.get("machines")
    if not isinstance(found, list):
        return []
    out: list[tuple[int, str]] = []
    for item in found:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and type(item[0]) is int
                and isinstance(item[1], str) and len(item[1]) <= 300):
            return []
        in_order = item[0] == 0 if not out else out[-1][0] < item[0] < done
        if not in_order:
            return []
        out.append((item[0], item[1]))
    return out


def last_checkpoint(log_dir: str | Path) -> tuple[Path, int] | None:
    """The `model_<it>.pt` in `log_dir` with the highest iteration and that iteration, or None when there is none."""
    found = [(int(p.stem[len("model_"):]), p) for p in Path(log_dir).glob("model_*.pt")
             if p.stem[len("model_"):].isdigit()]
    if not found:
        return None
    it, path = max(found)
    return path, it


def train_policy(task: str, env_cfg, agent_cfg, log_dir: str | None, iterations: int,
                 init: str | None = None, max_seconds: float | None = None, resume: bool = False,
                 checkpoint_infos: dict | None = None) -> tuple[FlashNeRDRunner, float]:
    """Seeded PPO on `task`: `iterations` iterations of `agent_cfg` (from the policy checkpoint `init`, counted from
    zero, when given), fewer when `max_seconds` of training run out first. With `resume`, a stopped run of the same
    stage continues from the last `model_<it>.pt` in `log_dir` (saved every `agent_cfg.save_interval` iterations) up
    to `iterations` in all (and `max_seconds` of training in all, the stopped runs' included); `runner.resumed_at` is
    the iteration count it found (0: started afresh) and `runner.full_curve()` the whole run's curve. Every checkpoint
    records `checkpoint_infos` (plain values) besides the run's progress. Returns the runner
    (its env closed; its `tracker_state` holds the env's trackers at the end, e.g. the terrain level, and
    `dynamics_checkpoint` the learned model's file, the shipped default included) and the training time in seconds
    (the stopped runs' collect + update seconds, from the checkpoint, plus this call's wall time)."""
    seed_everything(agent_cfg.seed)
    env, runner = make_runner(task, env_cfg, agent_cfg, log_dir, max_seconds=max_seconds)
    runner.checkpoint_infos = dict(checkpoint_infos or {})
    found = last_checkpoint(log_dir) if resume and log_dir is not None else None
    if found is not None:  # a checkpoint's "iter" is its last completed iteration
        runner.restore_progress(runner.load(str(found[0]), map_location=agent_cfg.device), found[1] + 1)
        runner.resumed_at = runner.current_learning_iteration = min(found[1] + 1, iterations)
    elif init is not None:
        runner.load(init, map_location=agent_cfg.device)
        runner.current_learning_iteration = 0
    # `max_seconds` is the whole run's: a resumed run has the stopped runs' seconds fewer left
    # (a checkpoint without a curve saves its seconds to the millisecond)
    left = None if max_seconds is None else max_seconds - runner.seconds_before
    start = time.perf_counter()
    if iterations > runner.resumed_at and (left is None or left > (1e-3 if runner.resumed_at else 0.0)):
        runner.max_seconds = left
        runner.learn(num_learning_iterations=iterations - runner.resumed_at, init_at_random_ep_len=found is None)
    else:  # the stopped run had finished training (its iterations or its seconds): its last checkpoint is the policy
        runner.current_learning_iteration = runner.resumed_at - 1
        runner.stopped_by_time = iterations > runner.resumed_at
    wall = runner.seconds_before + time.perf_counter() - start
    runner.tracker_state = env.unwrapped.tracker_state()
    path = getattr(env.unwrapped.dyn, "checkpoint_path", None)
    runner.dynamics_checkpoint = None if path is None else str(Path(path).resolve())
    env.close()
    return runner, wall
