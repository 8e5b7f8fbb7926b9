"""SHAC: short-horizon actor-critic through a differentiable learned model (Xu et al., ICLR 2022).

Each iteration rolls every world H steps through the env on a differentiable learned backend, with reparameterized
actions (mean + std * noise), and takes one gradient step of the actor on the negative discounted H-step return plus
the critic's value at the end of the window, back-propagated through the model's predicted states, the task's
observations and its rewards. The critic then regresses TD(lambda) targets of a slowly moving target critic on the
window's detached observations. Worlds that end inside a window close their return there and restart from their
reset state (no gradient crosses a reset). The actor and critic are rsl_rl's models of the task's agent config, and
the checkpoints are rsl_rl's, so `flashnerd eval` / `play` load a SHAC policy like a PPO one.

Time-outs are not bootstrapped from the state before the reset (the env reports the state after it): the actor's
return closes without a value there, and the critic's target takes the value of the state one step earlier. With
1,000-step episodes and 32-step windows this touches about 3% of the windows.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import torch
from tensordict import TensorDict

from flashnerd.envs.rsl_rl import FlashNeRDRunner, RslRlVecEnvWrapper, make_runner, read_policy_checkpoint
from flashnerd.models.checkpoint import CheckpointError, load_optimizer_state
from flashnerd.utils.atomic import atomic_path
from flashnerd.utils.seeding import seed_everything


@dataclass
class ShacCfg:
    """SHAC hyperparameters (the paper's defaults where they carry over)."""

    horizon: int = 32  # H: steps per differentiable rollout (the truncation of backpropagation)
    actor_learning_rate: float = 2.0e-3
    critic_learning_rate: float = 2.0e-3
    betas: tuple[float, float] = (0.7, 0.95)  # Adam's, as SHAC
    lr_schedule: str = "linear"  # "linear": both rates fall linearly to 0 over the run; "constant"
    gamma: float = 0.99
    lam: float = 0.95  # TD(lambda) of the critic's targets
    critic_iterations: int = 16  # passes over the window's samples per iteration
    critic_mini_batches: int = 4
    target_critic_alpha: float = 0.2  # target <- alpha * target + (1 - alpha) * critic after each iteration
    max_grad_norm: float = 1.0  # actor and critic gradient clipping
    # recompute each model step's activations in the backward pass instead of keeping them (LearnedConfig)
    grad_checkpoint: bool = False


def check_shac_cfg(cfg: ShacCfg) -> None:
    """One-line errors for settings SHAC cannot run with."""
    if cfg.horizon < 1:
        raise ValueError(f"SHAC's horizon must be at least 1 step, got {cfg.horizon}")
    if cfg.lr_schedule not in ("linear", "constant"):
        raise ValueError(f"unknown SHAC lr_schedule '{cfg.lr_schedule}'; choose linear or constant")
    if not (0.0 < cfg.gamma <= 1.0 and 0.0 <= cfg.lam < 1.0 and 0.0 <= cfg.target_critic_alpha < 1.0):
        raise ValueError("SHAC needs 0 < gamma <= 1, 0 <= lam < 1 and 0 <= target_critic_alpha < 1")


SHAC_STATE = ("shac_actor_optimizer", "shac_critic_optimizer", "shac_target_critic")  # saved beside rsl_rl's keys


class ShacTrainer:
    """SHAC on the env of `runner` (a `FlashNeRDRunner` from `make_runner`, whose actor and critic it trains)."""

    def __init__(self, env: RslRlVecEnvWrapper, runner: FlashNeRDRunner, cfg: ShacCfg, max_iterations: int,
                 log_dir: str | None = None) -> None:
        check_shac_cfg(cfg)
        if not env.unwrapped.differentiable:
            raise ValueError(f"SHAC differentiates through the dynamics, and backend '{env.cfg.dynamics}' is not "
                             "differentiable; train on a learned backend (flashnerd, nerd, rwm) made with "
                             "differentiable=True (`flashnerd train --algo shac` does this)")
        self.env, self.runner, self.cfg = env, runner, cfg
        self.actor, self.critic = runner.alg.actor, runner.alg.critic
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_learning_rate, betas=cfg.betas)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_learning_rate, betas=cfg.betas)
        self.max_iterations = max_iterations
        self.iteration = 0  # iterations completed
        self.log_dir = log_dir
        self.writer = None
        if log_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=log_dir, flush_secs=10)
        n = env.num_envs
        self._episode_return = torch.zeros(n, device=env.device)  # (N,) running return of each world's episode
        self._episode_length = torch.zeros(n, device=env.device)
        self.returns: deque[float] = deque(maxlen=100)  # finished episodes, as rsl_rl's reward buffer
        self.lengths: deque[float] = deque(maxlen=100)
        self.total_time = 0.0
        self.stopped_by_time = False  # the last `learn` ended on its `max_seconds`
        # (accumulated iteration seconds, mean episode return) after each iteration of this process, as the PPO
        # runner's `iteration_curve`
        self.iteration_curve: list[tuple[float, float]] = []

    # --- one iteration ------------------------------------------------------------------------------------------

    def _act(self, obs: TensorDict) -> torch.Tensor:
        """Reparameterized actions (N, na): the actor's mean plus its std times standard normal noise."""
        mean = self.actor(obs)  # (N, na) the deterministic output
        self.actor.distribution.update(mean)
        return mean + self.actor.distribution.std * torch.randn_like(mean)  # (N, na)

    def _rollout(self) -> tuple[torch.Tensor, dict]:
        """H differentiable steps from the current states: the actor's loss and the window's detached data."""
        cfg, env, n = self.cfg, self.env, self.env.num_envs
        obs = env.get_observations()
        if self.actor.obs_normalization:
            self.actor.update_normalization(obs)
        if self.critic.obs_normalization:
            self.critic.update_normalization(obs)
        acc = torch.zeros(n, device=env.device)  # (N,) discounted return since the window (or episode) began
        discount = torch.ones(n, device=env.device)  # (N,)
        loss = torch.zeros((), device=env.device)
        observations, rewards, dones, time_outs = [obs.detach()], [], [], []
        for _ in range(cfg.horizon):
            obs, reward, done, extras = env.step(self._act(obs))
            ended = done.bool()  # (N,)
            acc = acc + discount * reward
            loss = loss - (acc * ended).sum()  # ended episodes close their return (no gradient crosses a reset)
            acc = torch.where(ended, 0.0, acc)
            discount = torch.where(ended, 1.0, discount * cfg.gamma)
            observations.append(obs.detach())
            rewards.append(reward.detach())
            dones.append(ended)
            time_outs.append(extras["time_outs"].bool())
            self._track_episodes(reward.detach(), ended)
        loss = loss - (acc + discount * self.critic(obs)[:, 0]).sum()  # the critic values the rest
        loss = loss / (cfg.horizon * n)
        data = dict(obs=torch.stack(observations), reward=torch.stack(rewards), done=torch.stack(dones),
                    time_out=torch.stack(time_outs))  # (H+1, N) TensorDict, (H, N) x3
        return loss, data

    def _track_episodes(self, reward: torch.Tensor, ended: torch.Tensor) -> None:
        self._episode_return += reward
        self._episode_length += 1
        if ended.any():
            self.returns.extend(self._episode_return[ended].tolist())
            self.lengths.extend(self._episode_length[ended].tolist())
            self._episode_return[ended] = 0.0
            self._episode_length[ended] = 0.0

    @torch.no_grad()
    def _targets(self, data: dict) -> torch.Tensor:
        """TD(lambda) value targets (H, N) from the target critic; terminations bootstrap nothing, time-outs the
        value of the state before the last step."""
        cfg = self.cfg
        values = self.target_critic(data["obs"].flatten(0, 1))[:, 0].view(cfg.horizon + 1, -1)  # (H+1, N)
        done, time_out, reward = data["done"].float(), data["time_out"], data["reward"]
        next_values = torch.where(time_out, values[:-1], values[1:]) * (1.0 - done + time_out.float())  # (H, N)
        lam = cfg.lam
        targets = torch.empty_like(reward)  # (H, N)
        a = torch.zeros_like(reward[0])
        b = torch.zeros_like(reward[0])
        lam_acc = torch.ones_like(reward[0])
        for t in reversed(range(cfg.horizon)):  # SHAC's recursive TD(lambda) with episode ends inside the window
            # the window's end closes every world's return like an episode end, bootstrapped by next_values
            d = done[t] if t < cfg.horizon - 1 else torch.ones_like(done[t])
            lam_acc = lam_acc * lam * (1.0 - d) + d
            a = (1.0 - d) * (lam * cfg.gamma * a + cfg.gamma * next_values[t] + (1.0 - lam_acc) / (1.0 - lam)
                             * reward[t])
            b = cfg.gamma * (next_values[t] * d + b * (1.0 - d)) + reward[t]
            targets[t] = (1.0 - lam) * a + lam_acc * b
        return targets

    def _fit_critic(self, data: dict) -> float:
        """Regress the critic on the targets over shuffled mini-batches; returns the last pass's mean loss."""
        cfg = self.cfg
        obs = data["obs"][:-1].flatten(0, 1)  # (H*N,) TensorDict
        targets = self._targets(data).flatten()  # (H*N,)
        size = targets.shape[0]
        batch = max(1, size // cfg.critic_mini_batches)
        last = 0.0
        for _ in range(cfg.critic_iterations):
            order = torch.randperm(size, device=targets.device)
            total = 0.0
            for start in range(0, size - batch + 1, batch):
                idx = order[start:start + batch]
                loss = (self.critic(obs[idx])[:, 0] - targets[idx]).square().mean()
                self.critic_opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                self.critic_opt.step()
                total += loss.item()
            last = total / max(1, size // batch)
        with torch.no_grad():
            a = cfg.target_critic_alpha
            for p, tp in zip(self.critic.parameters(), self.target_critic.parameters()):
                tp.mul_(a).add_(p, alpha=1.0 - a)
        return last

    def _set_learning_rates(self) -> float:
        frac = 1.0 - self.iteration / self.max_iterations if self.cfg.lr_schedule == "linear" else 1.0
        for opt, lr in ((self.actor_opt, self.cfg.actor_learning_rate),
                        (self.critic_opt, self.cfg.critic_learning_rate)):
            for group in opt.param_groups:
                group["lr"] = lr * frac
        return frac

    def learn(self, iterations: int, save_interval: int = 50, max_seconds: float | None = None) -> None:
        """Run `iterations` SHAC iterations (from `self.iteration`), logging and saving every `save_interval`; with
        `max_seconds`, stop (and save) after the iteration that brings this call's training time to it."""
        end = self.iteration + iterations
        spent_before = self.total_time
        self.stopped_by_time = False
        self.runner.alg.train_mode()  # an evaluation in between leaves eval mode, which freezes obs normalization
        while self.iteration < end:
            start = time.perf_counter()
            frac = self._set_learning_rates()
            loss, data = self._rollout()
            self.actor_opt.zero_grad(set_to_none=True)
            loss.backward()
            self.env.unwrapped.detach()  # the next window starts from these states, without their history
            grad_norm = torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.cfg.max_grad_norm)
            skipped = not torch.isfinite(grad_norm)
            if skipped:  # a diverged world's NaN must not reach the weights; the env resets it
                self.actor_opt.zero_grad(set_to_none=True)
            else:
                self.actor_opt.step()
            value_loss = self._fit_critic(data)
            elapsed = time.perf_counter() - start
            self.total_time += elapsed
            self.iteration_curve.append((self.total_time,
                                         statistics.fmean(self.returns) if self.returns else float("nan")))
            self._log(loss.item(), value_loss, float(grad_norm), frac, elapsed, skipped)
            self.iteration += 1
            self.stopped_by_time = max_seconds is not None and self.total_time - spent_before >= max_seconds
            if self.log_dir is not None and (self.iteration % save_interval == 0 or self.iteration == end
                                             or self.stopped_by_time):
                self.save(str(Path(self.log_dir) / f"model_{self.iteration - 1}.pt"))
            if self.stopped_by_time:
                break

    def _log(self, actor_loss: float, value_loss: float, grad_norm: float, lr_frac: float, elapsed: float,
             skipped: bool) -> None:
        it = self.iteration
        steps = self.cfg.horizon * self.env.num_envs
        mean_return = statistics.fmean(self.returns) if self.returns else float("nan")
        mean_length = statistics.fmean(self.lengths) if self.lengths else float("nan")
        if self.writer is not None:
            scalars = {
                "Loss/actor": actor_loss, "Loss/value_function": value_loss, "Loss/actor_grad_norm": grad_norm,
                "Loss/learning_rate": self.cfg.actor_learning_rate * lr_frac,
                "Policy/mean_std": float(self.actor.distribution.std.detach().mean()),
                "Perf/total_fps": steps / elapsed,
                "Perf/iteration_time": elapsed,
            }
            if self.returns:
                scalars["Train/mean_reward"] = mean_return
                scalars["Train/mean_episode_length"] = mean_length
                self.writer.add_scalar("Train/mean_reward/time", mean_return, int(self.total_time))
            for name, value in scalars.items():
                self.writer.add_scalar(name, value, it)
            for name, value in self.env.unwrapped.extras.get("log", {}).items():
                self.writer.add_scalar(name, float(value), it)
        print(f"[shac] it {it:5d}  actor loss {actor_loss:9.4f}  value loss {value_loss:9.4f}  "
              f"grad {grad_norm:8.3f}{' (skipped)' if skipped else ''}  return {mean_return:8.2f}  "
              f"length {mean_length:7.1f}  {steps / elapsed:7.0f} steps/s", flush=True)

    def get_inference_policy(self, device: str | None = None):
        """The actor's deterministic policy, as the PPO runner's (`flashnerd eval` and the evaluators call it)."""
        return self.runner.get_inference_policy(device=device)

    # --- checkpoints --------------------------------------------------------------------------------------------

    def save(self, path: str) -> None:
        """rsl_rl's checkpoint layout (actor, critic, optimizer, iter; `flashnerd eval` loads it) plus SHAC's own
        optimizers and target critic, written to a temporary file and renamed."""
        saved = self.runner.alg.save()
        saved.update(iter=self.iteration - 1, infos=None, algo="shac",
                     shac_actor_optimizer=self.actor_opt.state_dict(),
                     shac_critic_optimizer=self.critic_opt.state_dict(),
                     shac_target_critic=self.target_critic.state_dict())
        with atomic_path(path) as tmp:
            torch.save(saved, tmp)

    def init_from(self, path: str) -> None:
        """Start from the actor and critic of a policy checkpoint, PPO's or SHAC's (read with `torch.load(
        weights_only=True)`; one of another task or network shape is a one-line error), with fresh optimizers and the
        iteration count at zero, as PPO's `train_policy(init=...)`; the target critic copies the loaded critic."""
        self.runner.load(path, {"actor": True, "critic": True}, strict=True, map_location=str(self.env.device))
        self.target_critic.load_state_dict(self.critic.state_dict())

    def load(self, path: str) -> None:
        """Continue from a SHAC checkpoint (read with `torch.load(weights_only=True)`)."""
        loaded = read_policy_checkpoint(path, str(self.env.device))
        if loaded.get("algo") != "shac":
            raise ValueError(f"'{path}' is not a SHAC checkpoint; --resume with --algo shac continues SHAC runs only")
        missing = [k for k in SHAC_STATE if k not in loaded]
        if missing:
            raise ValueError(f"SHAC checkpoint '{path}' lacks {', '.join(missing)}; it is truncated or not written "
                             "by `flashnerd train --algo shac`")
        self.runner.load(path, {"actor": True, "critic": True}, strict=True, map_location=str(self.env.device))
        load_optimizer_state(self.actor_opt, loaded["shac_actor_optimizer"], f"SHAC checkpoint '{path}'")
        load_optimizer_state(self.critic_opt, loaded["shac_critic_optimizer"], f"SHAC checkpoint '{path}'")
        try:
            self.target_critic.load_state_dict(loaded["shac_target_critic"])
        except (RuntimeError, TypeError, AttributeError) as err:  # not a mapping, or of another critic's shapes
            raise CheckpointError(f"SHAC checkpoint '{path}' holds a target critic that does not fit this task's "
                                  "critic; it is corrupt or of another task") from err
        if not all(bool(p.isfinite().all()) for p in self.target_critic.state_dict().values() if p.is_floating_point()):
            raise CheckpointError(f"SHAC checkpoint '{path}' holds non-finite values in its target critic; it cannot "
                                  "be resumed")
        self.iteration = int(loaded["iter"]) + 1


def differentiable_cfg(env_cfg, grad_checkpoint: bool = False):
    """`env_cfg` with its learned backend built differentiable (SHAC trains on it; evaluation runs `env_cfg`), with
    activation checkpointing of its model steps when `grad_checkpoint`."""
    extra = {"grad_checkpoint": True} if grad_checkpoint else {}
    return dataclasses.replace(env_cfg, dynamics_kwargs={**env_cfg.dynamics_kwargs, "differentiable": True, **extra})


def make_shac(task: str, env_cfg, agent_cfg, cfg: ShacCfg, log_dir: str | None = None,
              ) -> tuple[RslRlVecEnvWrapper, FlashNeRDRunner, ShacTrainer]:
    """The env of `task` on `env_cfg` with its learned backend made differentiable, the runner holding the agent
    config's actor and critic, and a SHAC trainer for `agent_cfg.max_iterations` iterations logging to `log_dir`.
    The first episodes' lengths are spread over the episode, as rsl_rl's `init_at_random_ep_len` (a resumed run's
    fresh env too: else every world's first episode would end at the same step)."""
    env, runner = make_runner(task, differentiable_cfg(env_cfg, cfg.grad_checkpoint), agent_cfg, None)
    trainer = ShacTrainer(env, runner, cfg, agent_cfg.max_iterations, log_dir)
    env.episode_length_buf = torch.randint_like(env.episode_length_buf, high=int(env.max_episode_length))
    return env, runner, trainer


def train_shac(task: str, env_cfg, agent_cfg, cfg: ShacCfg, log_dir: str | None, iterations: int,
               init: str | None = None) -> tuple[ShacTrainer, float]:
    """Seeded SHAC on `task` through its learned backend: `iterations` iterations (from the actor and critic of the
    policy checkpoint `init`, PPO's or SHAC's, counted from zero, when given), as `train_policy` runs PPO. Returns the
    trainer (its env closed) and the wall time of the iterations in seconds."""
    seed_everything(agent_cfg.seed)
    agent_cfg = dataclasses.replace(agent_cfg, max_iterations=iterations)  # the learning-rate schedule's length
    env, _, trainer = make_shac(task, env_cfg, agent_cfg, cfg, log_dir)
    if init is not None:
        trainer.init_from(init)
    start = time.perf_counter()
    trainer.learn(iterations, save_interval=iterations)
    wall = time.perf_counter() - start
    env.close()
    return trainer, wall
