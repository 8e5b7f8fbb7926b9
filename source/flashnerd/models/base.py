"""What every learned dynamics model provides to the fitting loop and the streaming backends.

Each model is an `nn.Module` with `forward(x)` over windows (B, T, I) -> (B, T, O) normalized increments,
`init_cache` / `step` / `reset_cache` for streaming (`step` writes the cache in place, for inference;
`step_functional(x_t, cache) -> (prediction, new_cache)` writes nothing, so autograd runs through a rollout), and the
three training hooks below, so `training/fit.py` treats every model alike: its teacher-forced `loss`, its `forecast`
for the autoregressive loss, and its `context` (how many frames a window may hold). `receptive_field` is how many
streaming steps fill its history (benchmarks warm up that long). `models/ensemble.py` stacks K members of one kind
into one module with the same hooks.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class DynamicsModel(nn.Module):
    """Defaults for deterministic models that read any window length: MSE loss, the mean prediction as forecast."""

    context: int | None = None  # most frames one window may hold (None: any)
    receptive_field: int = 1  # streaming steps until the history is full
    shared_cache: tuple[str, ...] = ()  # cache fields that depend on the inputs alone (one copy for an ensemble)
    batched_members: bool = False  # True when an `Ensemble` runs this module under vmap over its members

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Clip the gradient norm of all parameters to `max_norm` (an ensemble clips each member on its own)."""
        return torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Teacher-forced loss of windows x (B, T, I) against normalized increments y (B, T, O)."""
        return F.mse_loss(self(x), y)

    def forecast(self, window: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The normalized increment (B, O) predicted at the newest frame of window (B, T, I), differentiably."""
        return self(window)[:, -1]
