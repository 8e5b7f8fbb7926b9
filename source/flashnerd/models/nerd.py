"""NeRD baseline: the published "Neural Robot Dynamics" causal GPT, with fused attention but the same algorithm.

One token per time step, learned absolute positions over a fixed history window, no KV cache: streaming re-runs the
whole window every step, exactly as published.

Shapes: B batch (worlds), T frames, W window, C n_embd, H heads, D head_dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from flashnerd.models.base import DynamicsModel


@dataclass
class NeRDConfig:
    """Sizes of a NeRD model."""

    input_dim: int
    output_dim: int
    n_layer: int = 6
    n_head: int = 12
    n_embd: int = 384
    window: int = 10  # history length
    head_hidden: int = 64


NERD_SIZES: dict[str, dict] = {
    "cpu": dict(n_layer=4, n_head=4, n_embd=128),
    "paper_small": dict(n_layer=6, n_head=12, n_embd=192),  # published CartPole / Franka size
    "paper": dict(n_layer=6, n_head=12, n_embd=384),  # published ANYmal size
}


@dataclass
class NeRDCache:
    """Input history of every world; the newest frame is at the last slot."""

    world_axes: ClassVar[dict[str, int]] = {"x": -3, "count": -1}  # for memory estimates (envs/memory.py)

    x: torch.Tensor  # (B, W, input_dim)
    count: torch.Tensor  # (B,) long: valid frames per world, capped at W


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention through fused scaled_dot_product_attention."""

    def __init__(self, config: NeRDConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C); causal when mask is None, else `mask` (B, 1, T, T) bool, True = attend."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=-1)  # (B, T, C) x3
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)  # (B, H, T, D)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class Block(nn.Module):
    """Pre-LN GPT block: attention then a 4x GELU MLP, both residual."""

    def __init__(self, config: NeRDConfig):
        super().__init__()
        C = config.n_embd
        self.ln_1 = nn.LayerNorm(C, bias=False)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(C, bias=False)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C, bias=False), nn.GELU(), nn.Linear(4 * C, C, bias=False))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C)."""
        x = x + self.attn(self.ln_1(x), mask)  # (B, T, C)
        return x + self.mlp(self.ln_2(x))  # (B, T, C)


class NeRD(DynamicsModel):
    """Causal GPT over the last `window` frames: per-frame features -> per-frame prediction."""

    shared_cache = ("x", "count")  # the input window is the same for every member of an ensemble

    def __init__(self, config: NeRDConfig):
        super().__init__()
        self.config = config
        self.context = self.receptive_field = config.window  # absolute positions exist for `window` frames only
        C, W = config.n_embd, config.window
        self.embed = nn.Linear(config.input_dim, C, bias=False)
        self.wpe = nn.Embedding(W, C)  # learned absolute positions
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(C, bias=False)
        # published head: linear, then MLP [head_hidden] ReLU, then linear to the prediction
        self.head = nn.Sequential(
            nn.Linear(C, C),
            nn.Linear(C, config.head_hidden),
            nn.ReLU(),
            nn.Linear(config.head_hidden, config.output_dim),
        )
        self.register_buffer("slots", torch.arange(W), persistent=False)  # (W,)
        self.register_buffer("causal", torch.ones(W, W, dtype=torch.bool).tril(), persistent=False)  # (W, W)
        self.register_buffer("diag", torch.eye(W, dtype=torch.bool), persistent=False)  # (W, W)
        self.apply(self._init_weights)
        for block in self.blocks:  # residual projections scaled by depth (GPT-2)
            for w in (block.attn.c_proj.weight, block.mlp[2].weight):
                nn.init.normal_(w, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _hidden(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x (B, T, I), positions (T,) or (B, T), mask as in CausalSelfAttention -> final hidden states (B, T, C)."""
        h = self.embed(x) + self.wpe(pos)  # (B, T, C)
        for block in self.blocks:
            h = block(h, mask)  # (B, T, C)
        return self.ln_f(h)  # (B, T, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, input_dim) with T <= window -> (B, T, output_dim); frame t sits at position t."""
        T = x.shape[1]
        assert T <= self.config.window, f"sequence of {T} frames exceeds the window of {self.config.window}"
        return self.head(self._hidden(x, self.slots[:T], None))  # (B, T, O)

    def init_cache(
        self, batch_size: int, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> NeRDCache:
        """Empty histories for `batch_size` worlds (defaults: the model's device and dtype)."""
        p = next(self.parameters())
        device, dtype = device or p.device, dtype or p.dtype
        return NeRDCache(
            x=torch.zeros(batch_size, self.config.window, self.config.input_dim, device=device, dtype=dtype),
            count=torch.zeros(batch_size, device=device, dtype=torch.long),
        )

    def step(self, x_t: torch.Tensor, cache: NeRDCache) -> torch.Tensor:
        """Append x_t (B, input_dim) to the history, re-run the whole window -> (B, output_dim) at the newest frame."""
        W = self.config.window
        cache.x.copy_(cache.x.roll(-1, dims=1))  # (B, W, I) shift left by one frame
        cache.x[:, -1] = x_t
        cache.count.add_(1).clamp_(max=W)  # (B,)
        return self._newest(cache.x, cache.count)

    def step_functional(self, x_t: torch.Tensor, cache: NeRDCache) -> tuple[torch.Tensor, NeRDCache]:
        """`step` without writes: -> (B, output_dim) and a new cache (autograd runs through it)."""
        x = torch.cat([cache.x[:, 1:], x_t[:, None]], dim=1)  # (B, W, I)
        count = (cache.count + 1).clamp(max=self.config.window)  # (B,)
        return self._newest(x, count), NeRDCache(x=x, count=count)

    def _newest(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """The prediction (B, O) at the newest frame of histories x (B, W, I) holding `count` (B,) valid frames."""
        start = self.config.window - count  # (B,) first valid slot per world
        valid = self.slots[None] >= start[:, None]  # (B, W)
        pos = (self.slots[None] - start[:, None]).clamp(min=0)  # (B, W): valid frames at positions 0..count-1
        # causal, invalid keys hidden; the diagonal stays open so invalid query rows never see an all-masked row (NaN)
        mask = self.causal & (valid[:, None, :] | self.diag)  # (B, W, W)
        # only the newest frame's prediction is needed: the head runs on that position alone
        return self.head(self._hidden(x, pos, mask[:, None])[:, -1])  # (B, O)

    def reset_cache(self, cache: NeRDCache, world_ids: torch.Tensor) -> None:
        """Forget the history of `world_ids` only; other worlds are untouched."""
        cache.count[world_ids] = 0
        cache.x[world_ids] = 0  # (n, W, I)
