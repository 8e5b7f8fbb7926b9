"""`flashnerd bench ppo`: one PPO run per training backend (and seed) with identical settings, every final policy
evaluated in the reference simulator; JSON, the reward-against-time plot (cf. Fig. 5) and, for goal tasks, targets
over time. With `--eval_every` the policies saved along each run are evaluated in the reference simulator too, giving
its return against accumulated training time and the time each run took to reach a fraction of a reference run's
final return. A run named `backend:shac` trains with SHAC through that learned backend instead (its own world count
and iterations, so that it can be given PPO's wall time). Results are written after every run; `--resume` skips the
runs the JSON already holds and continues a PPO run stopped midway from its last saved policy."""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from flashnerd.cli.common import (
    CLIError,
    add_training_bench_args,
    check_device,
    check_file_stem,
    check_positive,
    check_positive_number,
    check_writable,
    checkpoints_by_kind,
    write_json,
)
from flashnerd.cli.overrides import add_override_arg, apply_overrides, of_root
from flashnerd.cli.train import ALGOS
from flashnerd.dynamics import REFERENCE_BACKEND
from flashnerd.envs.evaluate import evaluate_on_backends
from flashnerd.envs.registry import task_cfgs
from flashnerd.envs.rsl_rl import curve_in, last_checkpoint, read_policy_checkpoint, train_policy
from flashnerd.envs.shac import ShacCfg, make_shac
from flashnerd.models import MODEL_KINDS
from flashnerd.utils.hints import finite_number, is_number
from flashnerd.utils.machine import describe_machine
from flashnerd.utils.seeding import seed_everything
from flashnerd.viz.report import plot_ppo, plot_targets, run_label

# what every finished run in the JSON holds (a resumed file is checked for them)
RUN_KEYS = ("backend", "seed", "seconds_per_iteration", "total_seconds", "eval_mujoco", "curve")
EVAL_KEYS = ("mean_return", "lin_vel_rms", "fall_rate", "mean_episode_length_s", "targets_per_episode",
             "targets_over_time", "step_dt", "success_rate")


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("ppo", help="train one policy per backend (PPO, or SHAC through a learned one); time, reward "
                                     "curve, MuJoCo evaluation")
    p.add_argument("--task", required=True, help="task id")
    p.add_argument("--dynamics", default="mujoco,nerd,flashnerd",
                   help="comma-separated training runs: a backend (PPO on it) or backend:shac (SHAC through a learned "
                        "backend, e.g. flashnerd:shac)")
    p.add_argument("--num_envs", type=int, default=1024, help="parallel worlds per PPO run")
    p.add_argument("--max_iterations", type=int, default=100, help="PPO iterations per run")
    p.add_argument("--max_seconds", type=float, default=None,
                   help="also end each run once it has trained this many seconds (after the iteration that reaches "
                        "them): runs of equal training time, whatever each backend's speed")
    p.add_argument("--shac_num_envs", type=int, default=64, help="parallel worlds per SHAC run")
    p.add_argument("--shac_iterations", type=int, default=None,
                   help="SHAC iterations per run (default: --max_iterations); with --eval_every its policy is "
                        "evaluated at the same fractions of its run as PPO's saved policies")
    p.add_argument("--shac_horizon", type=int, default=None, help="SHAC's differentiable rollout length in steps")
    p.add_argument("--seed", type=int, default=42, help="random seed (same for every backend)")
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds, one run per backend and seed (instead of --seed)")
    p.add_argument("--eval_episodes", type=int, default=64, help="MuJoCo evaluation episodes per final policy")
    p.add_argument("--eval_every", type=int, default=0,
                   help="also evaluate the policy saved every this many iterations in MuJoCo (0: the final only)")
    p.add_argument("--target_fraction", type=float, default=0.9,
                   help="report the training time each run took to reach this fraction of the --target_reference "
                        "runs' final MuJoCo return (needs --eval_every)")
    p.add_argument("--target_reference", default=REFERENCE_BACKEND,
                   help="the run (as named in --dynamics) whose final MuJoCo return, mean over seeds, sets the target")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs already in the JSON of --out_dir/--name (same settings) and run the rest; "
                        "a PPO run stopped midway continues from its last saved policy (SHAC runs start afresh)")
    p.add_argument("--robot", default=None,
                   help="another robot for a task that takes any (the velocity tasks): a name or a spec file "
                        "(docs/howto/bring_your_robot.md); every policy is evaluated in MuJoCo on it")
    add_training_bench_args(p, "logs/bench_ppo", "bench_ppo", "the JSON and the plot")
    add_override_arg(p, roots="env and agent for every run, shac for the SHAC runs; the MuJoCo evaluations use the "
                              "overridden env")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Train per run and seed with identical settings; JSON keyed by run (as named in --dynamics with --seed,
    "run/seed<k>" with --seeds) and a reward-vs-time plot (cf. Fig. 5).

    For goal tasks each run also carries `targets_per_episode` (its policy evaluated in MuJoCo) at the top level
    and the targets-over-time curve of that evaluation (cf. Fig. 8)."""
    for name in ("num_envs", "max_iterations", "eval_episodes", "shac_num_envs"):
        check_positive(name, getattr(args, name))
    check_positive_number("max_seconds", args.max_seconds)
    runs = parse_runs(args.dynamics)
    shac = any(algo == "shac" for _, algo in runs.values())
    for name in ("shac_iterations", "shac_horizon"):
        if getattr(args, name) is not None:
            if not shac:
                raise CLIError(f"--{name} sets SHAC runs, and --dynamics names none; add a run such as "
                               "flashnerd:shac, or drop it")
            check_positive(name, getattr(args, name))
    if args.eval_every < 0:
        raise CLIError(f"--eval_every must be zero (final policies only) or positive, got {args.eval_every}")
    if not 0.0 < args.target_fraction <= 1.0:
        raise CLIError(f"--target_fraction must be in (0, 1], got {args.target_fraction}")
    check_file_stem(args.name)
    check_writable("out_dir", args.out_dir)
    check_device(args.device)
    seeds = _parse_seeds(args.seeds) if args.seeds is not None else [args.seed]
    out_dir = Path(args.out_dir)
    if args.target_reference not in runs and args.target_reference != REFERENCE_BACKEND:
        raise CLIError(f"--target_reference '{args.target_reference}' is none of the runs in --dynamics "
                       f"({', '.join(runs)}); name one of them")
    checkpoints = checkpoints_by_kind(args.dynamics_checkpoint, list(dict.fromkeys(b for b, _ in runs.values())))
    _check_overrides(args, shac)
    settings = {"task": args.task, "num_envs": args.num_envs, "iterations": args.max_iterations,
                "max_seconds": args.max_seconds, "device": args.device, "eval_every": args.eval_every,
                "eval_episodes": args.eval_episodes,
                "robot_variant": args.robot_variant, "dynamics_checkpoint": checkpoints,
                **({"robot": args.robot} if args.robot is not None else {}),
                **({"overrides": args.overrides} if args.overrides else {})}
    if shac:
        settings["shac"] = {"num_envs": args.shac_num_envs, "iterations": args.shac_iterations or args.max_iterations,
                            "horizon": args.shac_horizon or ShacCfg.horizon}
    # run key -> (run name, seed); keyed by seed whenever --seeds is given, so that --resume can add seeds later
    grid = {(name if args.seeds is None else f"{name}/seed{seed}"): (name, seed) for seed in seeds for name in runs}
    path = out_dir / f"{args.name}.json"
    summary = _resumed(path, settings, {k: (*runs[n], s) for k, (n, s) in grid.items()}) if args.resume \
        else {**settings, "backends": {}}
    # what a PPO run's checkpoints record of the settings, so that --resume continues only a run of the same ones
    # (also before the JSON holds them: the first run stopped midway); SHAC's settings concern SHAC runs only
    tag = json.dumps({k: v for k, v in settings.items() if k != "shac"}, sort_keys=True)
    for key, (name, seed) in grid.items():
        if key not in summary["backends"]:  # else finished in an earlier invocation (--resume)
            backend, algo = runs[name]
            train = functools.partial(train_and_time, settings=tag) if algo == "ppo" else shac_and_time
            # one folder per benchmark (--name) and run; a colon is no portable folder name
            run_dir = out_dir / args.name / key.replace(":", "_")
            if not args.resume:  # a fresh run: a stopped one's policies there must not be resumed later
                for stale in run_dir.glob("model_*.pt"):
                    stale.unlink()
            summary["backends"][key] = train(args, backend, seed, run_dir, checkpoints.get(backend))
            write_json(path, summary)  # after every run: an interrupted benchmark keeps the runs it finished
    results = summary["backends"]
    if args.eval_every:
        summary["time_to_target"] = time_to_target(results, args.target_fraction, args.target_reference)
    write_json(path, summary)
    plot_ppo(results, out_dir / f"{args.name}.png", args.task)
    if all("targets_per_episode" in r for r in results.values()):
        plot_targets(results, out_dir / f"{args.name}_targets.png", args.task)
    print(json.dumps({b: {k: (v if k != "eval_mujoco" else {n: x for n, x in v.items() if n != "targets_over_time"})
                          for k, v in r.items() if k != "curve"} for b, r in results.items()}))
    return summary


def parse_runs(text: str) -> dict[str, tuple[str, str]]:
    """'mujoco,flashnerd,flashnerd:shac' -> run name -> (backend, algorithm); an unknown algorithm, SHAC on a backend
    without gradients, or a run named twice is a one-line error."""
    runs = {}
    for name in text.split(","):
        backend, _, algo = name.partition(":")
        algo = algo or "ppo"
        if algo not in ALGOS:
            raise CLIError(f"--dynamics run '{name}' names algorithm '{algo}'; use backend (PPO) or backend:shac")
        if algo == "shac" and backend not in MODEL_KINDS:
            raise CLIError(f"--dynamics run '{name}': SHAC differentiates through a learned model, and '{backend}' "
                           f"is not one; use {' / '.join(f'{k}:shac' for k in MODEL_KINDS)}")
        key = backend if algo == "ppo" else f"{backend}:{algo}"
        if key in runs:
            raise CLIError(f"--dynamics names run '{key}' twice; name each run once")
        runs[key] = (backend, algo)
    return runs


def _parse_seeds(text: str) -> list[int]:
    """'1,2,3' -> [1, 2, 3]; anything else (or a repeated seed) is a one-line error."""
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise CLIError(f"--seeds takes comma-separated integers such as 1,2, got '{text}'") from None
    if len(set(seeds)) != len(seeds):
        raise CLIError(f"--seeds lists a seed twice: '{text}'")
    return seeds


def _check_overrides(args: argparse.Namespace, shac: bool) -> None:
    """Every override applied once to the task's configs before any run (each problem a one-line error)."""
    env_cfg, agent_cfg = task_cfgs(args.task, robot=args.robot)
    if not shac and (items := of_root(args.overrides, "shac")):
        raise CLIError(f"override '{items[0]}' sets SHAC's config, and --dynamics names no SHAC run; add one such as "
                       "flashnerd:shac, or drop it")
    apply_overrides({"env": env_cfg, "agent": agent_cfg, "shac": ShacCfg()}, args.overrides, flags=vars(args))


def _resumed(path: Path, settings: dict, grid: dict[str, tuple[str, str, int]]) -> dict:
    """The summary in `path` to continue (its finished runs are kept), or a new one when there is none; a file of
    other settings, or with runs of other backends, algorithms or seeds than `grid` (run key -> backend, algorithm,
    seed) asks for, is a one-line error (its runs would not be comparable, or would join the plot and the reference
    unasked). A file without SHAC runs may gain them (its PPO runs did not depend on SHAC's settings)."""
    if not path.is_file():
        return {**settings, "backends": {}}
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as err:
        raise CLIError(f"--resume: '{path}' is no bench ppo JSON ({str(err)[:100]}); pass another --name") from None
    if not isinstance(old, dict) or not isinstance(old.get("backends"), dict):
        raise CLIError(f"--resume: '{path}' is no bench ppo JSON; pass another --name")
    has_shac = any(isinstance(r, dict) and r.get("algo") == "shac" for r in old["backends"].values())
    differ = [k for k, v in settings.items() if old.get(k) != v and (k != "shac" or has_shac)]
    if differ:
        raise CLIError(f"--resume: '{path}' was run with other {', '.join(differ)}; use the same flags or another "
                       "--name")
    needed = RUN_KEYS + (("mujoco_curve",) if settings["eval_every"] else ())
    for key, run in old["backends"].items():
        if key not in grid or not isinstance(run, dict) or \
                (run.get("backend"), run.get("algo", "ppo"), run.get("seed")) != grid[key]:
            raise CLIError(f"--resume: '{path}' holds run '{key}', which these --dynamics/--seed(s) do not make; "
                           "use the same flags or another --name")
        if missing := [k for k in needed if k not in run]:
            raise CLIError(f"--resume: run '{key}' in '{path}' lacks {', '.join(missing)}; delete that run from the "
                           "file and its folder (it is trained again) or pass another --name")
        if bad := _malformed(run):
            raise CLIError(f"--resume: run '{key}' in '{path}' holds a {bad} that is not what bench ppo writes; delete "
                           "that run from the file and its folder (it is trained again) or pass another --name")
    return {**settings, "backends": old["backends"]}


def _malformed(run: dict) -> str | None:
    """The first field of a kept run that the summary, the plot and the time-to-target reading could not use."""
    def curve(returns: Callable[[Any], bool]) -> Callable[[Any], bool]:  # [[seconds, return], ...]
        return lambda points: isinstance(points, list) and all(
            isinstance(p, list) and len(p) == 2 and finite_number(p[0]) and returns(p[1]) for p in points)

    checks = {"seconds_per_iteration": finite_number, "total_seconds": finite_number,
              "curve": curve(is_number),  # NaN where no training episode had ended yet
              "eval_mujoco": lambda e: isinstance(e, dict) and finite_number(e.get("mean_return")),
              "mujoco_curve": curve(finite_number)}
    return next((k for k, ok in checks.items() if k in run and not ok(run[k])), None)


def time_to_target(results: dict, fraction: float, reference: str = REFERENCE_BACKEND) -> dict:
    """The accumulated training seconds at which each run's policy first reached `fraction` of the `reference` runs'
    final MuJoCo return (mean over their seeds; the best final return when there is no such run), and `fraction` of
    its own final return, read off the runs' MuJoCo curves (None for a run that never did, and for the runs in
    `no_gain`, whose final return is no better than their first saved policy's); per run name the mean, lowest and
    highest final return over its seeds and the mean time to its own target (over its runs not in `no_gain`)."""
    first_at = lambda r, goal: next((t for t, ret in r["mujoco_curve"] if ret >= goal), None)  # noqa: E731
    # a run that ends no better than its first saved policy learned nothing in MuJoCo's eyes: its first policy meets
    # any fraction of its final return, which would read as the fastest run of all
    # (a run stopped before its first saved policy has only its final point: nothing to compare with)
    no_gain = [key for key, r in results.items()
               if len(r["mujoco_curve"]) > 1 and r["eval_mujoco"]["mean_return"] <= r["mujoco_curve"][0][1]]
    # the seed's Fig. 5 reading: how soon each run reaches `fraction` of its own final return
    own = {key: first_at(r, fraction * r["eval_mujoco"]["mean_return"])
           if r["eval_mujoco"]["mean_return"] > 0 and key not in no_gain else None for key, r in results.items()}
    by_backend = {}
    for label in dict.fromkeys(run_label(r) for r in results.values()):
        keys = [k for k, r in results.items() if run_label(r) == label]
        finals, times = [results[k]["eval_mujoco"]["mean_return"] for k in keys], [own[k] for k in keys]
        gained = [t for k, t in zip(keys, times) if k not in no_gain]  # the mean is over runs that learned
        by_backend[label] = {"runs": len(keys), "keys": keys, "final_mean": statistics.mean(finals),
                             "final_min": min(finals), "final_max": max(finals), "own_seconds": times,
                             "own_seconds_mean": None if None in gained or not gained else statistics.mean(gained)}
    ref = [r for r in results.values() if run_label(r) == reference]
    finals = [r["eval_mujoco"]["mean_return"] for r in ref]
    ref_return = statistics.mean(finals) if finals else max(r["eval_mujoco"]["mean_return"] for r in results.values())
    out = {"fraction": fraction, "reference_return": ref_return,
           "reference": reference if finals else "best final", "own_seconds": own, "no_gain": no_gain,
           "by_backend": by_backend}
    if ref_return <= 0:  # a fraction of a return that is no gain says nothing: no target
        return {**out, "target_return": None, "seconds": {key: None for key in results}}
    target = fraction * ref_return
    return {**out, "target_return": target, "seconds": {key: first_at(r, target) for key, r in results.items()}}


def train_and_time(args: argparse.Namespace, backend: str, seed: int, run_dir: Path, checkpoint: str | None,
                   settings: str = "") -> dict:
    """One PPO run on `backend`: accumulated iteration time, reward curve, evaluation of the final policy (and with
    --eval_every of the policies saved along the way) in the reference simulator. Its checkpoints record `settings`
    (the benchmark's, as JSON text), and --resume continues only a stopped run that recorded the same."""
    env_cfg, agent_cfg = task_cfgs(args.task, num_envs=args.num_envs, seed=seed, device=args.device,
                                   dynamics=backend, dynamics_checkpoint=checkpoint, robot_variant=args.robot_variant,
                                   robot=args.robot)
    apply_overrides({"env": env_cfg, "agent": agent_cfg}, args.overrides, later=("shac",), flags=vars(args))
    agent_cfg.max_iterations = args.max_iterations
    if args.eval_every:
        agent_cfg.save_interval = args.eval_every
    # with --resume a run stopped midway continues from its last saved policy (model_<it>.pt, every --eval_every
    # iterations, else rsl_rl's save interval), its curve and seconds from that checkpoint
    if args.resume and (found := last_checkpoint(run_dir)) is not None:
        infos = read_policy_checkpoint(str(found[0]), map_location="cpu").get("infos")
        # (a curve means plain `infos`: curve_in returns None for anything else)
        if found[1] >= args.max_iterations or curve_in(infos, found[1] + 1) is None or \
                infos.get("bench_settings") != settings:
            raise CLIError(f"--resume: '{found[0]}' is no policy this run stopped at (other settings, more iterations "
                           f"than {args.max_iterations}, or no training curve: another or an older run); give the "
                           f"flags it ran with, or delete '{run_dir}' to train the run afresh")
    runner, _ = train_policy(args.task, env_cfg, agent_cfg, str(run_dir), agent_cfg.max_iterations,
                             max_seconds=args.max_seconds, resume=args.resume,
                             checkpoint_infos={"bench_settings": settings})
    curve = runner.full_curve()
    evaluate = _reference_evaluator(args, env_cfg)
    evaluation = evaluate(runner.get_inference_policy(device=agent_cfg.device))
    out = _run_result(backend, "ppo", seed, curve, evaluation, args.device)
    if runner.tracker_state:  # the trackers where training ended, e.g. the mean terrain level the curriculum reached
        out["tracker_state"] = runner.tracker_state
    if runner.dynamics_checkpoint:  # the file it trained on, also when that was the shipped default
        out["dynamics_checkpoint"] = runner.dynamics_checkpoint
    # its halves: collecting rollouts (env steps and policy inference) and rsl_rl's PPO update
    out["collect_seconds_per_iteration"] = (runner.collect_before + runner.collect_seconds) / len(curve)
    out["learn_seconds_per_iteration"] = (runner.learn_before + runner.learn_seconds) / len(curve)
    if runner.resumed_at:  # the iterations a stopped run had saved when this one continued it
        out["resumed_at"] = runner.resumed_at
        if len(machines := runner.machines()) > 1:  # continued on another machine: its seconds mix two clocks
            out["machine"] = " and ".join(dict.fromkeys(m for _, m in machines))
            out["machines"] = [{"from_iteration": it, "machine": m} for it, m in machines]
    if args.eval_every:
        # rsl_rl saves model_<i>.pt after iteration i (0-based) when i % save_interval == 0, and the final policy
        # (evaluated above); this run wrote (or overwrote) each of them
        points = []
        for it in range(0, len(curve) - 1, args.eval_every):
            runner.load(str(run_dir / f"model_{it}.pt"), map_location=agent_cfg.device)
            points.append((curve[it][0], evaluate(runner.get_inference_policy(device=agent_cfg.device))["mean_return"]))
        out["mujoco_curve"] = points + [(curve[-1][0], evaluation["mean_return"])]  # (seconds, MuJoCo return)
    return out


def shac_and_time(args: argparse.Namespace, backend: str, seed: int, run_dir: Path, checkpoint: str | None) -> dict:
    """One SHAC run through the learned `backend` with --shac_num_envs worlds and --shac_iterations iterations: the
    same record as a PPO run's. With --eval_every its policy is evaluated in the reference simulator at the fractions
    of its run at which PPO saves policies (PPO: after iterations 1, 1 + k, 1 + 2k, ... below its last), between
    iterations; the evaluations neither count as training time nor move the random streams training draws from."""
    iterations = args.shac_iterations or args.max_iterations
    env_cfg, agent_cfg = task_cfgs(args.task, num_envs=args.shac_num_envs, seed=seed, device=args.device,
                                   dynamics=backend, dynamics_checkpoint=checkpoint, robot_variant=args.robot_variant,
                                   robot=args.robot)
    shac_cfg = ShacCfg(horizon=args.shac_horizon or ShacCfg.horizon)
    apply_overrides({"env": env_cfg, "agent": agent_cfg, "shac": shac_cfg}, args.overrides, flags=vars(args))
    agent_cfg.max_iterations = iterations
    seed_everything(agent_cfg.seed)
    env, _, trainer = make_shac(args.task, env_cfg, agent_cfg, shac_cfg, str(run_dir))
    evaluate = _reference_evaluator(args, env_cfg)
    ppo_marks = range(1, args.max_iterations, args.eval_every) if args.eval_every else []  # PPO's iterations done
    marks = sorted({max(1, round(m * iterations / args.max_iterations)) for m in ppo_marks} - {iterations})
    save_every = max(1, round(args.eval_every * iterations / args.max_iterations)) if args.eval_every else iterations
    points = []
    for mark in [*marks, iterations]:
        budget = None if args.max_seconds is None else args.max_seconds - trainer.total_time
        trainer.learn(mark - trainer.iteration, save_interval=save_every, max_seconds=budget)
        if trainer.stopped_by_time:
            break
        if mark < iterations:
            # building an env seeds torch's global generator: the next iterations must not see that
            with torch.random.fork_rng(devices=_cuda_index(args.device)):
                policy = trainer.get_inference_policy(device=agent_cfg.device)
                points.append((trainer.total_time, evaluate(policy)["mean_return"]))
    env.close()
    evaluation = evaluate(trainer.get_inference_policy(device=agent_cfg.device))
    out = _run_result(backend, "shac", seed, trainer.iteration_curve, evaluation, args.device)
    out["num_envs"] = args.shac_num_envs
    if args.eval_every:
        out["mujoco_curve"] = points + [(trainer.total_time, evaluation["mean_return"])]  # (seconds, MuJoCo return)
    return out


def _cuda_index(device: str) -> list[int]:
    """The CUDA device whose generator `torch.random.fork_rng` must keep besides the CPU's (none on the CPU)."""
    d = torch.device(device)
    return [d.index or 0] if d.type == "cuda" else []


def _reference_evaluator(args: argparse.Namespace, env_cfg):
    """policy -> its --eval_episodes evaluation in the reference simulator on `env_cfg`'s task settings."""
    return lambda policy: evaluate_on_backends(
        args.task, env_cfg, policy, args.eval_episodes, backends=[REFERENCE_BACKEND])[REFERENCE_BACKEND]


def _run_result(backend: str, algo: str, seed: int, curve: list[tuple[float, float]], evaluation: dict,
                device: str) -> dict:
    """What every run in the JSON holds: its timing (and the machine it ran on: runs added by --resume may have run on
    another), reward curve and final MuJoCo evaluation."""
    out = {
        "backend": backend,
        "algo": algo,
        "seed": seed,
        "machine": describe_machine(device),
        "iterations": len(curve),
        "seconds_per_iteration": curve[-1][0] / len(curve),
        "total_seconds": curve[-1][0],
        "final_train_reward": curve[-1][1],
        "eval_mujoco": {k: evaluation[k] for k in EVAL_KEYS if k in evaluation},
        "curve": curve,
    }
    if "targets_per_episode" in evaluation:
        out["targets_per_episode"] = evaluation["targets_per_episode"]
    return out
