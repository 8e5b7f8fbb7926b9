"""Variable-contact encoder: any number of contact rows -> one embedding added to FlashNeRD's frame token.

A shared MLP encodes every row; M learned query slots attend over the encoded rows (empty rows masked out) and the
pooled slots, with log(1 + contact count), are projected to the model width. Each slot's softmax also sees a learned
"no contact" key whose value is zero, so a frame without contacts pools to exactly zero (no 0/0) and the output does
not depend on what the padded rows hold. Attention pooling is a weighted sum over rows, hence permutation-invariant.

Shapes: B batch, R rows, F row features, M slots, E encoder width, C model width.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


class ContactEncoder(nn.Module):
    """Rows (..., R, F) and mask (..., R) -> contact embedding (..., C)."""

    def __init__(self, row_dim: int, n_embd: int, slots: int = 4, width: int = 64):
        super().__init__()
        self.width = width
        self.row_mlp = nn.Sequential(nn.Linear(row_dim, width), nn.GELU(), nn.Linear(width, width))
        self.key, self.value = nn.Linear(width, width), nn.Linear(width, width)
        self.queries = nn.Parameter(torch.randn(slots, width) / math.sqrt(width))  # (M, E)
        self.null_logit = nn.Parameter(torch.zeros(slots))  # (M,) score of "no contact"
        self.out = nn.Linear(slots * width + 1, n_embd)

    def forward(self, rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if rows.device.type == "cpu" and not torch.compiler.is_compiling():
            # Masked rows contribute exactly nothing, so trailing rows empty in every frame of the batch are skipped
            # (the detector sorts rows nearest first: a planning batch with a few contacts each encodes a few rows,
            # not R). Reading the count is no device sync on the CPU; on a GPU, and in a compiled graph, every row is
            # encoded instead, so the step has no host sync and no graph break.
            used = mask.reshape(-1, mask.shape[-1]).any(dim=0).nonzero()  # (R_used, 1) rows real in some frame
            last = int(used[-1]) + 1 if len(used) else 1
            rows, mask = rows[..., :last, :], mask[..., :last]  # (..., R', F), (..., R')
        h = self.row_mlp(rows)  # (..., R', E)
        k, v = self.key(h), self.value(h)  # (..., R', E)
        scores = k @ self.queries.T / math.sqrt(self.width)  # (..., R', M)
        scores = scores.masked_fill(~mask[..., None], float("-inf")).transpose(-1, -2)  # (..., M, R')
        null = self.null_logit.expand(*scores.shape[:-1])[..., None]  # (..., M, 1)
        weights = torch.softmax(torch.cat((null, scores), dim=-1), dim=-1)[..., 1:]  # (..., M, R'); null value is 0
        pooled = weights @ v.masked_fill(~mask[..., None], 0.0)  # (..., M, E)
        count = torch.log1p(mask.sum(dim=-1, keepdim=True).to(rows))  # (..., 1)
        return self.out(torch.cat((pooled.flatten(-2), count), dim=-1))  # (..., C)
