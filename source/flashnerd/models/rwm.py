"""RWM baseline: the Robotic World Model (ETH, 2025), a GRU world model with Gaussian state heads.

A stacked GRU reads one frame of [state features, action] per step; heads predict the mean and log standard deviation
of the next-state increment, contact logits and a termination logit. Streaming carries the GRU's hidden state, so a
step costs one GRU cell per layer, whatever the history length. Trained with dual autoregression: the GRU runs over a
true history, then the model's own *sampled* predictions are fed back for the forecast steps (see
`flashnerd.training.fit`).

Shapes: B batch (worlds), T frames, I input_dim, O output_dim, L layers, C hidden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from flashnerd.models.base import DynamicsModel

LOG_STD_MIN, LOG_STD_MAX = -7.0, 2.0


@dataclass
class RWMConfig:
    """Sizes of an RWM model."""

    input_dim: int
    output_dim: int
    n_layer: int = 2
    hidden: int = 256
    head_hidden: int = 128
    num_contacts: int = 0  # contact-logit outputs (0: no contact head)


RWM_SIZES: dict[str, dict] = {
    "cpu": dict(n_layer=2, hidden=128, head_hidden=128),
    "paper_small": dict(n_layer=2, hidden=256, head_hidden=128),
    "paper": dict(n_layer=2, hidden=256, head_hidden=128),  # published: GRU 2 x 256
}


@dataclass
class RWMCache:
    """The GRU's hidden state of every world."""

    world_axes: ClassVar[dict[str, int]] = {"h": -2}  # for memory estimates (envs/memory.py)

    h: torch.Tensor  # (L, B, C)


class RWM(DynamicsModel):
    """Stacked GRU over frames -> Gaussian next-state increment, contact logits, termination logit."""

    def __init__(self, config: RWMConfig):
        super().__init__()
        self.config = config
        C = config.hidden
        self.gru = nn.GRU(config.input_dim, C, num_layers=config.n_layer, batch_first=True)
        self.trunk = nn.Sequential(nn.Linear(C, config.head_hidden), nn.ELU())
        self.mean = nn.Linear(config.head_hidden, config.output_dim)
        self.log_std = nn.Linear(config.head_hidden, config.output_dim)
        self.contact = nn.Linear(config.head_hidden, config.num_contacts) if config.num_contacts else None
        self.termination = nn.Linear(config.head_hidden, 1)

    def heads(self, h: torch.Tensor) -> dict[str, torch.Tensor]:
        """Hidden states (..., C) -> mean, log_std (..., O), contact (..., K) and termination (..., 1) logits."""
        z = self.trunk(h)  # (..., head_hidden)
        out = {"mean": self.mean(z), "log_std": self.log_std(z).clamp(LOG_STD_MIN, LOG_STD_MAX),
               "termination": self.termination(z)}
        if self.contact is not None:
            out["contact"] = self.contact(z)
        return out

    def forward_dist(self, x: torch.Tensor, h0: torch.Tensor | None = None) -> tuple[dict[str, torch.Tensor],
                                                                                    torch.Tensor]:
        """x (B, T, I) -> (heads over every frame (B, T, .), final hidden state (L, B, C))."""
        y, h = self._recurrent(x, h0)  # (B, T, C), (L, B, C)
        return self.heads(y), h

    def _recurrent(self, x: torch.Tensor, h0: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The stacked GRU over x (B, T, I) from h0 (L, B, C) -> outputs (B, T, C), final hidden state (L, B, C)."""
        return self._unrolled_gru(x, h0) if self.batched_members else self.gru(x, h0)

    def _unrolled_gru(self, x: torch.Tensor, h0: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """`self.gru(x, h0)` as per-step cell equations (PyTorch's GRU), for an ensemble's vmap, which has no rule
        for the fused GRU kernel: x (B, T, I), h0 (L, B, C) -> (B, T, C), (L, B, C)."""
        B, T, _ = x.shape
        C = self.config.hidden
        h = [x.new_zeros(B, C) if h0 is None else h0[layer] for layer in range(self.config.n_layer)]  # L x (B, C)
        out = []
        for t in range(T):
            inp = x[:, t]  # (B, I) then (B, C)
            for layer in range(self.config.n_layer):
                g = self.gru
                gi = F.linear(inp, getattr(g, f"weight_ih_l{layer}"), getattr(g, f"bias_ih_l{layer}"))  # (B, 3C)
                gh = F.linear(h[layer], getattr(g, f"weight_hh_l{layer}"), getattr(g, f"bias_hh_l{layer}"))
                r, z = torch.sigmoid(gi[:, :2 * C] + gh[:, :2 * C]).split(C, dim=-1)  # (B, C) x2
                n = torch.tanh(gi[:, 2 * C:] + r * gh[:, 2 * C:])  # (B, C)
                h[layer] = inp = (1 - z) * n + z * h[layer]  # (B, C)
            out.append(inp)
        return torch.stack(out, dim=1), torch.stack(h)  # (B, T, C), (L, B, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, I) -> predicted mean increment at every frame (B, T, O), like the other models."""
        return self.forward_dist(x)[0]["mean"]

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of the normalized increments y (B, T, O) under the predicted Gaussians."""
        out = self.forward_dist(x)[0]
        z = (y - out["mean"]) * torch.exp(-out["log_std"])  # (B, T, O) standardized error
        return (0.5 * z.square() + out["log_std"]).mean()

    def forecast(self, window: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """A sample (B, O) of the Gaussian at the newest frame of window (B, T, I), reparameterized so the loss
        reaches the std head, as published."""
        out = self.forward_dist(window)[0]
        mean, log_std = out["mean"][:, -1], out["log_std"][:, -1]  # (B, O)
        eps = torch.randn(mean.shape, device=mean.device, generator=generator)  # (B, O)
        return mean + torch.exp(log_std) * eps

    def init_cache(
        self, batch_size: int, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> RWMCache:
        """Zero hidden states for `batch_size` worlds (defaults: the model's device and dtype)."""
        p = next(self.parameters())
        device, dtype = device or p.device, dtype or p.dtype
        return RWMCache(h=torch.zeros(self.config.n_layer, batch_size, self.config.hidden, device=device, dtype=dtype))

    def step(self, x_t: torch.Tensor, cache: RWMCache) -> torch.Tensor:
        """Advance every world's GRU by the frame x_t (B, I) -> mean increment (B, O); the cache is updated in place."""
        y, h = self._recurrent(x_t[:, None], cache.h)  # (B, 1, C), (L, B, C)
        cache.h.copy_(h)
        return self.heads(y[:, 0])["mean"]  # (B, O)

    def step_functional(self, x_t: torch.Tensor, cache: RWMCache) -> tuple[torch.Tensor, RWMCache]:
        """`step` without writes: -> mean increment (B, O) and a new cache (autograd runs through it). The GRU runs as
        its cell equations: on CUDA the fused cuDNN kernel has no backward pass outside training mode."""
        y, h = self._unrolled_gru(x_t[:, None], cache.h)  # (B, 1, C), (L, B, C)
        return self.heads(y[:, 0])["mean"], RWMCache(h=h)  # (B, O)

    def reset_cache(self, cache: RWMCache, world_ids: torch.Tensor) -> None:
        """Forget the history of `world_ids` only; other worlds are untouched."""
        cache.h[:, world_ids] = 0.0
