"""What every learned dynamics model provides to the fitting loop and the streaming backends.

Each model is an `nn.Module` with `forward(x)` over windows (B, T, I) -> (B, T, O) normalized increments,
`init_cache` / `step` / `reset_cache` for streaming, and the three training hooks below, so `training/fit.py` treats
every model alike: its teacher-forced `loss`, its `forecast` for the autoregressive loss, and its `context` (how many
frames a window may hold). `receptive_field` is how many streaming steps fill its history (benchmarks warm up that
long).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class DynamicsModel(nn.Module):
    """Defaults for deterministic models that read any window length: MSE loss, the mean prediction as forecast."""

    context: int | None = None  # most frames one window may hold (None: any)
    receptive_field: int = 1  # streaming steps until the history is full

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Teacher-forced loss of windows x (B, T, I) against normalized increments y (B, T, O)."""
        return F.mse_loss(self(x), y)

    def forecast(self, window: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The normalized increment (B, O) predicted at the newest frame of window (B, T, I), differentiably."""
        return self(window)[:, -1]
