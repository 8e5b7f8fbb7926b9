"""Learned dynamics models sharing one streaming interface: `config`, `forward`, `init_cache`, `step`, `reset_cache`."""

from __future__ import annotations

import torch.nn as nn

from flashnerd.models.flashnerd import FLASHNERD_SIZES, FlashNeRD, FlashNeRDCache, FlashNeRDConfig
from flashnerd.models.nerd import NERD_SIZES, NeRD, NeRDCache, NeRDConfig

__all__ = [
    "FLASHNERD_SIZES",
    "NERD_SIZES",
    "FlashNeRD",
    "FlashNeRDCache",
    "FlashNeRDConfig",
    "NeRD",
    "NeRDCache",
    "NeRDConfig",
    "build_model",
    "num_params",
]

_MODELS = {
    "flashnerd": (FlashNeRD, FlashNeRDConfig, FLASHNERD_SIZES),
    "nerd": (NeRD, NeRDConfig, NERD_SIZES),
}


def build_model(kind: str, input_dim: int, output_dim: int, size: str = "cpu", **overrides) -> FlashNeRD | NeRD:
    """Build a model of `kind` ('flashnerd' or 'nerd') from a size preset, with config fields overridden by kwargs."""
    if kind not in _MODELS:
        raise ValueError(f"unknown model '{kind}'; choose one of: {', '.join(_MODELS)}")
    model_cls, config_cls, sizes = _MODELS[kind]
    if size not in sizes:
        raise ValueError(f"unknown size '{size}' for {kind}; choose one of: {', '.join(sizes)}")
    return model_cls(config_cls(input_dim=input_dim, output_dim=output_dim, **{**sizes[size], **overrides}))


def num_params(model: nn.Module) -> int:
    """Number of parameters of `model`."""
    return sum(p.numel() for p in model.parameters())
