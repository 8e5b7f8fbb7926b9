"""The model-only benchmark suite (`flashnerd bench suite`): accuracy and throughput of several models on several
robots in one run, in the shape of the seed's Table I and Fig. 4.

Per robot: record (or reuse) an exploration dataset and a held-out set of `max(horizons)`-step trajectories; per
model, reuse the checkpoint in `checkpoint_dir/<robot>/<model>.safetensors` or fit one for a fixed wall-time budget
(then ship it there, slim, with its measured accuracy and a card); measure recursive-rollout NRMSE at each horizon and
model-only streaming throughput at each batch size, including the largest batch that fits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flashnerd.contacts import contact_features
from flashnerd.data.dataset import load_dataset
from flashnerd.data.record import record
from flashnerd.dynamics import make_dynamics
from flashnerd.dynamics.learned import CHECKPOINT_DIR
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.models import MODEL_KINDS, num_params
from flashnerd.models.checkpoint import SUFFIX, export_for_inference, model_from_checkpoint, read_checkpoint
from flashnerd.robots import RobotSpec, get_robot
from flashnerd.sim.scene import build_scene
from flashnerd.training.benchmark import model_steps_per_second
from flashnerd.training.evaluate import rollout_errors
from flashnerd.training.fit import FitConfig, Fitter
from flashnerd.utils.atomic import write_text_atomic
from flashnerd.utils.machine import describe_machine


@dataclass
class SuiteConfig:
    """Settings of one suite run (the CLI flags of `flashnerd bench suite`)."""

    robots: tuple[str, ...] = ("cartpole", "franka", "g1")
    models: tuple[str, ...] = MODEL_KINDS
    data_dir: str = "data/suite"  # datasets and full fitting checkpoints (not shipped)
    checkpoint_dir: str = str(CHECKPOINT_DIR)  # reused if present; fitted models are exported here
    refit: bool = False  # fit even when a checkpoint exists
    fit_seconds: float = 600.0  # wall-time budget of each fit (equal for every model of a robot)
    fit_steps: int = 100_000  # optimizer-step cap of each fit
    record_worlds: int = 256
    record_steps: int = 1000
    traj_len: int = 100
    eval_rollouts: int = 64
    horizons: tuple[int, ...] = (1, 15, 100, 200)
    batches: tuple[int, ...] = (16, 16_384)
    max_batch: int = 65_536  # the largest batch tried (halved while it does not fit in memory)
    size: str = "cpu"
    device: str = "cpu"
    seed: int = 0
    throughput_seconds: float = 1.0  # timed seconds per throughput measurement (at least)
    command: str = ""  # the command line, stored in the JSON and the cards
    fit_overrides: dict = field(default_factory=dict)  # extra FitConfig fields (tests use tiny settings)


def run_suite(cfg: SuiteConfig, progress: bool = True) -> dict:
    """Run the suite; returns the JSON-ready results (robots -> models -> nrmse / steps_per_s / fit facts)."""
    unknown = [m for m in cfg.models if m not in MODEL_KINDS]
    if unknown:
        raise ValueError(f"unknown model '{unknown[0]}'; choose from {', '.join(MODEL_KINDS)}")
    robots = [get_robot(name) for name in cfg.robots]  # unknown robots fail before any work
    out = {"command": cfg.command, "device": cfg.device, "threads": torch.get_num_threads(),
           "machine": describe_machine(cfg.device), "size": cfg.size, "horizons": list(cfg.horizons),
           "batches": [*cfg.batches, "max"], "robots": {}}
    for robot in robots:
        out["robots"][robot.name] = _run_robot(robot, cfg, progress)
    return out


def _run_robot(robot: RobotSpec, cfg: SuiteConfig, progress: bool) -> dict:
    folder = Path(cfg.data_dir) / robot.name
    train_path, eval_path = folder / "train.h5", folder / "eval.h5"
    horizon = max(cfg.horizons)
    if not eval_path.is_file():  # held out: another seed, trajectories as long as the longest horizon
        record(robot, cfg.eval_rollouts, horizon, eval_path, traj_len=horizon, seed=cfg.seed + 1, progress=progress)
    eval_data = load_dataset(eval_path, robot)
    n = min(cfg.eval_rollouts, eval_data.num_trajectories)
    eval_data = type(eval_data)(eval_data.qpos[:n], eval_data.qvel[:n], eval_data.ctrl[:n], eval_data.attrs)
    scene = build_scene(robot)
    rep = StateRepresentation.for_robot(robot, scene, contact_features(robot, scene).dim)
    result = {"input_dim": rep.input_dim, "output_dim": rep.target_dim, "eval_rollouts": n, "models": {}}
    for kind in cfg.models:
        ckpt_path = Path(cfg.checkpoint_dir) / robot.name / f"{kind}{SUFFIX}"
        fitted = cfg.refit or not ckpt_path.is_file()
        if fitted:
            if not train_path.is_file():  # recorded only when something is fitted
                record(robot, cfg.record_worlds, cfg.record_steps, train_path, traj_len=cfg.traj_len, seed=cfg.seed,
                       progress=progress)
            fit_path = folder / f"{kind}_fit{SUFFIX}"
            fit_cfg = dataclasses.replace(FitConfig(), model=kind, size=cfg.size, max_steps=cfg.fit_steps,
                                          time_budget_s=cfg.fit_seconds, seed=cfg.seed, **cfg.fit_overrides)
            Fitter(train_path, fit_cfg, device=cfg.device).fit(fit_path, log_dir=folder / "tb" / kind,
                                                               progress=progress)
        else:
            fit_path = ckpt_path
        try:
            ckpt = read_checkpoint(fit_path, robot)  # its training facts go into the results
        except ValueError as err:
            raise ValueError(f"{err} (or rerun the suite with --refit)") from err
        dyn = make_dynamics(kind, robot, n, device=cfg.device, checkpoint=fit_path)
        errors = rollout_errors(dyn, eval_data, cfg.horizons)
        nrmse = {str(h): e["nrmse"] for h, e in errors.items()}
        if fitted:
            export_for_inference(fit_path, ckpt_path, {"nrmse": nrmse, "eval": str(eval_path), "rollouts": n},
                                 extra={"suite_command": cfg.command})
        result["models"][kind] = {
            "checkpoint": str(ckpt_path), "fitted_now": fitted, "params": num_params(dyn.network),
            "train_seconds": round(float(ckpt.get("train_seconds", 0.0)), 1), "steps": int(ckpt.get("step", 0)),
            "transitions": int(ckpt.get("data", {}).get("transitions", 0)),
            "val_loss": ckpt["history"][-1]["val_loss"] if ckpt.get("history") else None,
            "nrmse": nrmse, **_throughput(kind, rep, cfg),
        }
        if fitted:
            write_card(robot, result, Path(cfg.checkpoint_dir) / robot.name / "README.md", cfg, train_path, eval_path)
    return result


def _throughput(kind: str, rep: StateRepresentation, cfg: SuiteConfig) -> dict:
    """Streaming steps x worlds per second at each batch, then at the largest batch that fits (halving from
    `max_batch` while an allocation fails)."""
    def measure(batch: int) -> float:
        return round(model_steps_per_second(kind, rep.input_dim, rep.target_dim, batch, cfg.size, cfg.device,
                                            cfg.throughput_seconds), 1)

    speeds = {str(b): measure(b) for b in cfg.batches}
    batch = cfg.max_batch
    while True:
        try:
            speeds["max"] = measure(batch)
            break
        except (RuntimeError, MemoryError) as err:  # torch reports a failed allocation as a RuntimeError
            if "memory" not in str(err).lower() or batch <= max(cfg.batches):
                raise
            batch //= 2
            if cfg.device.startswith("cuda"):
                torch.cuda.empty_cache()
    return {"steps_per_s": speeds, "max_batch": batch}


def write_card(robot: RobotSpec, result: dict, path: Path, cfg: SuiteConfig, train_path: Path,
               eval_path: Path) -> None:
    """The card of a robot's suite checkpoints (every `<model>.safetensors` next to it, whichever run fitted it):
    command, data, training time, measured accuracy; written through a temporary file."""
    rows = []
    for kind in MODEL_KINDS:
        ckpt_path = path.parent / f"{kind}{SUFFIX}"
        if not ckpt_path.is_file():
            continue
        ckpt = read_checkpoint(ckpt_path, robot)
        nrmse = ckpt.get("metrics", {}).get("nrmse", {})
        params = num_params(model_from_checkpoint(ckpt)[0])
        rows.append((kind, params, ckpt.get("data", {}).get("transitions", 0), ckpt.get("train_seconds", 0.0),
                     ckpt.get("step", 0), nrmse, ckpt.get("suite_command", "")))
    horizons = list(rows[0][5]) if rows else []
    lines = [f"# {robot.name}: learned dynamics checkpoints of the model suite", "",
             "Produced by the project's own command on the machine below, from the same data and with the same "
             "wall-time budget for every model (the command that fitted each is in its row's footnote):", "",
             f"- data: `{train_path}` (exploration controls, `--record_worlds {cfg.record_worlds} --record_steps "
             f"{cfg.record_steps} --traj_len {cfg.traj_len}`, seed {cfg.seed}); held-out set `{eval_path}` "
             f"({result['eval_rollouts']} trajectories of {max(cfg.horizons)} steps, seed {cfg.seed + 1})",
             f"- machine: {describe_machine(cfg.device)}, {torch.get_num_threads()} threads",
             f"- model size class `{cfg.size}`",
             "", "| model | parameters | transitions | training (s) | optimizer steps | "
             + " | ".join(f"NRMSE H={h}" for h in horizons) + " |", "|---" * (5 + len(horizons)) + "|"]
    for kind, params, transitions, seconds, steps, nrmse, _ in rows:
        lines.append(f"| `{kind}` | {params:,} | {transitions:,} | {seconds:.0f} | {steps:,} | "
                     + " | ".join(f"{nrmse.get(h, float('nan')):.4g}" for h in horizons) + " |")
    lines += ["", "Fitted by:", ""] + [f"- `{kind}`: `{command or 'flashnerd bench suite'}`"
                                        for kind, *_, command in rows]
    lines += ["", "NRMSE is defined in `docs/learned_dynamics.md`; throughput is in `docs/results.md`. "
              f"Robot-model hash: `{robot.model_hash()}`.", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "\n".join(lines))
