"""Dynamics-model checkpoints: model config, weights, normalizers, representation and the robot-model hash."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch

from flashnerd.models import build_model
from flashnerd.models.normalizer import Normalizer
from flashnerd.robots import RobotSpec

FORMAT = "flashnerd-dynamics"
FORMAT_VERSION = 1


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write through a temporary file and rename, so an interrupted save never leaves a torn checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"format": FORMAT, "format_version": FORMAT_VERSION, **payload}, tmp)
    os.replace(tmp, path)


def read_checkpoint(path: str | Path, robot: RobotSpec | None = None) -> dict[str, Any]:
    """Load and validate a checkpoint; foreign files, other robots and newer formats are one-line errors."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint '{path}' does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:
        raise ValueError(f"cannot read checkpoint '{path}' ({type(err).__name__}); it is corrupt or not a "
                         "torch file") from err
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"'{path}' is not a FlashNeRD dynamics checkpoint (write one with `flashnerd fit`)")
    if ckpt.get("format_version", 0) > FORMAT_VERSION:
        raise ValueError(f"checkpoint '{path}' has format version {ckpt['format_version']}, newer than this "
                         f"flashnerd ({FORMAT_VERSION}); upgrade flashnerd")
    if robot is not None:
        if ckpt.get("robot") != robot.name:
            raise ValueError(f"checkpoint '{path}' is for robot '{ckpt.get('robot')}', not '{robot.name}'")
        if ckpt.get("model_hash") != robot.model_hash():
            raise ValueError(f"checkpoint '{path}' was trained on another version of the '{robot.name}' model "
                             f"(hash {ckpt.get('model_hash')} != {robot.model_hash()}); fit it again")
    return ckpt


def model_from_checkpoint(ckpt: dict[str, Any], device: torch.device | str = "cpu"):
    """(model, input_normalizer, target_normalizer) rebuilt from a checkpoint dict, in eval mode on `device`."""
    cfg = dict(ckpt["model_config"])
    model = build_model(ckpt["kind"], **cfg)
    model.load_state_dict(ckpt["state_dict"])
    x_norm, y_norm = Normalizer(cfg["input_dim"]), Normalizer(cfg["output_dim"])
    x_norm.load_state_dict(ckpt["input_normalizer"])
    y_norm.load_state_dict(ckpt["target_normalizer"])
    return model.to(device).eval(), x_norm.to(device), y_norm.to(device)


def config_dict(config: Any) -> dict[str, Any]:
    """A plain dict of a model config dataclass (what `build_model` takes back)."""
    return dataclasses.asdict(config)


def export_for_inference(src: str | Path, dst: str | Path, metrics: dict | None = None,
                         extra: dict | None = None) -> dict[str, Any]:
    """Copy a fitting checkpoint without its optimizer and RNG state (what ships in checkpoints/), optionally with
    the accuracy measured by `flashnerd evaluate-model` (tests derive their tolerances from it) and `extra` fields."""
    ckpt = read_checkpoint(src)
    slim = {k: v for k, v in ckpt.items() if k not in ("optimizer", "rng", "format", "format_version")}
    if metrics is not None:
        slim["metrics"] = metrics
    slim.update(extra or {})
    save_checkpoint(dst, slim)
    return {"out": str(dst), "bytes": Path(dst).stat().st_size, "kind": ckpt["kind"], "step": ckpt["step"]}
