"""`flashnerd bench env`: env-steps per second of a task on a backend, as JSON (speed claims are measured here)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import torch

from flashnerd.cli.common import (
    CLIError,
    add_env_args,
    check_device,
    check_file_stem,
    check_positive,
    checkpoints_by_kind,
    load_task_cfgs,
    make_env,
    play_variant,
    write_json,
)
from flashnerd.cli.plan import add_bench_parser as add_plan_bench_parser
from flashnerd.viz.report import plot_ppo, plot_targets


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks that print JSON")
    bsub = p.add_subparsers(dest="bench", required=True)
    e = bsub.add_parser("env", help="env-steps per second of a task and backend")
    add_env_args(e, num_envs=1024)
    e.add_argument("--steps", type=int, default=50, help="timed control steps")
    e.add_argument("--warmup", type=int, default=5, help="untimed control steps first")
    e.set_defaults(func=run_env)
    m = bsub.add_parser("model", help="model-only streaming throughput, FlashNeRD vs NeRD")
    m.add_argument("--robot", default="anymal_c", help="robot whose input/output sizes the models take")
    m.add_argument("--batch", default="16,1024,16384", help="comma-separated batch sizes")
    m.add_argument("--models", default="flashnerd,nerd", help="comma-separated model kinds")
    m.add_argument("--size", default="cpu", help="size class of both models: cpu, paper_small, paper")
    m.add_argument("--device", default="cpu", help="torch device")
    m.add_argument("--min_seconds", type=float, default=1.0, help="timed seconds per measurement (at least)")
    m.set_defaults(func=run_model)
    add_ppo_parser(bsub)
    add_suite_parser(bsub)
    add_coupled_parser(bsub)
    add_finetune_parser(bsub)
    add_plan_bench_parser(bsub)


def _env_steps_per_second(task: str, env_cfg, steps: int, warmup: int) -> float:
    env = make_env(task, env_cfg).unwrapped
    gen = torch.Generator(device=env.device).manual_seed(0)
    actions = torch.randn(steps + warmup, env.num_envs, env.num_actions, device=env.device, generator=gen)  # (T,N,na)
    for t in range(warmup):
        env.step(actions[t])
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)
    start = time.perf_counter()
    for t in range(warmup, warmup + steps):
        env.step(actions[t])
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)
    elapsed = time.perf_counter() - start
    env.close()
    return env.num_envs * steps / elapsed


def run_env(args: argparse.Namespace) -> dict:
    check_positive("steps", args.steps)
    env_cfg, _ = load_task_cfgs(args)
    result = {"task": args.task, "dynamics": env_cfg.dynamics, "num_envs": env_cfg.num_envs,
              "device": env_cfg.device, "steps": args.steps}
    result["env_steps_per_s"] = round(_env_steps_per_second(args.task, env_cfg, args.steps, args.warmup), 1)
    if env_cfg.dynamics == "mujoco":
        # Same run, one rollout thread: the quotient shows how well the backend uses the cores.
        one = dataclasses.replace(env_cfg, dynamics_kwargs={**env_cfg.dynamics_kwargs, "nthread": 1})
        result["env_steps_per_s_1thread"] = round(_env_steps_per_second(args.task, one, args.steps, args.warmup), 1)
        result["thread_ratio"] = round(result["env_steps_per_s"] / result["env_steps_per_s_1thread"], 3)
        result["threads"] = env_cfg.dynamics_kwargs.get("nthread") or os.cpu_count()
    print(json.dumps(result))
    return result


def run_model(args: argparse.Namespace) -> dict:
    from flashnerd.contacts import contact_features
    from flashnerd.dynamics.representation import StateRepresentation
    from flashnerd.robots import get_robot
    from flashnerd.sim.scene import build_scene
    from flashnerd.training.benchmark import model_steps_per_second

    check_device(args.device)
    robot = get_robot(args.robot)
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError as err:
        raise CLIError(f"--batch must be comma-separated integers, got '{args.batch}'") from err
    for b in batches:
        check_positive("batch", b)
    kinds = args.models.split(",")
    scene = build_scene(robot)
    rep = StateRepresentation.for_robot(robot, scene, contact_features(robot, scene).dim)
    results: dict[str, dict[str, float]] = {}
    for kind in kinds:
        results[kind] = {str(b): round(model_steps_per_second(kind, rep.input_dim, rep.target_dim, b, args.size,
                                                              args.device, args.min_seconds), 1) for b in batches}
    out = {"robot": robot.name, "device": args.device, "size": args.size, "threads": torch.get_num_threads(),
           "steps_per_s": results}
    if "flashnerd" in results and "nerd" in results:
        out["ratio"] = {b: round(results["flashnerd"][b] / results["nerd"][b], 2) for b in results["nerd"]}
    print(json.dumps(out))
    return out


def add_ppo_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("ppo", help="train one PPO policy per backend; time, reward curve, MuJoCo evaluation")
    p.add_argument("--task", required=True, help="task id")
    p.add_argument("--dynamics", default="mujoco,nerd,flashnerd", help="comma-separated training backends")
    p.add_argument("--num_envs", type=int, default=1024, help="parallel worlds per backend")
    p.add_argument("--max_iterations", type=int, default=100, help="PPO iterations per backend")
    p.add_argument("--seed", type=int, default=42, help="random seed (same for every backend)")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--eval_episodes", type=int, default=64, help="MuJoCo evaluation episodes per final policy")
    p.add_argument("--out_dir", default="logs/bench_ppo", help="folder for runs, JSON and the plot")
    p.add_argument("--name", default="bench_ppo", help="file stem of the JSON and the plot in --out_dir")
    p.add_argument("--dynamics_checkpoint", default="",
                   help="learned checkpoints as kind=path[,kind=path] (default: the shipped ones)")
    p.set_defaults(func=run_ppo)


def run_ppo(args: argparse.Namespace) -> dict:
    """Train per backend with identical settings; JSON keyed by backend and a reward-vs-time plot (cf. Fig. 5).

    For goal tasks each backend also carries `targets_per_episode` (its policy evaluated in MuJoCo) at the top level
    and the targets-over-time curve of that evaluation (cf. Fig. 8)."""
    from pathlib import Path

    for name in ("num_envs", "max_iterations", "eval_episodes"):
        check_positive(name, getattr(args, name))
    check_file_stem(args.name)
    out_dir = Path(args.out_dir)
    checkpoints = checkpoints_by_kind(args.dynamics_checkpoint)
    results = {backend: _train_and_time(args, backend, out_dir, checkpoints.get(backend))
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


def _train_and_time(args: argparse.Namespace, backend: str, out_dir, checkpoint: str | None) -> dict:
    """One PPO run on `backend`: accumulated iteration time, reward curve, MuJoCo evaluation of the final policy."""
    from flashnerd.cli.train import evaluate_on_backends, seed_everything
    from flashnerd.envs.rsl_rl import FlashNeRDRunner, RslRlVecEnvWrapper

    ns = argparse.Namespace(task=args.task, num_envs=args.num_envs, seed=args.seed, device=args.device,
                            dynamics=backend, dynamics_checkpoint=checkpoint)
    env_cfg, agent_cfg = load_task_cfgs(ns)
    agent_cfg.max_iterations = args.max_iterations
    seed_everything(agent_cfg.seed)
    env = RslRlVecEnvWrapper(make_env(args.task, env_cfg), clip_actions=agent_cfg.clip_actions)
    runner = FlashNeRDRunner(env, agent_cfg.to_rsl_rl_dict(), str(out_dir / backend), device=agent_cfg.device)
    runner.learn(num_learning_iterations=agent_cfg.max_iterations, init_at_random_ep_len=True)
    env.close()
    curve = runner.iteration_curve
    policy = runner.get_inference_policy(device=agent_cfg.device)
    evaluation = evaluate_on_backends(args.task, env_cfg, policy, args.eval_episodes, backends=["mujoco"])["mujoco"]
    out = {
        "seconds_per_iteration": curve[-1][0] / len(curve),
        "total_seconds": curve[-1][0],
        "final_train_reward": curve[-1][1],
        "eval_mujoco": {k: evaluation[k] for k in ("mean_return", "lin_vel_rms", "fall_rate", "mean_episode_length_s",
                                                   "targets_per_episode", "targets_over_time", "step_dt",
                                                   "success_rate")
                        if k in evaluation},
        "curve": curve,
    }
    if "targets_per_episode" in evaluation:
        out["targets_per_episode"] = evaluation["targets_per_episode"]
    return out


def add_suite_parser(bsub: argparse._SubParsersAction) -> None:
    from flashnerd.training.suite import SuiteConfig

    d = SuiteConfig()
    p = bsub.add_parser("suite", help="model-only accuracy and throughput of several models on several robots "
                                      "(Table I / Fig. 4): JSON, Markdown table, radar plot")
    p.add_argument("--robots", default=",".join(d.robots), help="comma-separated robot names")
    p.add_argument("--models", default=",".join(d.models), help="comma-separated model kinds")
    p.add_argument("--fit_seconds", type=float, default=d.fit_seconds, help="wall-time budget of each fit")
    p.add_argument("--fit_steps", type=int, default=d.fit_steps, help="optimizer-step cap of each fit")
    p.add_argument("--refit", action="store_true", help="fit even where a checkpoint exists in --checkpoint_dir")
    p.add_argument("--checkpoint_dir", default=d.checkpoint_dir,
                   help="checkpoints <dir>/<robot>/<model>.pt are reused; fitted ones are exported there")
    p.add_argument("--data_dir", default=d.data_dir, help="datasets and fitting checkpoints (reused if present)")
    p.add_argument("--record_worlds", type=int, default=d.record_worlds, help="worlds recorded for the training set")
    p.add_argument("--record_steps", type=int, default=d.record_steps, help="control steps per recorded world")
    p.add_argument("--traj_len", type=int, default=d.traj_len, help="steps per training trajectory")
    p.add_argument("--eval_rollouts", type=int, default=d.eval_rollouts, help="held-out rollouts per robot")
    p.add_argument("--horizons", default=",".join(map(str, d.horizons)), help="comma-separated NRMSE horizons")
    p.add_argument("--batches", default=",".join(map(str, d.batches)), help="comma-separated throughput batches")
    p.add_argument("--max_batch", type=int, default=None,
                   help="largest batch tried, halved while it does not fit (default 512000 on cuda, 65536 on cpu)")
    p.add_argument("--size", default=d.size, help="size class of every model: cpu, paper_small, paper")
    p.add_argument("--device", default=d.device, help="torch device")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed of recording and fitting")
    p.add_argument("--out_dir", default="docs/results", help="folder for <name>.json, <name>.md and <name>.png")
    p.add_argument("--name", default="model_suite", help="file stem of the outputs")
    p.set_defaults(func=run_suite)


def _int_list(flag: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError as err:
        raise CLIError(f"--{flag} must be comma-separated integers, got '{text}'") from err
    for v in values:
        check_positive(flag, v)
    return values


def run_suite(args: argparse.Namespace) -> dict:
    """Record, fit (or reuse), evaluate and time every model on every robot; write JSON, table and radar plot."""
    import shlex
    import sys

    from flashnerd.training.suite import SuiteConfig, write_outputs
    from flashnerd.training.suite import run_suite as suite

    check_device(args.device)
    for name in ("fit_steps", "record_worlds", "record_steps", "traj_len", "eval_rollouts"):
        check_positive(name, getattr(args, name))
    check_file_stem(args.name)
    if args.fit_seconds < 0:
        raise CLIError(f"--fit_seconds must be >= 0, got {args.fit_seconds}")
    max_batch = args.max_batch or (512_000 if args.device.startswith("cuda") else 65_536)
    check_positive("max_batch", max_batch)
    cfg = SuiteConfig(
        robots=tuple(args.robots.split(",")), models=tuple(args.models.split(",")), data_dir=args.data_dir,
        checkpoint_dir=args.checkpoint_dir, refit=args.refit, fit_seconds=args.fit_seconds, fit_steps=args.fit_steps,
        record_worlds=args.record_worlds, record_steps=args.record_steps, traj_len=args.traj_len,
        eval_rollouts=args.eval_rollouts, horizons=_int_list("horizons", args.horizons),
        batches=_int_list("batches", args.batches), max_batch=max_batch, size=args.size, device=args.device,
        seed=args.seed, command="flashnerd " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    )
    try:
        results = suite(cfg)
    except ValueError as err:
        raise CLIError(str(err)) from err
    results["outputs"] = write_outputs(results, args.out_dir, args.name)
    print(json.dumps(results))
    return results


def add_coupled_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("coupled", help="control steps per second of the coupled/oneway backends vs plain MuJoCo "
                                        "on the same hand-and-cube scene")
    p.add_argument("--robot", default="allegro", help="fixed-base robot whose scene gets a cube")
    p.add_argument("--num_worlds", type=int, default=256, help="parallel worlds")
    p.add_argument("--steps", type=int, default=20, help="timed control steps")
    p.add_argument("--free_motion", default="flashnerd",
                   help="robot model: a learned kind (flashnerd, nerd, rwm; shipped checkpoint) or 'oracle'")
    p.add_argument("--nthread", type=int, default=None, help="threads of every backend (default: all cores)")
    p.set_defaults(func=run_coupled)


def run_coupled(args: argparse.Namespace) -> dict:
    """Env-steps per second of `coupled`, `oneway` and MuJoCo's threaded rollout on one scene (JSON)."""
    import mujoco
    import numpy as np
    from mujoco import rollout

    from flashnerd.robots import get_robot
    from flashnerd.sim.coupled_backend import CoupledDynamics, OracleFreeMotion

    check_positive("num_worlds", args.num_worlds)
    check_positive("steps", args.steps)
    robot = get_robot(args.robot)
    n, dec = args.num_worlds, robot.decimation
    ctrl = torch.tensor(robot.default_joint_pos).repeat(n, 1)  # (N, nu)
    out = {"robot": robot.name, "num_worlds": n, "steps": args.steps, "free_motion": args.free_motion,
           "threads": args.nthread or os.cpu_count()}
    for mode in ("coupled", "oneway"):
        motion = OracleFreeMotion(robot, n) if args.free_motion == "oracle" else args.free_motion
        dyn = CoupledDynamics(robot, n, mode=mode, free_motion=motion, nthread=args.nthread)
        dyn.step(ctrl)  # warm-up
        start = time.perf_counter()
        for _ in range(args.steps):
            dyn.step(ctrl)
        out[f"{mode}_env_steps_per_s"] = round(n * args.steps / (time.perf_counter() - start), 1)
        dyn.close()
    # Plain MuJoCo on the same scene (actuators on), all worlds in one threaded rollout per control step.
    model = CoupledDynamics._build_model(robot, "euler")
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.zeros((n, mujoco.mj_stateSize(model, spec)))
    data = mujoco.MjData(model)
    data.qpos[:] = dyn.qpos0  # the coupled runs' start: robot at its default pose, cube at its spawn
    mujoco.mj_getState(model, data, state[0], spec)
    state[:] = state[0]
    controls = np.repeat(ctrl.numpy()[:, None, :], dec, axis=1).astype(np.float64)  # (N, dec, nu)
    nthread = args.nthread or os.cpu_count() or 1
    with rollout.Rollout(nthread=nthread) as roll:
        datas = [mujoco.MjData(model) for _ in range(nthread)]
        start = None
        for step in range(args.steps + 1):
            if step == 1:
                start = time.perf_counter()  # the first call (thread-pool start) is the warm-up
            states, _ = roll.rollout([model] * n, datas, state, controls, nstep=dec)
            state[:] = states[:, -1]
    out["mujoco_env_steps_per_s"] = round(n * args.steps / (time.perf_counter() - start), 1)
    out["coupled_vs_mujoco"] = round(out["coupled_env_steps_per_s"] / out["mujoco_env_steps_per_s"], 3)
    print(json.dumps(out))
    return out


def add_finetune_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("finetune", help="pretrain on mujoco, fine-tune on each backend (seeds), evaluate in MuJoCo; "
                                         "wall time per 100 iterations and success rate (JSON + bar chart)")
    p.add_argument("--task", required=True, help="task id")
    p.add_argument("--dynamics", default="mujoco,flashnerd", help="comma-separated fine-tuning backends")
    p.add_argument("--pretrain_iterations", type=int, default=300, help="PPO iterations on mujoco first")
    p.add_argument("--pretrained", default=None, help="a policy checkpoint to start from instead of pretraining")
    p.add_argument("--iterations", type=int, default=100, help="fine-tuning iterations per backend and seed")
    p.add_argument("--seeds", type=int, default=2, help="fine-tuning seeds per backend")
    p.add_argument("--num_envs", type=int, default=None, help="parallel worlds (default: the task's)")
    p.add_argument("--eval_episodes", type=int, default=64, help="MuJoCo evaluation episodes per fine-tuned policy")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--out_dir", default="logs/bench_finetune", help="folder for runs, JSON and the bar chart")
    p.add_argument("--name", default="finetune", help="file stem of the JSON and the chart")
    p.add_argument("--dynamics_checkpoint", default="",
                   help="learned checkpoints as kind=path[,kind=path] (default: the shipped ones)")
    p.set_defaults(func=run_finetune)


def run_finetune(args: argparse.Namespace) -> dict:
    """Fig. 6: fine-tuning wall time per backend (mean over seeds) and the MuJoCo success rate of every policy."""
    from pathlib import Path

    from flashnerd.cli.train import evaluate_on_backends, seed_everything
    from flashnerd.envs.rsl_rl import FlashNeRDRunner, RslRlVecEnvWrapper
    from flashnerd.viz.report import plot_finetune

    for name in ("pretrain_iterations", "iterations", "seeds", "eval_episodes"):
        check_positive(name, getattr(args, name))
    check_file_stem(args.name)
    checkpoints = checkpoints_by_kind(args.dynamics_checkpoint)
    if args.pretrained is not None and not Path(args.pretrained).is_file():
        raise CLIError(f"--pretrained '{args.pretrained}' does not exist; give a policy checkpoint (model_<it>.pt)")
    out_dir = Path(args.out_dir)

    def runner_for(backend: str, seed: int, folder: Path, iterations: int):
        ns = argparse.Namespace(task=args.task, num_envs=args.num_envs, seed=seed, device=args.device,
                                dynamics=backend, dynamics_checkpoint=checkpoints.get(backend))
        env_cfg, agent_cfg = load_task_cfgs(ns)
        agent_cfg.max_iterations, agent_cfg.save_interval = iterations, iterations
        seed_everything(agent_cfg.seed)
        env = RslRlVecEnvWrapper(make_env(args.task, env_cfg), clip_actions=agent_cfg.clip_actions)
        return env, env_cfg, agent_cfg, FlashNeRDRunner(env, agent_cfg.to_rsl_rl_dict(), str(folder),
                                                        device=agent_cfg.device)

    pretrained = args.pretrained
    if pretrained is None:  # pretrain once on the analytical simulator
        env, _, agent_cfg, runner = runner_for("mujoco", 0, out_dir / "pretrain", args.pretrain_iterations)
        runner.learn(num_learning_iterations=args.pretrain_iterations, init_at_random_ep_len=True)
        env.close()
        pretrained = str(out_dir / "pretrain" / f"model_{runner.current_learning_iteration}.pt")
        runner.save(pretrained)

    def evaluate(policy, env_cfg) -> dict:  # in MuJoCo, on the task's Play variant where it has one
        task, cfg = play_variant(args.task, env_cfg)
        return evaluate_on_backends(task, cfg, policy, args.eval_episodes, backends=["mujoco"])["mujoco"]

    env, env_cfg, agent_cfg, runner = runner_for("mujoco", 0, out_dir / "pretrained_eval", 1)
    runner.load(pretrained, map_location=agent_cfg.device)
    env.close()
    start_eval = evaluate(runner.get_inference_policy(device=agent_cfg.device), env_cfg)
    eval_task = play_variant(args.task, env_cfg)[0]
    results = {}
    for backend in args.dynamics.split(","):
        runs = []
        for seed in range(1, args.seeds + 1):
            env, env_cfg, agent_cfg, runner = runner_for(backend, seed, out_dir / f"{backend}_seed{seed}",
                                                         args.iterations)
            runner.load(pretrained, map_location=agent_cfg.device)
            runner.current_learning_iteration = 0
            start = time.perf_counter()
            runner.learn(num_learning_iterations=args.iterations, init_at_random_ep_len=True)
            wall = time.perf_counter() - start
            env.close()
            ev = evaluate(runner.get_inference_policy(device=agent_cfg.device), env_cfg)
            runs.append({"seed": seed, "wall_s": wall, "seconds_per_100_iterations": 100 * wall / args.iterations,
                         "mean_return": ev["mean_return"], "success_rate": ev.get("success_rate", 0.0)})
        results[backend] = {key: sum(r[key] for r in runs) / len(runs)
                            for key in ("seconds_per_100_iterations", "success_rate", "mean_return")}
        results[backend]["runs"] = runs
    summary = {"task": args.task, "eval_task": eval_task, "iterations": args.iterations, "seeds": args.seeds,
               "num_envs": env_cfg.num_envs, "pretrained": pretrained, "device": args.device,
               "pretrained_eval": {"success_rate": start_eval.get("success_rate", 0.0),
                                   "mean_return": start_eval["mean_return"]},
               "backends": results}
    write_json(out_dir / f"{args.name}.json", summary)
    plot_finetune(results, out_dir / f"{args.name}.png", args.task)
    print(json.dumps({b: {k: v for k, v in r.items() if k != "runs"} for b, r in results.items()}))
    return summary
