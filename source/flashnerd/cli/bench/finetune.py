"""`flashnerd bench finetune`: pretrain on the reference simulator, fine-tune on each backend over seeds, evaluate
every policy there; wall time per 100 iterations, return, fall rate and (on tasks that define one) success rate (JSON
and the bar chart of Fig. 6)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flashnerd.cli.common import (
    CLIError,
    add_training_bench_args,
    check_device,
    check_file_stem,
    check_positive,
    check_writable,
    checkpoints_by_kind,
    model_to_start_from,
    write_json,
)
from flashnerd.dynamics import REFERENCE_BACKEND, backend_info, check_backend
from flashnerd.envs.evaluate import evaluate_on_backends
from flashnerd.envs.registry import play_variant, task_cfgs
from flashnerd.envs.rsl_rl import make_runner, read_policy_checkpoint, train_policy
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.sim.scene import variant_robot
from flashnerd.utils.machine import describe_machine
from flashnerd.utils.seeding import seed_everything
from flashnerd.viz.report import plot_finetune


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("finetune", help="pretrain on mujoco, fine-tune on each backend (seeds), evaluate in MuJoCo; "
                                         "wall time per 100 iterations, return, falls, success (JSON + bar chart)")
    p.add_argument("--task", required=True, help="task id")
    p.add_argument("--dynamics", default="mujoco,flashnerd", help="comma-separated fine-tuning backends")
    p.add_argument("--pretrain_iterations", type=int, default=300, help="PPO iterations on mujoco first")
    p.add_argument("--pretrained", default=None, help="a policy checkpoint to start from instead of pretraining")
    p.add_argument("--iterations", type=int, default=100, help="fine-tuning iterations per backend and seed")
    p.add_argument("--seeds", type=int, default=2, help="fine-tuning seeds per backend")
    p.add_argument("--num_envs", type=int, default=None, help="parallel worlds (default: the task's)")
    p.add_argument("--eval_episodes", type=int, default=64, help="MuJoCo evaluation episodes per fine-tuned policy")
    p.add_argument("--robot", default=None,
                   help="another robot for a task that takes any (the velocity tasks): a name or a spec file "
                        "(path/to/robot.yaml); its learned backends need --dynamics_checkpoint unless one is shipped")
    add_training_bench_args(p, "logs/bench_finetune", "finetune", "the JSON and the bar chart")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Fig. 6: fine-tuning wall time per backend (mean over seeds) and every policy's MuJoCo return, fall rate and
    (where the task has one) success rate."""
    for name in ("pretrain_iterations", "iterations", "seeds", "eval_episodes"):
        check_positive(name, getattr(args, name))
    check_file_stem(args.name)
    check_writable("out_dir", args.out_dir)
    check_device(args.device)
    checkpoints = checkpoints_by_kind(args.dynamics_checkpoint, args.dynamics.split(","))
    if args.pretrained is not None:
        if not Path(args.pretrained).is_file():
            raise CLIError(f"--pretrained '{args.pretrained}' does not exist; give a policy checkpoint (model_<it>.pt)")
        read_policy_checkpoint(args.pretrained)  # a hostile or foreign file fails before anything is trained
    out_dir = Path(args.out_dir)

    def cfgs_for(backend: str, seed: int, iterations: int):
        env_cfg, agent_cfg = task_cfgs(args.task, num_envs=args.num_envs, seed=seed, device=args.device,
                                       dynamics=backend, dynamics_checkpoint=checkpoints.get(backend),
                                       robot_variant=args.robot_variant, robot=args.robot)
        agent_cfg.max_iterations, agent_cfg.save_interval = iterations, iterations
        return env_cfg, agent_cfg

    # every learned backend's model loads on the task's robot before any PPO (a robot from a spec file has none shipped)
    env_cfg, _ = cfgs_for(REFERENCE_BACKEND, 0, 1)
    robot = variant_robot(env_cfg.robot, None)
    for backend in args.dynamics.split(","):
        check_backend(backend, what="--dynamics")
        if (kind := backend_info(backend).model_kind) is not None:
            read_checkpoint(model_to_start_from(checkpoints.get(backend), robot, kind, env_cfg.terrain), robot)

    pretrained = args.pretrained
    if pretrained is None:  # pretrain once on the analytical simulator
        env_cfg, agent_cfg = cfgs_for(REFERENCE_BACKEND, 0, args.pretrain_iterations)
        runner, _ = train_policy(args.task, env_cfg, agent_cfg, str(out_dir / "pretrain"), args.pretrain_iterations)
        pretrained = str(out_dir / "pretrain" / f"model_{runner.current_learning_iteration}.pt")
        runner.save(pretrained)

    def evaluate(policy, env_cfg) -> dict:  # in MuJoCo, on the task's Play variant where it has one
        task, cfg = play_variant(args.task, env_cfg)
        return evaluate_on_backends(task, cfg, policy, args.eval_episodes,
                                    backends=[REFERENCE_BACKEND])[REFERENCE_BACKEND]

    env_cfg, agent_cfg = cfgs_for(REFERENCE_BACKEND, 0, 1)
    seed_everything(agent_cfg.seed)
    env, runner = make_runner(args.task, env_cfg, agent_cfg, str(out_dir / "pretrained_eval"))
    runner.load(pretrained, map_location=agent_cfg.device)
    env.close()
    start_eval = evaluate(runner.get_inference_policy(device=agent_cfg.device), env_cfg)
    eval_task = play_variant(args.task, env_cfg)[0]
    results = {}
    for backend in args.dynamics.split(","):
        runs = []
        for seed in range(1, args.seeds + 1):
            env_cfg, agent_cfg = cfgs_for(backend, seed, args.iterations)
            runner, wall = train_policy(args.task, env_cfg, agent_cfg, str(out_dir / f"{backend}_seed{seed}"),
                                        args.iterations, init=pretrained)
            ev = evaluate(runner.get_inference_policy(device=agent_cfg.device), env_cfg)
            runs.append({"seed": seed, "wall_s": wall, "seconds_per_100_iterations": 100 * wall / args.iterations,
                         "mean_return": ev["mean_return"], "success_rate": ev.get("success_rate"),
                         "fall_rate": ev["fall_rate"]})
        results[backend] = {key: mean_or_none([r[key] for r in runs])
                            for key in ("seconds_per_100_iterations", "success_rate", "mean_return", "fall_rate")}
        results[backend]["runs"] = runs
    summary = {"task": args.task, **({"robot": args.robot} if args.robot is not None else {}),
               "eval_task": eval_task, "iterations": args.iterations, "seeds": args.seeds,
               "num_envs": env_cfg.num_envs, "pretrained": pretrained, "device": args.device,
               "machine": describe_machine(args.device),
               "pretrained_eval": {"success_rate": start_eval.get("success_rate"),
                                   "mean_return": start_eval["mean_return"], "fall_rate": start_eval["fall_rate"]},
               "backends": results}
    write_json(out_dir / f"{args.name}.json", summary)
    plot_finetune(results, out_dir / f"{args.name}.png", args.task)
    print(json.dumps({b: {k: v for k, v in r.items() if k != "runs"} for b, r in results.items()}))
    return summary


def mean_or_none(values: list) -> float | None:
    """The mean of a figure over runs; None where the task has no such figure (success rate of a task without one)."""
    return None if any(v is None for v in values) else sum(values) / len(values)
