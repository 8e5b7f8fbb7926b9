"""Fit a contact head (`models/contact_head.py`) on recorded contact labels, and measure it on held-out data.

The head reads the frame a learned backend builds after each step (`contact_frames`: the end-of-step state, the
control just applied and that state's contact features, normalized with the dynamics model's input normalizer), so
it is trained on exactly what it sees when stepping. Its card holds, per contact group of the robot and on held-out
trajectories, the head's balanced accuracy, precision and recall beside those of the probe estimate the backends use
without a head (a probe of the body within `CONTACT_MARGIN` of the ground; bodies without probes never touch) and of
a constant predictor (balanced accuracy 0.5).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from flashnerd.contacts import ContactFeatures
from flashnerd.data.dataset import TrajectoryData, load_datasets
from flashnerd.dynamics.learned import CONTACT_MARGIN, LearnedConfig, LearnedDynamics, probe_owner
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.models.checkpoint import config_dict, read_checkpoint, save_checkpoint
from flashnerd.models.contact_head import (
    CONTACT_LABEL_N,
    ContactHead,
    ContactHeadConfig,
    balanced_pos_weight,
    classification_metrics,
)
from flashnerd.models.normalizer import Normalizer
from flashnerd.robots import RobotSpec, robot_of_record


@torch.no_grad()
def contact_frames(data: TrajectoryData, rep: StateRepresentation, probes: ContactFeatures, x_norm: Normalizer,
                   chunk: int = 256) -> torch.Tensor:
    """The head's inputs (M*T, I): for every step, the normalized frame of the state it ended in under its control."""
    out = []
    for i in range(0, data.num_trajectories, chunk):
        qpos, qvel, ctrl = data.qpos[i:i + chunk, 1:], data.qvel[i:i + chunk, 1:], data.ctrl[i:i + chunk]  # (m, T, .)
        m, t, nq = qpos.shape
        feats = probes(qpos.reshape(-1, nq), qvel.reshape(m * t, -1)).reshape(m, t, -1)  # (m, T, c)
        out.append(x_norm.normalize(rep.inputs(qpos, qvel, ctrl, feats)).reshape(m * t, -1))  # (m*T, I)
    return torch.cat(out)


def probe_touching(data: TrajectoryData, robot: RobotSpec, probes: ContactFeatures) -> torch.Tensor:
    """What the probe estimate says (M*T, nb): a body touches where one of its probes lies within CONTACT_MARGIN of
    the ground at the end of the step."""
    qpos = data.qpos[:, 1:].reshape(-1, data.qpos.shape[-1])  # (M*T, nq)
    if not robot.probes:
        return torch.zeros(qpos.shape[0], len(robot.all_contact_bodies), device=qpos.device)  # (M*T, nb)
    near = (probes.signed_distance(qpos) < CONTACT_MARGIN).float()  # (M*T, P)
    return (near[:, :, None] * probe_owner(robot, qpos.device)).amax(dim=1)  # (M*T, nb)


def group_metrics(robot: RobotSpec, predicted: torch.Tensor, touching: torch.Tensor) -> dict[str, dict]:
    """`classification_metrics` pooled over the bodies of each contact group: {group: {...}}."""
    bodies = list(robot.all_contact_bodies)
    out = {}
    for group, names in robot.contact_bodies.items():
        cols = [bodies.index(n) for n in names]
        out[group] = classification_metrics(predicted[:, cols].flatten(), touching[:, cols].flatten())
    return out


def fit_contact_head(train: TrajectoryData, val: TrajectoryData, robot: RobotSpec, rep: StateRepresentation,
                     probes: ContactFeatures, x_norm: Normalizer, steps: int, batch_size: int = 4096,
                     lr: float = 1e-3, seed: int = 0, init: ContactHead | None = None,
                     device: str | torch.device = "cpu") -> tuple[ContactHead, dict]:
    """Train a head for `steps` AdamW steps on `train`'s labels (a copy of `init`, a checkpoint's head, when given)
    and measure it on `val`; returns the head (eval mode, CPU) and its card. A head whose weights turn non-finite
    is a `ValueError`."""
    if train.touching is None or val.touching is None or val.num_trajectories == 0:
        raise ValueError("the data hold no contact labels for every contact body of the robot, or no held-out "
                         "trajectory (`flashnerd record` writes labels; robot logs need a contact_<body> column for "
                         "each)")
    x_tr = contact_frames(train, rep, probes, x_norm).to(device)  # (N, I)
    y_tr = train.touching.reshape(-1, train.touching.shape[-1]).to(device)  # (N, nb)
    f_tr = None if train.contact_force is None else train.contact_force.reshape(y_tr.shape).to(device)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    head = ContactHead(init.config if init is not None else
                       ContactHeadConfig(input_dim=x_tr.shape[1], num_bodies=y_tr.shape[1])).to(device)
    if init is not None:
        head.load_state_dict(init.state_dict())
    head.pos_weight.copy_(balanced_pos_weight(y_tr))
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=1e-4)
    start = time.perf_counter()
    head.train()
    for step in range(steps):
        for group in opt.param_groups:  # cosine decay to lr / 10
            group["lr"] = lr * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
        rows = torch.randint(0, x_tr.shape[0], (min(batch_size, x_tr.shape[0]),), generator=gen).to(device)  # (b,)
        loss = head.loss(x_tr[rows], y_tr[rows], None if f_tr is None else f_tr[rows])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    head = head.cpu().eval()
    if not all(bool(torch.isfinite(p).all()) for p in head.parameters()):
        raise ValueError(f"the contact head's weights turned non-finite within {steps} steps; check the data's "
                         "contact labels")
    y_va = val.touching.reshape(-1, val.touching.shape[-1])  # (V, nb)
    with torch.no_grad():
        logits, _ = head(contact_frames(val, rep, probes, x_norm))  # (V, nb)
    card = {
        "label_threshold_n": CONTACT_LABEL_N, "steps": steps, "train_seconds": round(seconds, 1),
        "transitions": int(x_tr.shape[0]), "held_out_transitions": int(y_va.shape[0]),
        "forces": f_tr is not None, "pos_weight": [round(float(w), 2) for w in head.pos_weight],
        "held_out": {"head": group_metrics(robot, logits > 0, y_va),
                     "probes": group_metrics(robot, probe_touching(val, robot, probes), y_va)},
    }
    return head, card


def contact_head_entry(head: ContactHead, robot: RobotSpec, card: dict) -> dict:
    """The checkpoint's `contact_head` field: config, weights, the contact bodies in output order, and the card."""
    return {"config": config_dict(head.config), "state_dict": head.state_dict(),
            "bodies": list(robot.all_contact_bodies), "card": card}


def add_contact_head(checkpoint: str | Path, data: Sequence[str | Path], out: str | Path, steps: int = 1000,
                     seed: int = 0, val_fraction: float = 0.1) -> dict:
    """Fit a contact head for a fitted checkpoint on `data`'s labels and write the checkpoint with it to `out`; the
    dynamics model, its normalizers and its card are copied unchanged. Returns the head's card."""
    if steps < 1:
        raise ValueError(f"--steps must be a positive integer, got {steps}")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    ckpt = read_checkpoint(checkpoint)
    robot = robot_of_record(ckpt["robot"], str(ckpt.get("robot_spec", "")))
    ckpt = read_checkpoint(checkpoint, robot)  # checks the robot-model hash too
    if not robot.all_contact_bodies:
        raise ValueError(f"robot '{robot.name}' has no contact bodies; there is nothing for a contact head to predict")
    paths = [str(p) for p in data]
    loaded = load_datasets(paths, robot)
    if loaded.num_trajectories < 2:
        raise ValueError(f"the data hold {loaded.num_trajectories} trajectory; a contact head needs at least 2 (one "
                         "held out)")
    terrain = str(loaded.attrs.get("terrain", "flat"))
    dyn = LearnedDynamics(robot, 1, terrain=terrain, config=LearnedConfig(checkpoint=checkpoint), kind=ckpt["kind"])
    train, val = loaded.split(val_fraction, seed=seed)
    head, card = fit_contact_head(train, val, robot, dyn.rep, dyn.probes, dyn.x_norm, steps, seed=seed)
    card["data"] = paths
    save_checkpoint(out, {**ckpt, "contact_head": contact_head_entry(head, robot, card)})
    return card


@torch.no_grad()
def contact_report(dyn: LearnedDynamics, data: TrajectoryData) -> dict[str, dict]:
    """Per contact group, on `data`'s recorded states: the backend's contact head and the probe estimate against the
    recorded labels (`evaluate-model` prints it; empty when the checkpoint has no head or the data no labels)."""
    if dyn.contact_head is None or data.touching is None:
        return {}
    robot, on_device = dyn.robot, data.to(dyn.device)
    touching = data.touching.reshape(-1, data.touching.shape[-1]).cpu()  # (M*T, nb)
    frames = contact_frames(on_device, dyn.rep, dyn.probes, dyn.x_norm)  # (M*T, I)
    predicted = (dyn.contact_head(frames)[0] > 0).cpu()  # (M*T, nb)
    return {"head": group_metrics(robot, predicted, touching),
            "probes": group_metrics(robot, probe_touching(on_device, robot, dyn.probes).cpu(), touching)}
