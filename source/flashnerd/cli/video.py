"""`flashnerd compare-video`: the analytical and a learned backend from the same start under the same actions, side
by side, so the model's drift is visible; and the `--video` option of `flashnerd play`."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from flashnerd.cli.common import (
    CLIError,
    add_checkpoint_args,
    add_env_args,
    check_positive,
    check_writable,
    make_env,
    uninterrupted_cfg,
)
from flashnerd.cli.overrides import add_override_arg
from flashnerd.cli.policy import env_and_policy
from flashnerd.dynamics import REFERENCE_BACKEND, backend_info
from flashnerd.envs.rsl_rl import RslRlVecEnvWrapper
from flashnerd.viz import RobotRenderer, VideoWriter, label_frame, side_by_side

VIDEO_SIZE = (640, 480)  # default frame width and height in pixels


def add_video_args(p: argparse.ArgumentParser, length: int, optional: bool = False) -> None:
    """--video_length --video_width --video_height (Isaac Lab names the first two the same way). With `optional`
    the defaults are None (so a command can refuse them without --video) and `video_defaults` fills them in."""
    width, height = VIDEO_SIZE
    p.add_argument("--video_length", type=int, default=None if optional else length,
                   help=f"control steps in the video (default {length})")
    p.add_argument("--video_width", type=int, default=None if optional else width,
                   help=f"frame width in pixels (default {width})")
    p.add_argument("--video_height", type=int, default=None if optional else height,
                   help=f"frame height in pixels (default {height})")


def video_defaults(args: argparse.Namespace, length: int) -> None:
    """Fill the optional video flags left at None with their defaults, then check each is positive."""
    for name, value in zip(("video_length", "video_width", "video_height"), (length, *VIDEO_SIZE)):
        if getattr(args, name) is None:
            setattr(args, name, value)
        check_positive(name, getattr(args, name))


def env_renderer(env: RslRlVecEnvWrapper, width: int, height: int) -> RobotRenderer:
    """A renderer of `env`'s scene: its robot on its task's terrain, with its objects."""
    task = env.unwrapped
    return RobotRenderer(task.robot, width, height, terrain=task.cfg.terrain, objects=task.cfg.objects)


def world_zero(env: RslRlVecEnvWrapper) -> tuple[np.ndarray, np.ndarray | None]:
    """World 0's robot qpos (nq,) and its first object's pose (7,) (None without objects), float64 on the host."""
    task = env.unwrapped
    qpos = task.state.qpos[0].cpu().numpy().astype(np.float64)
    pose = task.dyn.object_state()[0, :7].cpu().numpy().astype(np.float64) if task.cfg.objects else None
    return qpos, pose


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare-video", help="render mujoco and a learned backend side by side under one policy")
    add_env_args(p, num_envs=1)
    add_checkpoint_args(p)
    add_video_args(p, length=250)
    p.add_argument("--out", default=None, help="MP4 path (default: <run>/videos/compare_<dynamics>.mp4)")
    add_override_arg(p)
    p.set_defaults(func=run_compare, dynamics="flashnerd")


def run_compare(args: argparse.Namespace) -> dict:
    """Roll the policy in the analytical env; feed the same actions to the learned env; render both."""
    for name in ("video_length", "video_width", "video_height"):
        check_positive(name, getattr(args, name))
    if args.out:
        check_writable("out", args.out)
    learned = args.dynamics
    args.dynamics = REFERENCE_BACKEND  # env_and_policy builds the analytical side
    checkpoint = args.dynamics_checkpoint
    args.dynamics_checkpoint = None
    env, _, policy, path, env_cfg = env_and_policy(args)
    env.close()
    # one world, no resets inside the video, so both sides stay one trajectory
    cfg = dataclasses.replace(uninterrupted_cfg(env_cfg, args.video_length), num_envs=1, terminations={})
    kwargs = {"checkpoint": checkpoint} if checkpoint else {}
    sim = RslRlVecEnvWrapper(make_env(args.task, cfg))
    model = RslRlVecEnvWrapper(make_env(args.task, dataclasses.replace(cfg, dynamics=learned, dynamics_kwargs=kwargs)))
    s, first = sim.unwrapped.state, torch.zeros(1, dtype=torch.long)
    model.unwrapped.dyn.reset(first, s.qpos.clone(), s.qvel.clone())  # one start state
    if env_cfg.objects:  # the object starts where the analytical side's does
        obj = sim.unwrapped.dyn.object_state()
        model.unwrapped.dyn.reset_objects(first, obj[:, :7].clone(), obj[:, 7:].clone())

    out = Path(args.out) if args.out else Path(path).parent / "videos" / f"compare_{learned}.mp4"
    renderer = env_renderer(sim, args.video_width, args.video_height)
    labels = (backend_info(REFERENCE_BACKEND).label, backend_info(learned).label)
    dt = sim.unwrapped.step_dt
    drift = []
    with VideoWriter(out, fps=round(1 / dt)) as video, torch.inference_mode():
        obs = sim.get_observations()
        for t in tqdm(range(args.video_length), desc="compare-video", unit="frame"):
            actions = policy(obs)  # (1, na) from the analytical side's observation, applied to both
            obs, _, _, _ = sim.step(actions)
            model.step(actions)
            (q_sim, o_sim), (q_model, o_model) = world_zero(sim), world_zero(model)
            drift.append(float(np.linalg.norm(q_sim[:3] - q_model[:3])))
            stamp = f"t = {(t + 1) * dt:5.2f} s"
            video.append(side_by_side(label_frame(renderer.render(q_sim, o_sim), f"{labels[0]}  {stamp}"),
                                      label_frame(renderer.render(q_model, o_model), f"{labels[1]}  {stamp}")))
    renderer.close()
    sim.close()
    model.close()
    result = {"video": str(out), "frames": args.video_length, "dynamics": learned, "checkpoint": str(path),
              "base_drift_m": {"1s": drift[min(49, len(drift) - 1)], "end": drift[-1]}}
    print(json.dumps(result))
    return result


def record_play_video(env, policy, out: Path, length: int, width: int, height: int) -> dict:
    """Roll `policy` for `length` steps in `env` (an RslRlVecEnvWrapper) and render world 0 to `out`."""
    renderer = env_renderer(env, width, height)
    dt = env.unwrapped.step_dt
    total = torch.zeros(env.num_envs, device=env.device)
    with VideoWriter(out, fps=round(1 / dt)) as video, torch.inference_mode():
        obs = env.get_observations()
        for t in tqdm(range(length), desc="play --video", unit="frame"):
            obs, rew, _, _ = env.step(policy(obs))
            total += rew
            video.append(label_frame(renderer.render(*world_zero(env)), f"t = {(t + 1) * dt:5.2f} s"))
    renderer.close()
    return {"video": str(out), "frames": length, "mean_reward_sum": total.mean().item()}


__all__ = ["CLIError", "add_parser", "add_video_args", "env_renderer", "record_play_video", "run_compare",
           "world_zero"]
