"""Long-horizon accuracy of a learned model: recursive rollouts from recorded states under recorded controls.

NRMSE at horizon H (see docs/learned_dynamics.md): for every robot-centric state dimension d (base height, gravity
direction and velocities in the base frame for a floating base; joint positions and velocities), the RMSE over
rollouts of the error H steps after the start, divided by the standard deviation of that dimension in the ground
truth of the evaluation set, then averaged over d. Also the base position error (m) and base orientation error (rad,
angle of the relative rotation) at H, for a floating base.

For an ensemble, also what its disagreement says about those errors: the mean disagreement per step over the first H
steps, and its rank correlation (Spearman) across the rollouts with each rollout's normalized error at H. Near 1, the
rollouts the members disagree on most are the ones that went most wrong, which is what the uncertainty terms of
training on a model rely on; near 0, the disagreement does not find them. And the 50th, 90th and 99th percentiles of
the per-step disagreement over all rollouts' first H steps: what the model reports inside held-out data, the scale a
`--uncertainty_threshold` or `--uncertainty_penalty` is read against.
"""

from __future__ import annotations

import numpy as np
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
    spread = torch.zeros(n, device=dev)  # (n,) disagreement summed over the steps so far (an ensemble's)
    per_step = []  # each step's disagreement (n,), an ensemble's
    for t in range(max(horizons)):
        dyn.step(ctrl[:, t])
        h = t + 1
        d = dyn.state().disagreement
        if d is not None:
            spread += d
            per_step.append(torch.nan_to_num(d, nan=1e6, posinf=1e6))  # a diverged step reads as a huge one
        if h in horizons:
            s = dyn.state()
            err = rep.state_features(s.qpos, s.qvel) - truth_feat[:, h]  # (n, state_dim)
            err = torch.nan_to_num(err, nan=1e6, posinf=1e6, neginf=-1e6)
            nrmse_h = nrmse(err, torch.zeros_like(err), std)
            out[h] = {"nrmse": nrmse_h.item()}
            if d is not None:
                per_rollout = (err / std).square().mean(-1).sqrt()  # (n,) each rollout's normalized error at h
                # over the (h * n,) values so far; numpy's quantile has no size limit (torch's stops at 2^24)
                q = np.quantile(torch.stack(per_step).cpu().numpy(), [0.5, 0.9, 0.99]).tolist()
                out[h].update(disagreement=(spread / h).mean().item(),
                              disagreement_quantiles=dict(zip(("p50", "p90", "p99"), q)),
                              disagreement_error_rank_corr=rank_correlation(spread, per_rollout))
            if not rep.floating_base:
                continue
            pos_err = torch.linalg.norm(s.qpos[:, 0:3] - qpos[:, h, 0:3], dim=-1).mean()
            rel = quat_mul(quat_conjugate(qpos[:, h, 3:7]), s.qpos[:, 3:7])
            rot_err = torch.linalg.norm(quat_to_rotvec(rel), dim=-1).mean()
            out[h].update(base_pos_err_m=pos_err.item(), base_rot_err_rad=rot_err.item())
    return out


def rank_correlation(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """Spearman's rank correlation of a (n,) and b (n,): the Pearson correlation of their ranks (ties broken by
    order); None for fewer than 3 values or a constant one."""
    if a.numel() < 3:
        return None
    ra, rb = (x.argsort().argsort().double() for x in (a, b))  # (n,) ranks
    ra, rb = ra - ra.mean(), rb - rb.mean()  # (n,)
    if not bool(a.max() > a.min()) or not bool(b.max() > b.min()):
        return None
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def nrmse(pred: torch.Tensor, truth: torch.Tensor, truth_std: torch.Tensor) -> torch.Tensor:
    """NRMSE of predictions (R, D) against truth (R, D) given per-dimension ground-truth std (D,)."""
    return (torch.sqrt(torch.mean((pred - truth) ** 2, dim=0)) / truth_std).mean()
