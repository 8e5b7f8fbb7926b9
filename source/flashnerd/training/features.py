"""Turn recorded trajectories into model inputs and increment targets (the shared representation)."""

from __future__ import annotations

import torch

from flashnerd.data.dataset import TrajectoryData
from flashnerd.dynamics.representation import StateRepresentation


@torch.no_grad()
def trajectory_tensors(data: TrajectoryData, rep: StateRepresentation, probes,
                       chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs X (M, T, input_dim) and targets Y (M, T, target_dim) for every frame of every trajectory."""
    xs, ys = [], []
    for i in range(0, data.num_trajectories, chunk):
        qpos, qvel, ctrl = data.qpos[i:i + chunk], data.qvel[i:i + chunk], data.ctrl[i:i + chunk]
        m, t1, nq = qpos.shape
        nv = qvel.shape[-1]
        contact = probes(qpos[:, :-1].reshape(-1, nq), qvel[:, :-1].reshape(-1, nv)).reshape(m, t1 - 1, -1)  # (m, T, c)
        xs.append(rep.inputs(qpos[:, :-1], qvel[:, :-1], ctrl, contact))  # (m, T, I)
        ys.append(rep.increment(qpos[:, :-1], qvel[:, :-1], qpos[:, 1:], qvel[:, 1:]))  # (m, T, O)
    return torch.cat(xs), torch.cat(ys)
