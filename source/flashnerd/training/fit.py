"""Fit a learned dynamics model on recorded trajectories.

Loss = teacher-forced MSE on normalized increments over windows + `ar_weight` x a multi-step autoregressive loss
(RWM's dual autoregression): after `ar_history` true frames the model's own predicted states are fed back (with small
input noise, real controls) for `ar_steps` forecast steps, and their state features are compared with the recorded
ones. AdamW with warm-up and cosine decay, gradient clipping, validation split by trajectory, TensorBoard scalars,
and resumable checkpoints that carry the model config, normalizers and the robot-model hash.

Adaptation (a model fitted in simulation refitted on a robot's own data): `init` starts from its weights and
normalizers, `mix_data` trains on simulation data beside the robot's (a share `mix` of every batch), validation uses
held-out robot data only, `patience` stops when it no longer improves (the checkpoint keeps the best step), and
`adaptation_report` puts the held-out NRMSE before and after into the checkpoint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from flashnerd.contacts import contact_features
from flashnerd.data.dataset import TrajectoryData, check_robot, load_datasets
from flashnerd.dynamics import make_dynamics
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.models import (
    MAX_MEMBERS,
    MODEL_KINDS,
    build_model,
    check_ensemble_shared,
    model_sizes,
    num_params,
    takes_contact_rows,
)
from flashnerd.models.checkpoint import (
    CheckpointError,
    actuators_from_checkpoint,
    config_dict,
    contact_head_from_checkpoint,
    load_optimizer_state,
    read_checkpoint,
    save_checkpoint,
)
from flashnerd.models.normalizer import Normalizer
from flashnerd.robots import robot_of_record
from flashnerd.sim.scene import build_scene
from flashnerd.training.actuators import identify_actuators
from flashnerd.training.contact_head import contact_head_entry, fit_contact_head
from flashnerd.training.evaluate import rollout_errors
from flashnerd.training.features import trajectory_tensors
from flashnerd.utils.distributed import DistInfo, all_reduce_max_each
from flashnerd.utils.hints import finite_number
from flashnerd.utils.interrupt import ContinueCounter, DeferredInterrupt


@dataclass
class FitConfig:
    """Settings of `flashnerd fit`."""

    model: str = "flashnerd"
    size: str = "cpu"
    window: int = 16  # teacher-forced window (NeRD: capped at its history length)
    ar_history: int = 8  # true frames before the forecast
    ar_steps: int = 4  # forecast steps fed with the model's own predictions
    ar_weight: float = 1.0
    ar_noise: float = 0.02  # std of noise on fed-back frames, normalized units
    ar_batch_size: int = 32
    batch_size: int = 128
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    max_steps: int = 2000
    time_budget_s: float = 0.0  # stop after this much training wall time (0 = no limit)
    val_fraction: float = 0.1
    eval_every: int = 100
    seed: int = 0
    contacts: str = "probes"  # "probes": fixed ground probes (NeRD); "rows": variable contact rows (FlashNeRD only)
    max_rows: int = 16  # contact rows per frame in "rows" mode
    init: str = ""  # start from this checkpoint's weights and normalizers (fresh optimizer and schedule)
    mix_data: tuple[str, ...] = ()  # datasets (e.g. simulation) trained on beside the data, never validated on
    mix: float = 0.1  # share of every batch drawn from mix_data
    patience: int = 0  # stop after this many validations without a lower loss; `out` keeps the best (0: off)
    ensemble: int = 1  # members trained together (own initialization and batches), stored and stepped as one model
    ensemble_shared: int = 0  # FlashNeRD blocks (with the frame embedding) the members share, computed once per step
    # steps of the contact head fitted after the model on the data's contact labels, outside time_budget_s (0: none;
    # data without labels or a robot without contact bodies get none)
    contact_head_steps: int = 1000


# what a resumed fit may set otherwise than the stopped one: how long it runs and the contact head fitted after it
RESUME_MAY_CHANGE = frozenset({"max_steps", "time_budget_s", "contact_head_steps"})
PATH_FIELDS = frozenset({"data", "init", "mix_data"})  # compared as resolved paths: `./d.h5` is `d.h5`


def _same_fit_setting(key: str, ours, theirs) -> bool:
    """Whether a setting of a resumed fit is the stopped fit's (lists and tuples alike, paths resolved)."""
    def spell(value) -> list[str]:
        return [str(Path(p).resolve()) if p else "" for p in ([value] if isinstance(value, str) else value)]

    if key in PATH_FIELDS:
        try:
            return spell(ours) == spell(theirs)
        except (TypeError, OSError, ValueError):  # an edited checkpoint's value that is no path
            return False
    if isinstance(ours, (list, tuple)) and isinstance(theirs, (list, tuple)):
        return list(ours) == list(theirs)
    return type(ours) is type(theirs) and ours == theirs or (
        isinstance(ours, float) and isinstance(theirs, int) and not isinstance(theirs, bool) and ours == theirs)


def check_fit_config(cfg: FitConfig) -> None:
    """One-line error for a setting no fit can run with, before any data is read."""
    if cfg.model not in MODEL_KINDS:
        raise ValueError(f"unknown model '{cfg.model}'; choose one of: {', '.join(MODEL_KINDS)}")
    if cfg.size not in model_sizes(cfg.model):
        raise ValueError(f"--size '{cfg.size}' is not a size of {cfg.model}; choose one of: "
                         f"{', '.join(model_sizes(cfg.model))}")
    positive = {"lr": cfg.lr, "grad_clip": cfg.grad_clip}
    at_least_zero = {"time_budget": cfg.time_budget_s, "ar_weight": cfg.ar_weight, "ar_noise": cfg.ar_noise,
                     "weight_decay": cfg.weight_decay, "min_lr": cfg.min_lr}
    for name, value in positive.items():
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"--{name} must be a finite number > 0, got {value}")
    for name, value in at_least_zero.items():
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"--{name} must be a finite number >= 0, got {value}")
    if not 0 < cfg.val_fraction < 1:
        raise ValueError(f"val_fraction must lie in (0, 1), got {cfg.val_fraction}")
    if not (math.isfinite(cfg.mix) and 0 <= cfg.mix < 1):
        raise ValueError(f"--mix must lie in [0, 1), the share of each batch from --mix_data; got {cfg.mix}")
    if not 1 <= cfg.ensemble <= MAX_MEMBERS:
        raise ValueError(f"--ensemble must be 1 (one model) to {MAX_MEMBERS} members, got {cfg.ensemble}")
    check_ensemble_shared(cfg.model, cfg.size, cfg.ensemble, cfg.ensemble_shared)
    if cfg.contact_head_steps < 0:
        raise ValueError(f"--contact_head_steps must be >= 0 (0: no contact head), got {cfg.contact_head_steps}")
    if cfg.patience < 0:
        raise ValueError(f"--patience must be >= 0 (0: no early stopping), got {cfg.patience}")
    for name in ("window", "ar_history", "ar_steps", "ar_batch_size", "batch_size", "max_steps", "eval_every",
                 "max_rows"):
        value = getattr(cfg, name)  # a config read back from a checkpoint may hold anything
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name} must be a positive integer, got {str(value)[:40]}")


class FitDiverged(ValueError):
    """A fit whose loss or weights turned non-finite (a one-line reason; the last good checkpoint is kept)."""


class Fitter:
    """Holds the data tensors, model, normalizers and optimizer of one fitting run."""

    def __init__(self, data_path: str | Path | Sequence[str | Path], cfg: FitConfig, device: str = "cpu",
                 dist: DistInfo | None = None) -> None:
        check_fit_config(cfg)
        dist = dist or DistInfo()
        self.cfg, self.device, self.dist = cfg, torch.device(device), dist
        for name in ("batch_size", "ar_batch_size"):
            if getattr(cfg, name) % dist.world_size:
                raise ValueError(f"{name} {getattr(cfg, name)} does not split evenly over {dist.world_size} "
                                 "processes; make it a multiple of the process count")
        # Every rank draws the same global batch from the same generator and keeps its slice of it, so the averaged
        # gradient is the single-process gradient of the global batch.
        # An ensemble draws every member its own batch: rows [k*b, (k+1)*b) of each draw belong to member k.
        self.members = cfg.ensemble
        self._tf_rows = _rank_rows(cfg.batch_size, self.members, dist, device)
        self._ar_rows = _rank_rows(cfg.ar_batch_size, self.members, dist, device)
        paths = [data_path] if isinstance(data_path, (str, Path)) else list(data_path)
        data = load_datasets(paths)
        data_path = ", ".join(str(p) for p in paths)
        self.robot = robot_of_record(str(data.attrs["robot"]), str(data.attrs.get("robot_spec", "") or ""))
        check_robot(data.attrs, self.robot, data_path)
        if cfg.ar_weight > 0 and data.traj_len < cfg.ar_history + cfg.ar_steps:
            raise ValueError(f"dataset '{data_path}' has {data.traj_len}-step trajectories; the autoregressive loss "
                             f"needs {cfg.ar_history + cfg.ar_steps} (record a longer --traj_len, or --ar_weight 0)")
        if data.num_trajectories < 2:
            raise ValueError(f"dataset '{data_path}' holds {data.num_trajectories} trajectory; fitting needs at least "
                             "2 (one for validation)")
        self.data_path, self.transitions = str(data_path), data.num_trajectories * data.traj_len
        self.dropped_on_read = data.attrs["dropped_on_read"]  # trajectories the reader refused, by reason
        self.variants = data.attrs["variants"]  # the robot variant of each dataset ("" for the nominal robot)
        if cfg.contacts == "rows" and not takes_contact_rows(cfg.model):
            rows_kinds = [k for k in MODEL_KINDS if takes_contact_rows(k)]
            raise ValueError(f"variable contact rows need the {' or '.join(rows_kinds)} model, not '{cfg.model}'; "
                             "use --contacts probes")
        self.terrain = str(data.attrs.get("terrain", "flat"))  # contacts are detected against the recorded scene
        self.scene = scene = build_scene(self.robot, self.terrain)
        contacts = dict(mode=cfg.contacts, max_rows=cfg.max_rows)
        self.probes = contact_features(self.robot, scene, self.device, **contacts)
        self.rep = StateRepresentation.for_robot(self.robot, scene, self.probes.dim)
        train, val = data.split(cfg.val_fraction, seed=cfg.seed)
        self.own_train = train  # --data's training split alone: the robot whose actuators are identified
        # Trajectories are drawn uniformly, or, with mix_data, a share `mix` of every batch from the mixed-in data
        self.train_weights = None
        self.data_transitions = self.transitions  # of the data validated on
        if cfg.mix_data:
            train, self.train_weights = self._mixed(train, data, cfg)
            self.transitions = train.num_trajectories * train.traj_len + val.num_trajectories * val.traj_len
        self.train_cpu, self.val_cpu = train, val
        self.train, self.val = train.to(self.device), val.to(self.device)
        cpu_probes = contact_features(self.robot, scene, **contacts)  # features are built once, on the CPU
        self.cpu_probes = cpu_probes
        self.contact_head: dict | None = None  # the checkpoint's contact_head entry (from --init/--resume, or fitted)
        self.actuators: dict | None = None  # the checkpoint's identified actuators (from --init/--resume, or fitted)
        x_tr, y_tr = trajectory_tensors(train, self.rep, cpu_probes)
        x_va, y_va = trajectory_tensors(val, self.rep, cpu_probes)
        # packed contact rows are pre-scaled and must not get per-slot statistics (that would break the encoder's
        # permutation invariance): their columns keep mean 0, std 1
        packed = self.probes.dim if cfg.contacts == "rows" else 0
        self.x_norm = Normalizer(self.rep.input_dim).fit(x_tr, identity_tail=packed).to(self.device)
        self.y_norm = Normalizer(self.rep.target_dim).fit(y_tr).to(self.device)
        self.xn_tr = self.x_norm.normalize(x_tr.to(self.device))  # (M, T, I)
        self.yn_tr = self.y_norm.normalize(y_tr.to(self.device))  # (M, T, O)
        self.xn_va = self.x_norm.normalize(x_va.to(self.device))
        self.yn_va = self.y_norm.normalize(y_va.to(self.device))
        # Scale of each state feature for the autoregressive loss (the inputs carry periodic joints as sin/cos).
        feats = self.rep.state_features(train.qpos, train.qvel).reshape(-1, self.rep.state_dim)  # (M*(T+1), S)
        self.feature_std = Normalizer(self.rep.state_dim).fit(feats).std.to(self.device)  # (S,)

        torch.manual_seed(cfg.seed)  # initial weights follow the seed (and agree on every rank)
        rows = dict(contact_rows=cfg.max_rows, contact_row_dim=self.probes.row_dim) if packed else {}
        self.model = build_model(cfg.model, self.rep.input_dim, self.rep.target_dim, size=cfg.size,
                                 ensemble=cfg.ensemble, ensemble_shared=cfg.ensemble_shared, **rows).to(self.device)
        self.window = min(cfg.window, self.model.context or cfg.window, data.traj_len)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.step, self.train_seconds = 0, 0.0
        self._continues, self._last_step_seconds = ContinueCounter(), None  # the budget's clock stops with the process
        self.gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        val_gen = torch.Generator(device=self.device).manual_seed(cfg.seed + 1)
        self.val_idx = self._sample_windows(self.xn_va.shape[0], self.xn_va.shape[1], self.window, 512, val_gen)
        self.history: list[dict] = []
        self.objective = _Objective(self)
        self._step_fn = self.objective
        if dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self._step_fn = DistributedDataParallel(self.objective, device_ids=ids)

    def _mixed(self, train: TrajectoryData, data: TrajectoryData, cfg: FitConfig):
        """`train` with the trajectories of cfg.mix_data appended, and the sampling weight of each (M,)."""
        where = ", ".join(cfg.mix_data)
        mix = load_datasets(list(cfg.mix_data), self.robot)
        if mix.traj_len != data.traj_len:
            raise ValueError(f"--mix_data '{where}' has {mix.traj_len}-step trajectories, --data {data.traj_len}; "
                             "import or record them with the same --traj_len")
        if str(mix.attrs.get("terrain", "flat")) != str(data.attrs.get("terrain", "flat")):
            raise ValueError(f"--mix_data '{where}' was recorded on terrain '{mix.attrs.get('terrain', 'flat')}', "
                             f"--data on '{data.attrs.get('terrain', 'flat')}'; mix data of one terrain")
        self.mix_variants = mix.attrs["variants"]
        m_own, m_mix = train.num_trajectories, mix.num_trajectories
        weights = torch.cat([torch.full((m_own,), (1 - cfg.mix) / m_own, dtype=torch.float64),
                             torch.full((m_mix,), cfg.mix / m_mix, dtype=torch.float64)])  # (M,)
        cat = lambda k: torch.cat([getattr(train, k), getattr(mix, k)])  # noqa: E731
        labelled = lambda k: None if getattr(train, k) is None or getattr(mix, k) is None else cat(k)  # noqa: E731
        return (TrajectoryData(cat("qpos"), cat("qvel"), cat("ctrl"), train.attrs, labelled("touching"),
                               labelled("contact_force")), weights.to(self.device))

    def _sample_windows(self, m: int, t: int, w: int, b: int, gen: torch.Generator,
                        weights: torch.Tensor | None = None):
        """b random windows of w frames from m trajectories of t frames (drawn by `weights` when given): indices
        (b, 1) and (b, w)."""
        if weights is None:
            traj = torch.randint(0, m, (b,), device=self.device, generator=gen)  # (b,)
        else:  # (M,) sampling weight of each trajectory
            traj = torch.multinomial(weights, b, replacement=True, generator=gen)  # (b,)
        t0 = torch.randint(0, t - w + 1, (b,), device=self.device, generator=gen)  # (b,)
        return traj[:, None], t0[:, None] + torch.arange(w, device=self.device)  # (b, 1), (b, w)

    def lr_at(self, step: int) -> float:
        """Linear warm-up, then cosine decay from lr to min_lr over max_steps (or over the time budget, when one is
        set and runs out first, so that a budgeted run still ends at min_lr)."""
        c = self.cfg
        if step < c.warmup_steps:
            return c.lr * (step + 1) / c.warmup_steps
        frac = min(1.0, (step - c.warmup_steps) / max(1, c.max_steps - c.warmup_steps))
        if c.time_budget_s:
            frac = max(frac, min(1.0, self.train_seconds / c.time_budget_s))
        return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1 + math.cos(math.pi * frac))

    def teacher_forced_loss(self, xn: torch.Tensor, yn: torch.Tensor, idx) -> torch.Tensor:
        """The model's own loss (`DynamicsModel.loss`) on the windows `idx` of normalized data."""
        traj, tt = idx
        return self.model.loss(xn[traj, tt], yn[traj, tt])  # windows (b, w, I) against (b, w, O)

    def autoregressive_loss(self, data: TrajectoryData, xn: torch.Tensor) -> torch.Tensor:
        """Dual autoregression: true history, then the model's own predicted states for `ar_steps` steps."""
        c, rep = self.cfg, self.rep
        hist, steps = c.ar_history, c.ar_steps
        draw = c.ar_batch_size * self.members
        traj, tt = self._sample_windows(xn.shape[0], xn.shape[1], hist + steps, draw, self.gen, self.train_weights)
        traj, tt = traj[self._ar_rows], tt[self._ar_rows]  # this rank's share of the global batch
        seq = xn[traj, tt[:, :hist]]  # (b, H, I) true normalized frames
        last_t = tt[:, hist - 1]  # (b,)
        qpos, qvel = data.qpos[traj[:, 0], last_t], data.qvel[traj[:, 0], last_t]  # (b, nq), (b, nv) true state
        loss = 0.0
        for k in range(steps):
            window = seq[:, -(self.model.context or seq.shape[1]):]  # (b, <=H+k, I) what the model can read
            delta = self.y_norm.denormalize(self.model.forecast(window, self.gen))  # (b, O)
            qpos, qvel = rep.apply(qpos, qvel, delta)
            t_next = last_t + k + 1
            true_feat = rep.state_features(data.qpos[traj[:, 0], t_next], data.qvel[traj[:, 0], t_next])
            pred_feat = rep.state_features(qpos, qvel)  # (b, state_dim)
            scale = self.feature_std
            loss = loss + F.mse_loss(pred_feat / scale, true_feat / scale)
            if k + 1 < steps:
                frame = rep.inputs(qpos, qvel, data.ctrl[traj[:, 0], t_next], self.probes(qpos, qvel))  # (b, I)
                frame = self.x_norm.normalize(frame)
                noise = torch.randn(draw, frame.shape[1], device=self.device, generator=self.gen)
                frame = frame + c.ar_noise * noise[self._ar_rows]  # (b, I) this rank's rows of the global draw
                seq = torch.cat([seq, frame[:, None]], dim=1)  # (b, H+k+1, I)
        return loss / steps

    @torch.no_grad()
    def validate(self) -> float:
        """Teacher-forced loss on the fixed validation windows (an ensemble: its members' mean, all on the same
        windows)."""
        self.model.eval()
        traj, tt = (i.repeat(self.members, 1) for i in self.val_idx)  # (K*512, 1), (K*512, w)
        loss = self.teacher_forced_loss(self.xn_va, self.yn_va, (traj, tt)).item() / self.members
        self.model.train()
        return loss

    def fit(self, out: str | Path, log_dir: str | Path | None = None, progress: bool = True) -> dict:
        """Train until max_steps (or the time budget), checkpointing to `out` every eval_every steps."""
        c, main = self.cfg, self.dist.is_main
        writer = SummaryWriter(str(log_dir)) if log_dir and main else None
        if self.step == 0:
            self.history.append({"step": 0, "val_loss": self.validate()})
            if c.patience:  # `out` holds the best model so far, which may be the starting one
                self.save(out)
        bar = tqdm(total=c.max_steps, initial=self.step, desc=f"fit {c.model}",
                   disable=None if progress and main else True)
        self.model.train()
        try:
            # Ctrl-C stops at a step boundary (single process; torchrun ranks keep raising where it lands)
            with DeferredInterrupt(enabled=not self.dist.enabled) as interrupt, self._continues:
                while (self.step < c.max_steps and not (c.time_budget_s and self.train_seconds >= c.time_budget_s)
                       and not (c.patience and self._stale() >= c.patience) and not interrupt.requested):
                    self._train_step(writer)
                    bar.update(1)
                    if self.step % c.eval_every == 0 or self.step == c.max_steps:
                        bar.set_postfix(val=f"{self._validate_and_save(out, writer):.4f}")
            if interrupt.requested:
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            # Ctrl-C: keep every finished step; `flashnerd fit ... --resume` continues from here. Under patience
            # `out` holds the best step, which a resume continues from: the steps after it are not worth its loss
            bar.close()
            if not c.patience:
                self.save(out)
            raise
        bar.close()
        if self.history[-1]["step"] != self.step:  # stopped by the time budget between validations
            self._validate_and_save(out, writer)
        elif not c.patience:
            self.save(out)  # also when resumed with no step left to take
        if writer:
            writer.close()
        head = actuators = None
        if main:
            ckpt = read_checkpoint(out, self.robot)  # the step `out` keeps: under --patience the best, not the last
            head = self._fit_contact_head(ckpt) if c.contact_head_steps else "none (--contact_head_steps 0)"
            actuators = self._identify_actuators()
            # one write of what was fitted after the steps; a fit without --resume may write over `out` from here on
            # (a stopped one it refuses to)
            save_checkpoint(out, {**ckpt, **({"contact_head": self.contact_head} if self.contact_head else {}),
                                  **({"actuators": self.actuators} if self.actuators else {}), "fit_complete": True})
        windows = (c.batch_size + (c.ar_batch_size if c.ar_weight > 0 else 0)) * self.step * self.members
        return {"out": str(out), "model": c.model, "ensemble": self.members, "params": num_params(self.model),
                "steps": self.step,
                "train_seconds": round(self.train_seconds, 1), "transitions": self.transitions,
                "dropped_on_read": self.dropped_on_read,
                "windows_per_s": round(windows / max(self.train_seconds, 1e-9), 1),
                "val_loss_initial": self.history[0]["val_loss"], "val_loss_final": self.history[-1]["val_loss"],
                **({"best_step": self._best()["step"], "stopped_early": self._stale() >= c.patience}
                   if c.patience else {}),
                "contact_head": head, "actuators": actuators}

    def _identify_actuators(self) -> dict | str:
        """Identify the robot's actuators from --data's measured torques (`training/actuators.py`) into
        `self.actuators`; returns the card (held-out torque NRMSE of the nominal and the identified actuators), or why
        none."""
        kept = " (those of the starting checkpoint are kept)" if self.actuators else ""
        if self.own_train.torque is None:
            return f"none identified (the data hold no measured torque){kept}"
        robots = sorted(set(self.variants))
        if len(robots) > 1:  # one law per joint cannot be two robots' actuators
            return f"none identified (--data mixes robots: {', '.join(r or 'nominal' for r in robots)}){kept}"
        phase = (self.robot.decimation - 1) / self.robot.decimation  # where the learned backend reads its PD law
        prior = actuators_from_checkpoint({"actuators": self.actuators}, self.scene.nu)  # None where there is none
        gains, card = identify_actuators(self.own_train, self.val_cpu, self.rep, self.scene, phase, prior)
        if not card["identified"]:
            return f"none identified (no joint's fitted law predicts its held-out torque better){kept}"
        self.actuators = {**gains, "card": {**card, "data": self.data_path.split(", ")}}
        return card

    def _fit_contact_head(self, ckpt: dict) -> dict | str:
        """Fit the contact head on the data's labels (from the head of the checkpoint `ckpt`, where it has one) into
        `self.contact_head`; returns the head's held-out balanced accuracy per contact group, or why there is none."""
        c = self.cfg
        kept = " (the head of the starting checkpoint is kept)" if self.contact_head else ""
        if not self.robot.all_contact_bodies:
            return f"none (robot '{self.robot.name}' has no contact bodies)"
        if self.train_cpu.touching is None:
            return f"none fitted (the data hold no contact labels){kept}"
        init = contact_head_from_checkpoint(ckpt, self.robot.all_contact_bodies)
        try:
            head, card = fit_contact_head(self.train_cpu, self.val_cpu, self.robot, self.rep, self.cpu_probes,
                                          self.x_norm.cpu(), c.contact_head_steps, seed=c.seed, init=init,
                                          device=self.device)
        except ValueError as err:  # the model stays usable: the checkpoint keeps what it had
            return f"none fitted ({err}){kept}"
        finally:
            self.x_norm.to(self.device)
        card["data"] = self.data_path.split(", ")
        self.contact_head = contact_head_entry(head, self.robot, card)
        return {g: m["balanced_accuracy"] for g, m in card["held_out"]["head"].items()}

    def adaptation_report(self, before: str | Path, after: str | Path, horizons=(1, 15, 100)) -> dict:
        """Recursive-rollout NRMSE of the checkpoints `before` (the starting model) and `after` on this fit's
        held-out trajectories of --data (the robot's own data, never trained on); stored in `after`'s card."""
        val = self.val_cpu
        report = {"held_out_trajectories": val.num_trajectories, "init": str(before),
                  **nrmse_before_after(self, before, after, val, horizons)}
        if self.dist.is_main:
            ckpt = read_checkpoint(after, self.robot)
            save_checkpoint(after, {**ckpt, "adaptation": report})
        return report

    def _best(self) -> dict:
        """The validation with the lowest loss (the first of equals)."""
        return min(self.history, key=lambda h: h["val_loss"])

    def _stale(self) -> int:
        """Validations since the best one."""
        return len(self.history) - 1 - self.history.index(self._best())

    def _train_step(self, writer: SummaryWriter | None) -> None:
        """One optimizer step on a teacher-forced batch plus the autoregressive loss."""
        c = self.cfg
        continues = self._continues.count
        start = time.perf_counter()
        for group in self.opt.param_groups:
            group["lr"] = self.lr_at(self.step)
        loss, loss_tf, loss_ar = self._step_fn()  # under torchrun: DDP averages the gradients in backward()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.model.clip_grad_norm_(c.grad_clip)  # an ensemble clips each member's gradient on its own
        self.opt.step()
        self.step += 1
        # The slowest rank's time, so every rank follows the same schedule and stops at the same step; a stop of any
        # rank (the others wait for it in the gradient exchange) counts the step as long as the one before it, or as
        # the mean step of a resumed fit
        seconds, stopped = all_reduce_max_each((time.perf_counter() - start, float(self._continues.count != continues)),
                                               self.device)
        before = self._last_step_seconds or (self.train_seconds / (self.step - 1) if self.step > 1 else None)
        if stopped and before is not None:
            seconds = min(seconds, before)
        self._last_step_seconds = seconds
        self.train_seconds += seconds
        if writer:
            writer.add_scalar("train/loss_teacher_forced", loss_tf.item(), self.step)
            writer.add_scalar("train/loss_autoregressive", loss_ar.item(), self.step)
            writer.add_scalar("train/lr", self.lr_at(self.step), self.step)

    def _validate_and_save(self, out: str | Path, writer: SummaryWriter | None) -> float:
        val = self.validate()  # every rank holds the same weights and draws the same validation windows
        if not math.isfinite(val):
            self._diverged(out, f"the validation loss is {val}")
        self.history.append({"step": self.step, "val_loss": val, "train_seconds": self.train_seconds})
        if writer:
            writer.add_scalar("val/loss_teacher_forced", val, self.step)
        if not self.cfg.patience or self._stale() == 0:  # with early stopping, only a better model replaces `out`
            self.save(out)
        return val

    def _diverged(self, out: str | Path, what: str) -> None:
        """Stop a fit that turned non-finite; the checkpoint at `out` (if any) is the last good one, untouched."""
        last = self.history[-1] if self.history else None
        kept = (f"'{out}' keeps step {last['step']} (validation loss {last['val_loss']:.4g})"
                if last and Path(out).is_file() else "no checkpoint was written")
        raise FitDiverged(f"the fit diverged at step {self.step}: {what}; {kept}. Lower --lr or --grad_clip, or "
                          "check the data")

    def save(self, out: str | Path) -> None:
        """Write the checkpoint (rank 0 alone under torchrun); weights that are not finite are never written."""
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            self._diverged(out, "the weights hold non-finite values")
        if not self.dist.is_main:
            return
        save_checkpoint(out, {
            "kind": self.cfg.model,
            "ensemble": self.members,
            "ensemble_shared": self.cfg.ensemble_shared,
            "model_config": config_dict(self.model.config),
            "state_dict": self.model.state_dict(),
            "input_normalizer": self.x_norm.state_dict(),
            "target_normalizer": self.y_norm.state_dict(),
            "robot": self.robot.name,
            "model_hash": self.robot.model_hash(),
            "robot_spec": self.robot.source,  # the spec file of a robot that is not built in ("" when it is)
            "control_dt": self.robot.control_dt,
            "representation": {"num_joints": self.rep.nj, "contact_dim": self.rep.contact_dim,
                               "layout": self.rep.layout(), "contact": self.cfg.contacts,
                               "max_rows": self.cfg.max_rows, "terrain": self.terrain},
            "fit_config": asdict(self.cfg),
            "optimizer": self.opt.state_dict(),
            "step": self.step,
            "train_seconds": self.train_seconds,
            "rng": self.gen.get_state(),
            "data": {"path": self.data_path, "transitions": self.transitions, "variants": self.variants,
                     **({"mix_data": list(self.cfg.mix_data), "mix": self.cfg.mix,
                         "data_transitions": self.data_transitions, "mix_variants": self.mix_variants}
                        if self.cfg.mix_data else {})},
            "history": self.history,
            "fit_complete": False,  # until fit() returns: the head and actuators are fitted after the last step
            **({"contact_head": self.contact_head} if self.contact_head else {}),
            **({"actuators": self.actuators} if self.actuators else {}),
        })

    def resume(self, path: str | Path) -> None:
        """Continue from a checkpoint of this run: weights, optimizer, step, RNG and history."""
        ckpt = self._load_weights(path, "resume")
        missing = [k for k in ("optimizer", "step", "train_seconds", "rng", "history") if k not in ckpt]
        if missing:
            raise CheckpointError(f"checkpoint '{path}' lacks {', '.join(missing)}, so it cannot be resumed (an "
                                  "exported checkpoint keeps only what inference needs); start a new fit, or start "
                                  f"from its weights with --init {path}")
        step, seconds, history, rng = ckpt["step"], ckpt["train_seconds"], ckpt["history"], ckpt["rng"]
        own = self.gen.get_state()
        if isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8 and rng.dim() == 1 and rng.shape != own.shape:
            raise CheckpointError(f"checkpoint '{path}' holds a random-generator state of {rng.numel()} bytes, this "
                                  f"device's ({self.device}) has {own.numel()}: the fit ran on another kind of device; "
                                  f"resume it there, or start from its weights with --init {path}")
        if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0 and finite_number(seconds)
                and seconds >= 0
                and isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8
                and rng.shape == own.shape and history
                and all(isinstance(h, dict) and isinstance(h.get("step"), int) and not isinstance(h["step"], bool)
                        and isinstance(h.get("val_loss"), float) and math.isfinite(h["val_loss"])
                        for h in history)):
            raise CheckpointError(f"checkpoint '{path}' is corrupt: its step, train_seconds, rng or history is not "
                                  "what `flashnerd fit` writes; start a new fit")
        try:  # on a scratch generator first: torch checks the state's content only when it is set
            torch.Generator(device=self.gen.device).set_state(rng)
        except RuntimeError as err:
            raise CheckpointError(f"checkpoint '{path}' is corrupt: its random-generator state is not one torch can "
                                  f"restore ({str(err).strip()[:80]}); start a new fit, or from its weights with "
                                  f"--init {path}") from err
        self._check_same_fit(path, ckpt)
        load_optimizer_state(self.opt, ckpt["optimizer"], f"checkpoint '{path}'")
        self.step, self.train_seconds, self.history = step, seconds, history
        self.gen.set_state(rng)

    def _check_same_fit(self, path: str | Path, ckpt: dict) -> None:
        """One-line error unless this fitter continues the stopped fit `ckpt` with its settings and data: only how
        long it runs (steps, time budget) and the contact head fitted after it may change. A setting the checkpoint
        lacks (it predates it) is read as its default."""
        stored, data = ckpt.get("fit_config", {}), ckpt.get("data", {})  # dicts: read_checkpoint checks them
        ours = {**asdict(self.cfg), "data": self.data_path.split(", "), "transitions": self.transitions}
        theirs = {**asdict(FitConfig()), **stored, "data": str(data.get("path", "")).split(", "),
                  "transitions": data.get("transitions")}
        unused = {"mix"} if not ours["mix_data"] and not theirs["mix_data"] else set()  # no data to mix: no share
        changed = [k for k in ours if k not in RESUME_MAY_CHANGE | unused
                   and not _same_fit_setting(k, ours[k], theirs[k])]
        if changed:
            said = ", ".join(f"{k} {ours[k]!r} (the stopped fit: {theirs[k]!r})" for k in changed)
            raise CheckpointError(f"--resume with other settings or data than the stopped fit in '{path}': {said}; "
                                  "give the same ones, or a new --out")

    def init_from(self, path: str | Path) -> None:
        """Start from another fit's weights and normalizers (a model refitted on more data, e.g. rollouts its own
        plans led to); the optimizer, schedule and step count start fresh."""
        self._load_weights(path, "start from")

    def _load_weights(self, path: str | Path, verb: str) -> dict:
        """Load weights and normalizers of a checkpoint of the same model; the data are re-normalized with them."""
        ckpt = read_checkpoint(path, self.robot)
        ours = config_dict(self.model.config)
        # a checkpoint older than a config field holds that field's default (what `build_model` gives it)
        if ckpt["kind"] != self.cfg.model or {**ours, **ckpt["model_config"]} != ours:
            raise ValueError(f"checkpoint '{path}' holds a different model ({ckpt['kind']}, "
                             f"{ckpt['model_config']}); cannot {verb} it with this fit's settings")
        if ckpt.get("ensemble", 1) != self.members:
            raise ValueError(f"checkpoint '{path}' holds {ckpt.get('ensemble', 1)} member(s), this fit "
                             f"--ensemble {self.members}; cannot {verb} it with another member count")
        if ckpt.get("ensemble_shared", 0) != self.cfg.ensemble_shared:
            raise ValueError(f"checkpoint '{path}' holds members that share {ckpt.get('ensemble_shared', 0)} "
                             f"block(s), this fit --ensemble_shared {self.cfg.ensemble_shared}; cannot {verb} it "
                             "with another sharing")
        contact_head_from_checkpoint(ckpt, self.robot.all_contact_bodies)  # a bad head is refused before the fit
        # --contact_head_steps 0 asks for no head: none is carried over from the starting checkpoint
        self.contact_head = ckpt.get("contact_head") if self.cfg.contact_head_steps else None
        actuators_from_checkpoint(ckpt, self.scene.nu)  # a corrupt entry is refused before the fit, kept otherwise
        self.actuators = ckpt.get("actuators")
        x_old, y_old = self.x_norm, self.y_norm
        self.x_norm, self.y_norm = Normalizer(len(x_old.mean)), Normalizer(len(y_old.mean))
        try:
            self.model.load_state_dict(ckpt["state_dict"])
            self.x_norm.load_state_dict(ckpt["input_normalizer"])
            self.y_norm.load_state_dict(ckpt["target_normalizer"])
        except RuntimeError as err:  # names or shapes of another model (torch's first line only names the module)
            detail = " ".join(str(err).split())[:200]
            raise CheckpointError(f"checkpoint '{path}' weights or normalizers do not fit its model config; the file "
                                  f"is corrupt ({detail})") from err
        self.x_norm.to(self.device)
        self.y_norm.to(self.device)
        for name, old, new in (("xn_tr", x_old, self.x_norm), ("xn_va", x_old, self.x_norm),
                               ("yn_tr", y_old, self.y_norm), ("yn_va", y_old, self.y_norm)):
            setattr(self, name, new.normalize(old.denormalize(getattr(self, name))))  # the checkpoint's units
        return ckpt


def nrmse_before_after(fitter: Fitter, before: str | Path, after: str | Path, data: TrajectoryData,
                       horizons=(1, 15, 100)) -> dict[str, Any]:
    """{"nrmse_before": {H: ...}, "nrmse_after": {H: ...}}: recursive rollouts of two checkpoints of `fitter`'s
    model kind on `data` (horizons longer than its trajectories are left out)."""
    out: dict[str, Any] = {}
    for name, path in (("before", before), ("after", after)):
        dyn = make_dynamics(fitter.cfg.model, fitter.robot, data.num_trajectories, device=str(fitter.device),
                            terrain=fitter.terrain, checkpoint=str(path))
        errors = rollout_errors(dyn, data, [h for h in horizons if h <= data.traj_len])
        out[f"nrmse_{name}"] = {str(h): e["nrmse"] for h, e in errors.items()}
    return out


class _Objective(torch.nn.Module):
    """The fitting loss as one module call, so DistributedDataParallel sees one forward per optimizer step even
    though the teacher-forced and autoregressive terms call the model many times."""

    def __init__(self, fitter: Fitter) -> None:
        super().__init__()
        self.model = fitter.model
        self._fitter = (fitter,)  # a tuple keeps the Fitter out of the module tree

    def forward(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = self._fitter[0]
        c = f.cfg
        traj, tt = f._sample_windows(f.xn_tr.shape[0], f.xn_tr.shape[1], f.window, c.batch_size * f.members, f.gen,
                                     f.train_weights)
        loss_tf = f.teacher_forced_loss(f.xn_tr, f.yn_tr, (traj[f._tf_rows], tt[f._tf_rows]))
        loss_ar = f.autoregressive_loss(f.train, f.xn_tr) if c.ar_weight > 0 else torch.zeros((), device=f.device)
        return loss_tf + c.ar_weight * loss_ar, loss_tf, loss_ar


def _rank_rows(batch: int, members: int, dist: DistInfo, device: str | torch.device) -> slice | torch.Tensor:
    """Rows of a global draw of `members` x `batch` windows that this rank computes: its share of every member's
    batch, so each member's gradient is still that of its whole batch."""
    share = batch // dist.world_size
    if members == 1:
        return slice(dist.rank * share, (dist.rank + 1) * share)
    rows = torch.arange(share, device=device) + dist.rank * share  # (share,)
    return (torch.arange(members, device=device)[:, None] * batch + rows).flatten()  # (K * share,)
