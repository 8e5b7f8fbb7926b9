"""Record exploration trajectories from the analytical backend into an HDF5 dataset.

Each trajectory starts from a randomized pose and velocity and runs `traj_len` control steps under exploration
controls: PD targets around the default pose with a per-trajectory amplitude and random hold times, plus
occasional pushes. Layout (num_traj = number of trajectories, T = traj_len):

    qpos (num_traj, T+1, nq), qvel (num_traj, T+1, nv), ctrl (num_traj, T, nu) joint targets applied from t to t+1,
    torque (num_traj, T, nu) applied torque, contact_force (num_traj, T, nb) contact summary,
    probe_distance (num_traj, T+1, P) signed distance of each fixed probe to the ground.

Attributes: robot, model_hash, control_dt, nq, nv, nu, state_layout, format_version, flashnerd_version, seed,
dropped (trajectories removed for NaN/Inf/huge values). The file is written to `<out>.tmp` and renamed when done.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import h5py
import numpy as np
import torch
from tqdm import tqdm

import flashnerd
from flashnerd.contacts import ProbeFeatures
from flashnerd.dynamics import make_dynamics
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.robots import RobotSpec
from flashnerd.utils.math import quat_from_euler_xyz

FORMAT_VERSION = 1
HUGE = 1e5  # NeRD drops trajectories with |x| above this


def _sample_initial_state(dyn, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random poses near standing (height, roll/pitch, yaw, joint scales) and random velocities (n worlds)."""
    robot = dyn.robot
    qpos = torch.as_tensor(dyn.default_qpos(), dtype=torch.float32).repeat(n, 1)  # (n, nq)
    u = lambda *shape: torch.rand(*shape, generator=gen)  # noqa: E731
    qpos[:, 2] = robot.init_base_height - 0.15 + 0.2 * u(n)
    rp = (u(n, 2) - 0.5) * 0.6
    qpos[:, 3:7] = quat_from_euler_xyz(rp[:, 0], rp[:, 1], (u(n) - 0.5) * 2 * math.pi)
    qpos[:, 7:] = torch.tensor(robot.default_joint_pos) + (u(n, robot.num_joints) - 0.5) * 0.8
    qvel = (u(n, dyn.nv) - 0.5) * 1.0  # (n, nv)
    return qpos, qvel


class ExplorationController:
    """PD targets = default + amplitude * U[-1, 1], each joint held for a random 1-10 steps (batched)."""

    def __init__(self, robot: RobotSpec, n: int, gen: torch.Generator) -> None:
        self.default = torch.tensor(robot.default_joint_pos)
        self.n, self.nj, self.gen = n, robot.num_joints, gen
        self.amplitude = torch.zeros(n, 1)
        self.target = self.default.repeat(n, 1)
        self.hold = torch.zeros(n, self.nj, dtype=torch.long)

    def reset(self) -> None:
        self.amplitude = 0.05 + 0.75 * torch.rand(self.n, 1, generator=self.gen)  # (n, 1) per trajectory
        self.hold.zero_()

    def __call__(self) -> torch.Tensor:
        redraw = self.hold <= 0  # (n, nj)
        fresh = self.default + self.amplitude * (2 * torch.rand(self.n, self.nj, generator=self.gen) - 1)
        self.target = torch.where(redraw, fresh, self.target)
        self.hold = torch.where(redraw, torch.randint(1, 11, (self.n, self.nj), generator=self.gen), self.hold - 1)
        return self.target.clone()


def record(robot: RobotSpec, num_worlds: int, steps: int, out: str | Path, traj_len: int = 100, seed: int = 0,
           push_prob: float = 0.01, nthread: int | None = None, progress: bool = True) -> dict:
    """Record `num_worlds` worlds for `steps` control steps each (cut into `traj_len`-step trajectories)."""
    if num_worlds < 1 or steps < 1 or traj_len < 1:
        raise ValueError("num_worlds, steps and traj_len must be positive")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    gen = torch.Generator().manual_seed(seed)
    dyn = make_dynamics("mujoco", robot, num_worlds, nthread=nthread)
    probes = ProbeFeatures(robot, dyn.model)
    rep = StateRepresentation(robot.num_joints, probes.dim)
    controller = ExplorationController(robot, num_worlds, gen)
    n_chunks = math.ceil(steps / traj_len)
    nq, nv, nu, nb, npb = dyn.nq, dyn.nv, dyn.nu, len(robot.all_contact_bodies), probes.num_probes
    kept = dropped = 0
    try:
        with h5py.File(tmp, "w") as f:
            def make(name: str, t: int, d: int) -> h5py.Dataset:
                return f.create_dataset(name, shape=(0, t, d), maxshape=(None, t, d), dtype="f4",
                                        chunks=(min(64, num_worlds), t, d), compression="gzip", compression_opts=4)

            ds = {"qpos": make("qpos", traj_len + 1, nq), "qvel": make("qvel", traj_len + 1, nv),
                  "ctrl": make("ctrl", traj_len, nu), "torque": make("torque", traj_len, nu),
                  "contact_force": make("contact_force", traj_len, nb),
                  "probe_distance": make("probe_distance", traj_len + 1, npb)}
            f.attrs.update({
                "robot": robot.name, "model_hash": robot.model_hash(), "control_dt": robot.control_dt,
                "nq": nq, "nv": nv, "nu": nu, "traj_len": traj_len, "seed": seed, "format_version": FORMAT_VERSION,
                "flashnerd_version": flashnerd.__version__, "state_layout": json.dumps(rep.layout()),
                "contact_bodies": json.dumps(list(robot.all_contact_bodies)),
            })
            bar = tqdm(total=n_chunks * traj_len * num_worlds, desc="record", unit="step",
                       disable=None if progress else True)
            for _ in range(n_chunks):
                buf = {k: np.zeros((num_worlds, *d.shape[1:]), dtype=np.float32) for k, d in ds.items()}
                qpos, qvel = _sample_initial_state(dyn, num_worlds, gen)
                dyn.reset(torch.arange(num_worlds), qpos, qvel)
                controller.reset()
                s = dyn.state()
                buf["qpos"][:, 0], buf["qvel"][:, 0] = s.qpos.numpy(), s.qvel.numpy()
                buf["probe_distance"][:, 0] = probes.signed_distance(s.qpos).numpy()
                for t in range(traj_len):
                    ctrl = controller()
                    push = torch.rand(num_worlds, generator=gen) < push_prob
                    if push.any():
                        ids = torch.nonzero(push).flatten()
                        v = s.qvel[ids].clone()
                        v[:, 0:2] += (torch.rand(len(ids), 2, generator=gen) - 0.5) * 2.0
                        dyn.set_qvel(ids, v)
                    dyn.step(ctrl)
                    s = dyn.state()
                    buf["ctrl"][:, t], buf["torque"][:, t] = ctrl.numpy(), s.joint_torque.numpy()
                    buf["contact_force"][:, t] = s.contact_force.numpy()
                    buf["qpos"][:, t + 1], buf["qvel"][:, t + 1] = s.qpos.numpy(), s.qvel.numpy()
                    buf["probe_distance"][:, t + 1] = probes.signed_distance(s.qpos).numpy()
                    bar.update(num_worlds)
                good = np.ones(num_worlds, dtype=bool)
                for k in ("qpos", "qvel", "torque"):
                    x = buf[k].reshape(num_worlds, -1)
                    good &= np.isfinite(x).all(1) & (np.abs(x) < HUGE).all(1)
                dropped += int((~good).sum())
                for k, d in ds.items():
                    d.resize(kept + int(good.sum()), axis=0)
                    d[kept:] = buf[k][good]
                kept += int(good.sum())
            bar.close()
            f.attrs["dropped"] = dropped
            f.attrs["num_trajectories"] = kept
    except BaseException:  # an error or Ctrl-C: leave no half-written dataset behind
        dyn.close()
        tmp.unlink(missing_ok=True)
        raise
    dyn.close()
    os.replace(tmp, out)
    return {"out": str(out), "trajectories": kept, "dropped": dropped, "traj_len": traj_len,
            "transitions": kept * traj_len}
