"""`flashnerd play`: load a trained policy, export it (TorchScript and ONNX), and roll it out."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from flashnerd.cli.common import add_checkpoint_args, add_env_args, check_positive, refuse_unless
from flashnerd.cli.overrides import add_override_arg
from flashnerd.cli.policy import env_and_policy
from flashnerd.cli.video import add_video_args, record_play_video, video_defaults
from flashnerd.envs.rsl_rl import FlashNeRDRunner
from flashnerd.utils.atomic import atomic_path

PLAY_STEPS = 500  # control steps of a rollout (or a video) when not given


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("play", help="export a trained policy and roll it out")
    add_env_args(p)
    add_checkpoint_args(p)
    p.add_argument("--steps", type=int, default=None, help=f"control steps to roll out (default {PLAY_STEPS})")
    p.add_argument("--video", action="store_true", help="record an MP4 of world 0 (<run>/videos/play/)")
    add_video_args(p, length=PLAY_STEPS, optional=True)
    add_override_arg(p)
    p.set_defaults(func=run)


def export_policy(runner: FlashNeRDRunner, export_dir: str) -> list[str]:
    """Write exported/policy.pt (TorchScript) and exported/policy.onnx, each through a temporary file."""
    os.makedirs(export_dir, exist_ok=True)
    written = []
    for name, exporter in (("policy.pt", runner.export_policy_to_jit), ("policy.onnx", runner.export_policy_to_onnx)):
        with atomic_path(os.path.join(export_dir, name)) as tmp:
            exporter(export_dir, filename=tmp.name)
        written.append(os.path.join(export_dir, name))
    return written


def run(args: argparse.Namespace) -> dict:
    refuse_unless(args.video, args, ("video_length", "video_width", "video_height"),
                  "shape the --video recording; add --video")
    refuse_unless(not args.video, args, ("steps",), "sets the rollout without a video; with --video the rollout is "
                  "--video_length steps")
    if args.video:
        video_defaults(args, PLAY_STEPS)
    args.steps = PLAY_STEPS if args.steps is None else args.steps
    check_positive("steps", args.steps)
    env, runner, policy, path, _ = env_and_policy(args)
    exported = export_policy(runner, os.path.join(os.path.dirname(os.path.abspath(path)), "exported"))

    if args.video:
        out = Path(path).parent / "videos" / "play" / f"{Path(path).stem}.mp4"
        result = record_play_video(env, policy, out, args.video_length, args.video_width, args.video_height)
        env.close()
        result = {"checkpoint": str(path), "exported": exported, **result}
        print(json.dumps(result))
        return result

    obs = env.get_observations()
    total = torch.zeros(env.num_envs, device=env.device)
    with torch.inference_mode():
        for _ in range(args.steps):
            obs, rew, _, _ = env.step(policy(obs))
            total += rew
    env.close()
    result = {"checkpoint": str(path), "exported": exported, "steps": args.steps,
              "mean_reward_sum": total.mean().item()}
    print(json.dumps(result))
    return result
