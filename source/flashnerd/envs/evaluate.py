"""Run a policy for whole episodes in a task env and measure it (returns, tracking error, falls)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import gymnasium as gym
import torch
from tqdm import tqdm

from flashnerd.dynamics import REFERENCE_BACKEND
from flashnerd.envs.core import FlashNeRDEnv
from flashnerd.envs.rsl_rl import RslRlVecEnvWrapper


@torch.inference_mode()
def evaluate_policy(
    env: FlashNeRDEnv, policy: Callable[[dict[str, torch.Tensor]], torch.Tensor], progress: bool = True
) -> dict[str, float]:
    """One episode per world: step every world until each has ended once, then report per-episode means.

    Metrics: mean_return, per-term returns, lin_vel_rms (m/s, base-frame xy velocity against the command),
    ang_vel_rms (rad/s, yaw rate), fall_rate (episodes ended by a termination other than time-out),
    mean_episode_length_s, on a learned ensemble model_disagreement (its mean per step), for goal tasks
    targets_per_episode (goals reached) and targets_over_time (the mean count of goals reached so far at every
    control step, one float per step), and for tasks with a success tracker success_rate. `policy` maps the
    observation groups {group: (N, D)} to actions (N, na).
    """
    n = env.num_envs
    obs, _ = env.reset()
    active = torch.ones(n, dtype=torch.bool, device=env.device)  # (N,) world still in its first episode
    ret = torch.zeros(n, device=env.device)
    term_ret = {name: torch.zeros(n, device=env.device) for name in env.cfg.rewards}
    lin_sq = torch.zeros(n, device=env.device)
    ang_sq = torch.zeros(n, device=env.device)
    steps = torch.zeros(n, device=env.device)
    tracked = torch.zeros(n, device=env.device)  # steps that entered the tracking error
    fell = torch.zeros(n, dtype=torch.bool, device=env.device)
    targets = torch.zeros(n, device=env.device)  # goals reached (goal tasks)
    targets_curve = torch.zeros(env.max_episode_length, device=env.device)  # (T,) mean goals reached so far
    outcome = [t for t in env.trackers.values() if hasattr(t, "episode_success")]  # skill tasks: success per episode
    succeeded = torch.zeros(n, dtype=torch.bool, device=env.device)
    spread = torch.zeros(n, device=env.device)  # summed ensemble disagreement (learned ensembles)
    bar = tqdm(total=env.max_episode_length, desc="eval", disable=None if progress else True, leave=False)
    for t in range(env.max_episode_length):
        cmd = env.command_manager.command.clone() if env.command_manager is not None else None
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        a = active.float()
        ret += reward * a
        for name, value in env.reward_terms.items():
            term_ret[name] += value * a
        done = terminated | truncated
        # Tracking error of the step just taken; a world reset this step shows its new state, so skip it.
        if cmd is not None:
            live = a * (~done).float()
            lin_sq += torch.sum(torch.square(cmd[:, :2] - env.root_lin_vel_b[:, :2]), dim=1) * live
            ang_sq += torch.square(cmd[:, 2] - env.root_ang_vel_b[:, 2]) * live
            tracked += live
        steps += a
        if env.state.disagreement is not None:
            spread += env.state.disagreement * a
        if env.goal is not None:
            targets += env.goal.reached_now.float() * a
            targets_curve[t] = targets.mean()
        fell |= active & terminated
        for tracker in outcome:
            succeeded |= active & done & tracker.episode_success
        active &= ~done
        bar.update(1)
        if not active.any():
            break
    bar.close()
    tracked_total = torch.clamp(tracked.sum(), min=1.0)
    return {
        "episodes": n,
        "mean_return": ret.mean().item(),
        "fall_rate": fell.float().mean().item(),
        "mean_episode_length_s": (steps.mean() * env.step_dt).item(),
        "lin_vel_rms": torch.sqrt(lin_sq.sum() / tracked_total).item(),
        "ang_vel_rms": torch.sqrt(ang_sq.sum() / tracked_total).item(),
        "returns": {name: v.mean().item() for name, v in term_ret.items()},
        **({"targets_per_episode": targets.mean().item(),
            "targets_over_time": targets_curve[:t + 1].tolist(),
            "step_dt": env.step_dt} if env.goal is not None else {}),
        **({"success_rate": succeeded.float().mean().item()} if outcome else {}),
        **({"model_disagreement": (spread.sum() / steps.sum().clamp(min=1.0)).item()}
           if env.state.disagreement is not None else {}),
    }


def evaluate_on_backends(task: str, env_cfg, policy, episodes: int, backends: list[str] | None = None) -> dict:
    """Evaluate `policy` (an rsl_rl inference policy, on TensorDict observations) for `episodes` episodes on each of
    `backends` (default: the training backend and the reference simulator), same task config otherwise."""
    results = {}
    for backend in dict.fromkeys(backends or [env_cfg.dynamics, REFERENCE_BACKEND]):
        kwargs = env_cfg.dynamics_kwargs if backend == env_cfg.dynamics else {}
        # the task's own rewards and terminations: the uncertainty terms shape training on a model, not the score
        cfg = dataclasses.replace(env_cfg, dynamics=backend, num_envs=episodes, dynamics_kwargs=kwargs,
                                  uncertainty_penalty=0.0, uncertainty_threshold=0.0)
        env = RslRlVecEnvWrapper(gym.make(task, cfg=cfg))
        results[backend] = evaluate_policy(env.unwrapped, lambda obs, env=env: policy(env.to_tensordict(obs)))
        env.close()
    return results
