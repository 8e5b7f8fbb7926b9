"""`flashnerd bench ppo`: one PPO run per training backend with identical settings, every final policy evaluated in
the reference simulator; JSON, the reward-against-time plot (cf. Fig. 5) and, for goal tasks, targets over time."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flashnerd.cli.common import (
    add_training_bench_args,
    check_device,
    check_file_stem,
    check_positive,
    check_writable,
    checkpoints_by_kind,
    write_json,
)
from flashnerd.dynamics import REFERENCE_BACKEND
from flashnerd.envs.evaluate import evaluate_on_backends
from flashnerd.envs.registry import task_cfgs
from flashnerd.envs.rsl_rl import train_policy
from flashnerd.viz.report import plot_ppo, plot_targets

EVAL_KEYS = ("mean_return", "lin_vel_rms", "fall_rate", "mean_episode_length_s", "targets_per_episode",
             "targets_over_time", "step_dt", "success_rate")


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("ppo", help="train one PPO policy per backend; time, reward curve, MuJoCo evaluation")
    p.add_argument("--task", required=True, help="task id")
    p.add_argument("--dynamics", default="mujoco,nerd,flashnerd", help="comma-separated training backends")
    p.add_argument("--num_envs", type=int, default=1024, help="parallel worlds per backend")
    p.add_argument("--max_iterations", type=int, default=100, help="PPO iterations per backend")
    p.add_argument("--seed", type=int, default=42, help="random seed (same for every backend)")
    p.add_argument("--eval_episodes", type=int, default=64, help="MuJoCo evaluation episodes per final policy")
    add_training_bench_args(p, "logs/bench_ppo", "bench_ppo", "the JSON and the plot")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Train per backend with identical settings; JSON keyed by backend and a reward-vs-time plot (cf. Fig. 5).

    For goal tasks each backend also carries `targets_per_episode` (its policy evaluated in MuJoCo) at the top level
    and the targets-over-time curve of that evaluation (cf. Fig. 8)."""
    for name in ("num_envs", "max_iterations", "eval_episodes"):
        check_positive(name, getattr(args, name))
    check_file_stem(args.name)
    check_writable("out_dir", args.out_dir)
    check_device(args.device)
    out_dir = Path(args.out_dir)
    checkpoints = checkpoints_by_kind(args.dynamics_checkpoint, args.dynamics.split(","))
    results = {backend: train_and_time(args, backend, out_dir, checkpoints.get(backend))
               for backend in args.dynamics.split(",")}
    summary = {"task": args.task, "num_envs": args.num_envs, "iterations": args.max_iterations,
               "device": args.device, "backends": results}
    write_json(out_dir / f"{args.name}.json", summary)
    plot_ppo(results, out_dir / f"{args.name}.png", args.task)
    if all("targets_per_episode" in r for r in results.values()):
        plot_targets(results, out_dir / f"{args.name}_targets.png", args.task)
    print(json.dumps({b: {k: (v if k != "eval_mujoco" else {n: x for n, x in v.items() if n != "targets_over_time"})
                          for k, v in r.items() if k != "curve"} for b, r in results.items()}))
    return summary


def train_and_time(args: argparse.Namespace, backend: str, out_dir: Path, checkpoint: str | None) -> dict:
    """One PPO run on `backend`: accumulated iteration time, reward curve, evaluation of the final policy in the
    reference simulator."""
    env_cfg, agent_cfg = task_cfgs(args.task, num_envs=args.num_envs, seed=args.seed, device=args.device,
                                   dynamics=backend, dynamics_checkpoint=checkpoint, robot_variant=args.robot_variant)
    agent_cfg.max_iterations = args.max_iterations
    runner, _ = train_policy(args.task, env_cfg, agent_cfg, str(out_dir / backend), agent_cfg.max_iterations)
    curve = runner.iteration_curve
    policy = runner.get_inference_policy(device=agent_cfg.device)
    evaluation = evaluate_on_backends(args.task, env_cfg, policy, args.eval_episodes,
                                      backends=[REFERENCE_BACKEND])[REFERENCE_BACKEND]
    out = {
        "seconds_per_iteration": curve[-1][0] / len(curve),
        # its halves: collecting rollouts (env steps and policy inference) and rsl_rl's PPO update
        "collect_seconds_per_iteration": runner.collect_seconds / len(curve),
        "learn_seconds_per_iteration": runner.learn_seconds / len(curve),
        "total_seconds": curve[-1][0],
        "final_train_reward": curve[-1][1],
        "eval_mujoco": {k: evaluation[k] for k in EVAL_KEYS if k in evaluation},
        "curve": curve,
    }
    if "targets_per_episode" in evaluation:
        out["targets_per_episode"] = evaluation["targets_per_episode"]
    return out
