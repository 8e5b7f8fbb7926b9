"""Per-dimension input and target normalization of a learned model, stored with its weights."""

from __future__ import annotations

import torch
from torch import nn


class Normalizer(nn.Module):
    """Per-dimension mean/std fitted once on the training set; saved in the checkpoint's state_dict."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.eps = eps

    @torch.no_grad()
    def fit(self, x: torch.Tensor, identity_tail: int = 0) -> Normalizer:
        """Set mean and std from samples x (..., dim); constant dimensions keep std 1, and the last `identity_tail`
        dimensions (pre-scaled features) keep mean 0 and std 1."""
        flat = x.reshape(-1, x.shape[-1]).double()
        self.mean.copy_(flat.mean(0).float())
        std = flat.std(0).float()
        self.std.copy_(torch.where(std > self.eps, std, torch.ones_like(std)))
        if identity_tail:
            self.mean[-identity_tail:] = 0.0
            self.std[-identity_tail:] = 1.0
        return self

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.std + self.mean
