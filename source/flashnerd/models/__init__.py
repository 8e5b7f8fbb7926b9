"""Learned dynamics models sharing one streaming interface: `config`, `forward`, `init_cache`, `step`, `reset_cache`."""

from __future__ import annotations

import dataclasses

import torch.nn as nn

from flashnerd.models.base import DynamicsModel
from flashnerd.models.ensemble import MAX_MEMBERS, Ensemble, EnsembleCache, disagreement
from flashnerd.models.flashnerd import FLASHNERD_SIZES, FlashNeRD, FlashNeRDCache, FlashNeRDConfig
from flashnerd.models.nerd import NERD_SIZES, NeRD, NeRDCache, NeRDConfig
from flashnerd.models.rwm import RWM, RWM_SIZES, RWMCache, RWMConfig

__all__ = [
    "DynamicsModel",
    "Ensemble",
    "EnsembleCache",
    "MAX_MEMBERS",
    "FLASHNERD_SIZES",
    "NERD_SIZES",
    "FlashNeRD",
    "FlashNeRDCache",
    "FLASHNERD_KIND",
    "FlashNeRDConfig",
    "MODEL_KINDS",
    "MODEL_LABELS",
    "NERD_KIND",
    "RWM_KIND",
    "NeRD",
    "NeRDCache",
    "NeRDConfig",
    "RWM",
    "RWMCache",
    "RWMConfig",
    "RWM_SIZES",
    "build_model",
    "disagreement",
    "model_sizes",
    "check_ensemble_shared",
    "num_params",
    "takes_contact_rows",
]

_MODELS = {
    "flashnerd": (FlashNeRD, FlashNeRDConfig, FLASHNERD_SIZES),
    "nerd": (NeRD, NeRDConfig, NERD_SIZES),
    "rwm": (RWM, RWMConfig, RWM_SIZES),
}
MODEL_KINDS: tuple[str, ...] = tuple(_MODELS)  # every learned model; each has a learned backend of the same name
FLASHNERD_KIND, NERD_KIND, RWM_KIND = MODEL_KINDS  # the streaming model, and the baselines it is compared with
MODEL_LABELS = {"flashnerd": "FlashNeRD", "nerd": "NeRD", "rwm": "RWM"}  # how plots and tables name them


def build_model(kind: str, input_dim: int, output_dim: int, size: str = "cpu", ensemble: int = 1,
                ensemble_shared: int = 0, **overrides) -> DynamicsModel:
    """Build a model of `kind` ('flashnerd', 'nerd' or 'rwm') from a size preset; kwargs override config fields.
    `ensemble` > 1 builds that many members (each initialized from the global RNG in turn) as one `Ensemble`, whose
    members share their frame embedding and first `ensemble_shared` blocks (FlashNeRD)."""
    if kind not in _MODELS:
        raise ValueError(f"unknown model '{kind}'; choose one of: {', '.join(_MODELS)}")
    model_cls, config_cls, sizes = _MODELS[kind]
    if size not in sizes:
        raise ValueError(f"unknown size '{size}' for {kind}; choose one of: {', '.join(sizes)}")
    if not 1 <= ensemble <= MAX_MEMBERS:
        raise ValueError(f"--ensemble must be 1 (one model) to {MAX_MEMBERS} members, got {ensemble}")
    if ensemble_shared and ensemble == 1:
        raise ValueError(f"--ensemble_shared {ensemble_shared} shares layers between ensemble members; give "
                         "--ensemble K (2 or more)")
    config = config_cls(input_dim=input_dim, output_dim=output_dim, **{**sizes[size], **overrides})
    if ensemble == 1:
        return model_cls(config)
    return Ensemble([model_cls(config) for _ in range(ensemble)], shared_layers=ensemble_shared)


def check_ensemble_shared(kind: str, size: str, ensemble: int, shared: int, model_flag: str = "--model") -> None:
    """One-line ValueError, before anything is built, for blocks shared by members no ensemble of `kind` at `size`
    can share: sharing needs FlashNeRD, K >= 2 members and 0 to the size's block count."""
    if shared and (ensemble == 1 or kind != FLASHNERD_KIND or shared < 0):
        raise ValueError(f"--ensemble_shared {shared} shares the first blocks of FlashNeRD ensemble members; it needs "
                         f"{model_flag} flashnerd and --ensemble K (2 or more), and a count >= 0")
    blocks = dict(_MODELS[kind][2].get(size, {})).get("n_layer", 0) if kind in _MODELS else 0
    if shared > blocks:
        raise ValueError(f"--ensemble_shared must be 0 to the model's {blocks} blocks, got {shared}")


def model_sizes(kind: str) -> tuple[str, ...]:
    """The size presets of models of `kind` (what `build_model`'s `size` takes)."""
    return tuple(_MODELS[kind][2]) if kind in _MODELS else ()


def takes_contact_rows(kind: str) -> bool:
    """Whether models of `kind` read variable contact rows (a `contact_rows` size in their config)."""
    return kind in _MODELS and "contact_rows" in {f.name for f in dataclasses.fields(_MODELS[kind][1])}


def num_params(model: nn.Module) -> int:
    """Number of parameters of `model`."""
    return sum(p.numel() for p in model.parameters())
