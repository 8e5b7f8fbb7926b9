"""Long-horizon accuracy of a learned model: recursive rollouts from recorded states under recorded controls.

NRMSE at horizon H (see docs/learned_dynamics.md): for every robot-centric state dimension d (base height, gravity
direction and velocities in the base frame for a floating base; joint positions and velocities), the RMSE over
rollouts of the error H steps after the start, divided by the standard deviation of that dimension in the ground
truth of the evaluation set, then averaged over d. Also the base position error (m) and base orientation error (rad,
angle of the relative rotation) at H, for a floating base.
"""

from __future__ import annotations

import torch

from flashnerd.data.dataset import TrajectoryData
from flashnerd.dynamics.learned import LearnedDynamics
from flashnerd.dynamics.representation import quat_to_rotvec
from flashnerd.utils.math import quat_conjugate, quat_mul

HORIZONS = (1, 15, 100, 200)


@torch.no_grad()
def rollout_errors(dyn: LearnedDynamics, data: TrajectoryData, horizons=HORIZONS) -> dict:
    """Roll the learned backend from each trajectory's first state under its recorded controls; report errors."""
    horizons = [h for h in horizons if h <= data.traj_len]
    if not horizons:
        raise ValueError(f"trajectories of {data.traj_len} steps are shorter than every horizon")
    n, dev = data.num_trajectories, dyn.device
    if n != dyn.num_worlds:
        raise ValueError(f"backend has {dyn.num_worlds} worlds for {n} trajectories")
    qpos, qvel, ctrl = data.qpos.to(dev), data.qvel.to(dev), data.ctrl.to(dev)
    rep = dyn.rep
    truth_feat = rep.state_features(qpos, qvel)  # (n, T+1, state_dim)
    std = truth_feat.reshape(-1, rep.state_dim).std(0).clamp_min(1e-6)  # (state_dim,)
    dyn.reset(torch.arange(n, device=dev), qpos[:, 0], qvel[:, 0])
    out = {}
    for t in range(max(horizons)):
        dyn.step(ctrl[:, t])
        h = t + 1
        if h in horizons:
            s = dyn.state()
            err = rep.state_features(s.qpos, s.qvel) - truth_feat[:, h]  # (n, state_dim)
            err = torch.nan_to_num(err, nan=1e6, posinf=1e6, neginf=-1e6)
            nrmse_h = nrmse(err, torch.zeros_like(err), std)
            out[h] = {"nrmse": nrmse_h.item()}
            if not rep.floating_base:
                continue
            pos_err = torch.linalg.norm(s.qpos[:, 0:3] - qpos[:, h, 0:3], dim=-1).mean()
            rel = quat_mul(quat_conjugate(qpos[:, h, 3:7]), s.qpos[:, 3:7])
            rot_err = torch.linalg.norm(quat_to_rotvec(rel), dim=-1).mean()
            out[h].update(base_pos_err_m=pos_err.item(), base_rot_err_rad=rot_err.item())
    return out


def nrmse(pred: torch.Tensor, truth: torch.Tensor, truth_std: torch.Tensor) -> torch.Tensor:
    """NRMSE of predictions (R, D) against truth (R, D) given per-dimension ground-truth std (D,)."""
    return (torch.sqrt(torch.mean((pred - truth) ** 2, dim=0)) / truth_std).mean()
