"""Dynamics-model checkpoints: model config, weights, normalizers, representation and the robot-model hash.

A checkpoint is one safetensors file: every tensor of the payload is a safetensors entry, and the rest of the
payload (plain numbers, strings, lists and dicts) is JSON in the file's metadata, with each tensor replaced by a
reference to its entry. Reading one parses a fixed binary layout and JSON, so a file from a stranger runs no code.
Pickled checkpoints of format 1 are refused; `flashnerd convert-checkpoint` rewrites one, reading it with
`torch.load(weights_only=True)`, which also unpickles nothing but tensors and plain types.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from flashnerd.models import MAX_MEMBERS, MODEL_KINDS, build_model
from flashnerd.models.contact_head import MAX_HIDDEN, MAX_LAYERS, ContactHead, ContactHeadConfig
from flashnerd.models.normalizer import Normalizer
from flashnerd.robots import RobotSpec
from flashnerd.utils.atomic import atomic_path
from flashnerd.utils.hints import finite_number
from flashnerd.utils.host_memory import MAX_READ_FRACTION, available_host_bytes, fits_in_memory

FORMAT = "flashnerd-dynamics"
FORMAT_VERSION = 2  # 2: safetensors + JSON metadata; 1: a torch pickle (refused, convert it)
SUFFIX = ".safetensors"
_TENSOR, _INT_KEYS = "__tensor__", "__int_keys__"  # JSON markers of a tensor entry and of a dict with int keys
_PICKLE_MAGIC = (b"PK\x03\x04", b"\x80")  # torch's zip container, a bare pickle


class CheckpointError(ValueError):
    """A checkpoint that cannot be used, with a one-line reason."""


MAX_CONFIG_INT = 1 << 16  # no model size, window or row count of a real checkpoint comes near this
MAX_BUFFER_NUMEL = 1 << 27  # masks and tables a model builds itself (128M elements)
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # float8 has no isfinite, no matmul
MAX_MODEL_LAYERS = 256  # blocks per member: each is built as Python objects before any shape is compared
MAX_SHARED_LAYERS = 64  # layers an ensemble's members share: no model comes near this many
REQUIRED = {"kind": str, "model_config": dict, "state_dict": dict, "input_normalizer": dict,
            "target_normalizer": dict, "robot": str, "model_hash": str, "control_dt": float, "representation": dict}
# fields a checkpoint may lack (an exported one has no optimizer), of these types where present
OPTIONAL = {"robot_spec": str, "fit_config": dict, "optimizer": dict, "history": list, "data": dict, "metrics": dict}


def _encode(node: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON-able copy of `node` with each tensor moved into `tensors` under its path."""
    if isinstance(node, torch.Tensor):
        tensors[path] = node.detach().cpu().contiguous().clone()  # clone: safetensors refuses shared storage
        return {_TENSOR: path}
    if isinstance(node, dict):
        if node and all(isinstance(k, int) for k in node):  # optimizer state is keyed by parameter index
            return {_INT_KEYS: [[k, _encode(v, f"{path}/{k}", tensors)] for k, v in node.items()]}
        if not all(isinstance(k, str) for k in node):
            raise TypeError(f"checkpoint field '{path}' has keys that are neither all str nor all int")
        if set(node) in ({_TENSOR}, {_INT_KEYS}):  # it would read back as a tensor reference or an int-keyed dict
            raise CheckpointError(f"checkpoint field '{path or '/'}' is a mapping whose only key is "
                                  f"'{next(iter(node))}', which the checkpoint format reserves; rename that key")
        return {k: _encode(v, f"{path}/{k}", tensors) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_encode(v, f"{path}/{i}", tensors) for i, v in enumerate(node)]
    if isinstance(node, np.generic):
        return node.item()
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    raise TypeError(f"checkpoint field '{path}' is a {type(node).__name__}; only tensors and plain types are saved")


def _decode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of `_encode`; a reference to a missing tensor raises KeyError."""
    if isinstance(node, dict):
        if set(node) == {_TENSOR}:
            return tensors[node[_TENSOR]]
        if set(node) == {_INT_KEYS}:
            return {int(k): _decode(v, tensors) for k, v in node[_INT_KEYS]}
        return {k: _decode(v, tensors) for k, v in node.items()}
    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    return node


def plain(node: Any) -> Any:
    """`node` as it reads back from a checkpoint (tuples become lists), for comparing configs with saved ones."""
    return json.loads(json.dumps(_encode(node, "", {})))


def non_finite(node: Any, path: str = "") -> list[str]:
    """Paths (a.b.c) of every float in a nested dict/list that is NaN or infinite, in document order. Walked with a
    stack, not recursion: the JSON of a file from someone else may nest past Python's recursion limit."""
    found, todo = [], [(node, path)]
    while todo:
        node, path = todo.pop()
        if isinstance(node, float) and not math.isfinite(node):
            found.append(path or "value")
        elif isinstance(node, dict):
            todo.extend(reversed([(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()]))
        elif isinstance(node, (list, tuple)):
            todo.extend(reversed([(v, f"{path}[{i}]") for i, v in enumerate(node)]))
    return found


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write through a temporary file and rename, so an interrupted save never leaves a torn checkpoint."""
    path = Path(path)
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(payload, "", tensors)  # before any folder is made: a payload the format cannot hold leaves none
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "payload": json.dumps(tree)}
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata=meta)


def _refuse_pickle(path: Path) -> None:
    """After a file failed to parse as safetensors: say so if it is a torch pickle (a safetensors header length can
    start with the same byte as a pickle, so this is only asked of files that are not safetensors)."""
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(_PICKLE_MAGIC):
        raise CheckpointError(f"'{path}' is a pickled checkpoint (format 1), which could run code when read; "
                              f"convert it with `flashnerd convert-checkpoint {path}` (it reads tensors and plain "
                              "types only)")


def read_checkpoint(path: str | Path, robot: RobotSpec | None = None) -> dict[str, Any]:
    """Load and validate a checkpoint; foreign files, other robots and newer formats are one-line errors."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint '{path}' does not exist")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            if meta.get("format") != FORMAT:
                raise CheckpointError(f"'{path}' is not a FlashNeRD dynamics checkpoint (write one with "
                                      "`flashnerd fit`)")
            version = meta.get("format_version", "")
            if not version.isdigit():
                raise CheckpointError(f"checkpoint '{path}' is corrupt: format version '{version[:20]}'")
            if int(version) > FORMAT_VERSION:
                raise CheckpointError(f"checkpoint '{path}' has format version {version}, newer than this flashnerd "
                                      f"({FORMAT_VERSION}); upgrade flashnerd")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        ckpt = _decode(json.loads(meta["payload"]), tensors)
    except CheckpointError:
        raise
    except (SafetensorError, OSError, KeyError, TypeError, ValueError, AttributeError, RuntimeError,
            OverflowError) as err:
        if isinstance(err, SafetensorError):  # not safetensors at all: perhaps a pickle of format 1
            _refuse_pickle(path)
        raise CheckpointError(f"cannot read checkpoint '{path}' ({type(err).__name__}); it is corrupt or not a "
                              "FlashNeRD checkpoint") from err
    _check_fields(path, ckpt)
    if robot is not None:
        if ckpt["robot"] != robot.name:
            raise CheckpointError(f"checkpoint '{path}' is for robot '{ckpt['robot']}', not '{robot.name}'")
        if ckpt["model_hash"] != robot.model_hash():
            raise CheckpointError(f"checkpoint '{path}' was trained on another version of the '{robot.name}' model "
                                  f"(hash {ckpt['model_hash']} != {robot.model_hash()}); fit it again")
    return ckpt


def _check_fields(path: Path, ckpt: Any) -> None:
    """The fields every reader relies on exist with the right types, and no saved figure is non-finite."""
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its payload is not a mapping")
    for key, kind in REQUIRED.items():
        value = ckpt.get(key)
        if not isinstance(value, kind) and not (kind is float and isinstance(value, int)):
            raise CheckpointError(f"checkpoint '{path}' is corrupt: field '{key}' is missing or not a {kind.__name__}")
    if ckpt["kind"] not in MODEL_KINDS:
        raise CheckpointError(f"checkpoint '{path}' holds an unknown model kind '{ckpt['kind']}' "
                              f"(known: {', '.join(MODEL_KINDS)})")
    for key, kind in OPTIONAL.items():
        if key in ckpt and not isinstance(ckpt[key], kind):
            raise CheckpointError(f"checkpoint '{path}' is corrupt: field '{key}' is not a {kind.__name__}")
    rep = ckpt["representation"]
    if not isinstance(rep.get("layout"), dict) or not isinstance(rep.get("max_rows", 16), int) \
            or not 0 < rep.get("max_rows", 16) <= MAX_CONFIG_INT:
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its representation lacks a layout or has a bad "
                              "max_rows")
    members = ckpt.get("ensemble", 1)
    if isinstance(members, bool) or not isinstance(members, int) or not 1 <= members <= MAX_MEMBERS:
        raise CheckpointError(f"checkpoint '{path}' is corrupt: field 'ensemble' is {members!r}, not a member count "
                              f"from 1 to {MAX_MEMBERS}")
    shared = ckpt.get("ensemble_shared", 0)
    if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared <= MAX_SHARED_LAYERS:
        raise CheckpointError(f"checkpoint '{path}' is corrupt: field 'ensemble_shared' is {shared!r}, not a layer "
                              f"count from 0 to {MAX_SHARED_LAYERS}")
    for key in ("step", "train_seconds"):
        if key in ckpt and (isinstance(ckpt[key], bool) or not isinstance(ckpt[key], (int, float))
                            or not math.isfinite(ckpt[key]) or ckpt[key] < 0):
            raise CheckpointError(f"checkpoint '{path}' is corrupt: field '{key}' is not a number of at least 0")
    history = ckpt.get("history", [])
    if not all(isinstance(h, dict) and isinstance(h.get("val_loss"), (int, float)) for h in history):
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its history is not a list of validations (each with "
                              "a val_loss)")
    if not (math.isfinite(ckpt["control_dt"]) and ckpt["control_dt"] > 0):
        raise CheckpointError(f"checkpoint '{path}' is corrupt: control_dt {ckpt['control_dt']} is not a positive "
                              "number")
    head = ckpt.get("contact_head")
    if head is not None and not (isinstance(head, dict) and isinstance(head.get("config"), dict)
                                 and isinstance(head.get("state_dict"), dict) and isinstance(head.get("bodies"), list)
                                 and all(isinstance(b, str) for b in head["bodies"])):
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its contact_head lacks a config, weights or body "
                              "names")
    groups = [(g, ckpt[g]) for g in ("state_dict", "input_normalizer", "target_normalizer")]
    for group, tensors in groups + ([("contact_head.state_dict", head["state_dict"])] if head else []):
        for name, value in tensors.items():
            if not isinstance(name, str) or not isinstance(value, torch.Tensor) or not value.is_floating_point():
                raise CheckpointError(f"checkpoint '{path}' is corrupt: {group}.{name} is not a named float tensor")
            if value.dtype not in WEIGHT_DTYPES:
                raise CheckpointError(f"checkpoint '{path}' stores {group}.{name} as {value.dtype}; FlashNeRD "
                                      "checkpoints hold float16, bfloat16, float32 or float64 weights")
            if not bool(torch.isfinite(value).all()):
                raise CheckpointError(f"checkpoint '{path}' holds non-finite values in {group}.{name}; it cannot be "
                                      "used")
    for group in ("input_normalizer", "target_normalizer"):  # the model divides by the std: it must be positive
        std = ckpt[group].get("std")
        if isinstance(std, torch.Tensor) and not bool((std > 0).all()):
            raise CheckpointError(f"checkpoint '{path}' is corrupt: {group}.std holds values that are not positive")


def model_from_checkpoint(ckpt: dict[str, Any], device: torch.device | str = "cpu"):
    """(model, input_normalizer, target_normalizer) rebuilt from a checkpoint dict, in eval mode on `device`; a
    checkpoint with `ensemble` K > 1 holds an `Ensemble` of K members (weights with a leading member dimension).

    The model is first built on the meta device and its parameter shapes compared with the saved tensors, so a
    config that asks for a huge network allocates nothing and is a one-line error."""
    cfg = dict(ckpt["model_config"])
    big = [k for k, v in cfg.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
           and not (math.isfinite(v) and abs(v) <= MAX_CONFIG_INT)]
    if big:
        raise CheckpointError(f"checkpoint model config field '{big[0]}' = {cfg[big[0]]!r} is out of range")
    layers = cfg.get("n_layer", 1)
    if isinstance(layers, (int, float)) and layers > MAX_MODEL_LAYERS:  # every member's blocks are built first
        raise CheckpointError(f"checkpoint model config asks for {layers:g} layers (at most {MAX_MODEL_LAYERS}); the "
                              "file is corrupt")
    try:
        members, shared = ckpt.get("ensemble", 1), ckpt.get("ensemble_shared", 0)
        with torch.device("meta"):  # shapes only: nothing is allocated
            shell = build_model(ckpt["kind"], ensemble=members, ensemble_shared=shared, **cfg)
        dims = int(cfg["input_dim"]), int(cfg["output_dim"])
    except Exception as err:  # a crafted config fails in many ways (asserts, divisions by zero, bad shapes)
        raise CheckpointError(f"checkpoint model config does not build a {ckpt['kind']} model "
                              f"({type(err).__name__}: {str(err)[:100]})") from err
    buffers = sum(b.numel() for b in shell.buffers())  # non-persistent ones (masks) are not in the file
    if buffers > MAX_BUFFER_NUMEL:
        raise CheckpointError(f"checkpoint model config asks for {buffers:,} buffer elements; the file is corrupt")
    expected = {k: tuple(v.shape) for k, v in shell.state_dict().items()}
    saved = {k: tuple(v.shape) for k, v in ckpt["state_dict"].items()}
    if expected != saved:
        diff = sorted(set(expected.items()) ^ set(saved.items()), key=str)[:1]
        raise CheckpointError(f"checkpoint weights do not match its model config (first difference: {diff}); "
                              "the file is corrupt")
    model = build_model(ckpt["kind"], ensemble=members, ensemble_shared=shared, **cfg)
    model.load_state_dict(ckpt["state_dict"])
    x_norm, y_norm = Normalizer(dims[0]), Normalizer(dims[1])
    try:
        x_norm.load_state_dict(ckpt["input_normalizer"])
        y_norm.load_state_dict(ckpt["target_normalizer"])
    except RuntimeError as err:
        raise CheckpointError(f"checkpoint normalizers do not match its model ({str(err).splitlines()[0]})") from err
    return model.to(device).eval(), x_norm.to(device), y_norm.to(device)


ACTUATOR_FIELDS = ("kp", "kd", "effort_low", "effort_high")
# drive fields a checkpoint may add: the control steps its target lags by, its torque-speed line's no-load speed
DRIVE_FIELDS = {"lag": 0.0, "no_load_speed": float("inf")}
MAX_LAG = 2  # control steps: identification tries 0..MAX_LAG, a reader accepts the same


def actuators_from_checkpoint(ckpt: dict[str, Any], nu: int) -> dict[str, torch.Tensor] | None:
    """The identified actuators (kp, kd, effort_low, effort_high, lag, no_load_speed, each (nu,) float32) of a
    checkpoint, or None when it has none (the learned backend then uses the scene's). An entry written before the
    drive fields existed reads with lag 0 and no torque-speed line. Gains that are not finite numbers, one per
    actuator, limits that are NaN, crossed or infinite on their own side (a law that could only give infinite
    torque), a lag that is not a whole number of control steps in [0, MAX_LAG] or a no-load speed that is not positive
    are a one-line `CheckpointError`."""
    entry = ckpt.get("actuators")
    if entry is None:
        return None
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), torch.Tensor) for k in ACTUATOR_FIELDS):
        raise CheckpointError(f"checkpoint actuators entry lacks one of {', '.join(ACTUATOR_FIELDS)}; the file is "
                              "corrupt")
    found = {k: entry[k].float() for k in ACTUATOR_FIELDS}
    for k, default in DRIVE_FIELDS.items():
        value = entry.get(k)
        if value is not None and not isinstance(value, torch.Tensor):
            raise CheckpointError(f"checkpoint actuators entry '{k}' is not an array; the file is corrupt")
        found[k] = torch.full((nu,), default) if value is None else value.float()
    if any(v.shape != (nu,) for v in found.values()):
        raise CheckpointError(f"checkpoint actuators are for {tuple(found['kp'].shape)} actuators, the robot has {nu}; "
                              "the file is corrupt")
    if not (torch.isfinite(found["kp"]).all() and torch.isfinite(found["kd"]).all()
            and not torch.isnan(found["effort_low"]).any() and (found["effort_low"] <= found["effort_high"]).all()
            and (found["effort_low"] < float("inf")).all() and (found["effort_high"] > -float("inf")).all()):
        raise CheckpointError("checkpoint actuators hold non-finite gains or crossed torque limits; the file is "
                              "corrupt")
    lag, speed = found["lag"], found["no_load_speed"]
    if not (torch.isfinite(lag).all() and (lag == lag.round()).all() and (lag >= 0).all() and (lag <= MAX_LAG).all()
            and not torch.isnan(speed).any() and (speed > 0).all()
            and torch.isfinite(found["effort_low"][speed.isfinite()]).all()
            and torch.isfinite(found["effort_high"][speed.isfinite()]).all()):
        raise CheckpointError(f"checkpoint actuators hold a lag that is not a whole number of control steps in [0, "
                              f"{MAX_LAG}], a no-load speed that is not positive or one on an unlimited actuator; the "
                              "file is corrupt")
    return found


def contact_head_from_checkpoint(ckpt: dict[str, Any], bodies: tuple[str, ...],
                                 device: torch.device | str = "cpu") -> ContactHead | None:
    """The checkpoint's contact head (eval mode on `device`), or None when it has none. Its body names must be
    `bodies` (the robot's contact bodies, in order), its input the model's input, its config in range and its
    weights of the config's shapes; otherwise a one-line `CheckpointError`."""
    entry = ckpt.get("contact_head")
    if entry is None:
        return None
    if entry["bodies"] != list(bodies):
        raise CheckpointError(f"checkpoint contact head predicts bodies {entry['bodies'][:4]}..., the robot's "
                              f"contact bodies are {list(bodies)[:4]}...; fit its head again (flashnerd "
                              "fit-contact-head)")
    cfg = dict(entry["config"])
    names = {f.name for f in dataclasses.fields(ContactHeadConfig)}
    if set(cfg) - names or any(isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_CONFIG_INT
                               for v in cfg.values()) \
            or cfg.get("hidden", 1) > MAX_HIDDEN or cfg.get("layers", 1) > MAX_LAYERS:
        raise CheckpointError(f"checkpoint contact head config {str(cfg)[:120]} is not a contact head config "
                              f"(at most {MAX_LAYERS} layers of {MAX_HIDDEN})")
    if cfg.get("input_dim") != ckpt["model_config"].get("input_dim") or cfg.get("num_bodies") != len(bodies):
        raise CheckpointError("checkpoint contact head does not read the model's input frame or predict every "
                              "contact body; the file is corrupt")
    try:
        with torch.device("meta"):
            shell = ContactHead(ContactHeadConfig(**cfg))
    except TypeError as err:
        raise CheckpointError(f"checkpoint contact head config is incomplete ({err})") from err
    expected = {k: tuple(v.shape) for k, v in shell.state_dict().items()}
    if expected != {k: tuple(v.shape) for k, v in entry["state_dict"].items()}:
        raise CheckpointError("checkpoint contact head weights do not match its config; the file is corrupt")
    head = ContactHead(ContactHeadConfig(**cfg))
    head.load_state_dict(entry["state_dict"])
    return head.to(device).eval()


def config_dict(config: Any) -> dict[str, Any]:
    """A plain dict of a model config dataclass (what `build_model` takes back), as it reads back from a file."""
    return plain(dataclasses.asdict(config))


def export_for_inference(src: str | Path, dst: str | Path, metrics: dict | None = None,
                         extra: dict | None = None) -> dict[str, Any]:
    """Copy a fitting checkpoint without its optimizer and RNG state (what ships in checkpoints/), optionally with
    the accuracy measured by `flashnerd evaluate-model` (tests derive their tolerances from it) and `extra` fields.
    A metric that is not a finite number is refused: a model never ships with one."""
    ckpt = read_checkpoint(src)
    slim = {k: v for k, v in ckpt.items() if k not in ("optimizer", "rng")}
    if metrics is not None:
        bad = non_finite(metrics)
        if bad:
            raise CheckpointError(f"the measured {', '.join(bad)} of '{src}' is not finite; fix the model before "
                                  "exporting it")
        slim["metrics"] = metrics
    slim.update(extra or {})
    save_checkpoint(dst, slim)
    return {"out": str(dst), "bytes": Path(dst).stat().st_size, "kind": ckpt["kind"], "step": ckpt.get("step")}


def load_plain_pickle(path: str | Path, what: str, map_location: str | None = "cpu") -> Any:
    """A torch pickle read with `weights_only=True`: tensors and plain containers only. A pickle that asks to build
    any other object (which is how a crafted file runs code) is refused, a corrupt one reported, each in one line.
    So is one whose entries decompress to more than this machine's memory: torch writes its zip entries stored, but
    reads compressed ones too, and a few hundred KB of deflated zeros declare gigabytes."""
    declared = _zip_declared_bytes(path)
    if declared is not None and not fits_in_memory(declared):
        raise CheckpointError(f"refusing to load {what} '{path}': its entries decompress to {declared / 2**20:,.0f} "
                              "MiB, more than this machine's memory holds; it is corrupt or not a checkpoint")
    free = available_host_bytes()  # before the load takes its share: the copies are judged against the same memory
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols; the error below says it all
            warnings.simplefilter("ignore")
            loaded = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL (\S+)", str(err))  # torch names the global it refused to import
        if found:
            raise CheckpointError(f"refusing to load {what} '{path}': it asks to build the Python object "
                                  f"{found.group(1)} (only tensors and plain types are read), which could run "
                                  "code") from err
        raise CheckpointError(f"cannot read {what} '{path}': it is corrupt, not a torch file, or a pickle kind "
                              "that only an unsafe load would read") from err
    except Exception as err:  # zip, EOF and header errors of corrupt files come in many types
        first = (str(err).strip().splitlines() or [""])[0][:120]
        raise CheckpointError(f"cannot read {what} '{path}' ({type(err).__name__}: {first}); it is corrupt or not "
                              "a torch file") from err
    _check_pickled_tree(loaded, f"{what} '{path}'", max(MAX_PICKLED_VALUES, Path(path).stat().st_size), free)
    return loaded


MAX_PICKLED_VALUES = 1 << 18  # values in a pickled checkpoint beyond one per byte of its file, a shared one counted
# each time it appears (a PPO checkpoint holds a few thousand)
MAX_PICKLED_DEPTH = 64  # nesting of its containers


def _check_pickled_tree(root: Any, what: str, max_values: int, free: int) -> None:
    """Refuse, in one line, what a few KB of pickle can declare and the readers after it would blow up: a container
    referenced so often that copying the tree multiplies it (pickle's memo lets a file name one list twice at every
    level: 2^k leaves from k lines; an unshared value takes at least a byte of the file, so `max_values` bounds only
    the sharing), nesting deeper than any checkpoint, a tensor that is not a plain strided one or whose strides
    overlap (one stored number repeated to terabytes by a zero stride), and tensors whose copies exceed
    `MAX_READ_FRACTION` of the `free` host memory (measured before the load)."""
    stack, count, tensor_bytes = [(root, 0)], 0, 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > max_values:
            raise CheckpointError(f"refusing {what}: it holds more than {max_values:,} values, counting a shared one "
                                  "each time it appears (a file of repeated references); it is corrupt or not a "
                                  "checkpoint")
        if depth > MAX_PICKLED_DEPTH:
            raise CheckpointError(f"refusing {what}: its containers nest more than {MAX_PICKLED_DEPTH} deep; it is "
                                  "corrupt or not a checkpoint")
        if isinstance(node, torch.Tensor):
            if node.layout != torch.strided:
                raise CheckpointError(f"refusing {what}: a tensor of layout {node.layout} (weights and optimizer "
                                      "states are dense); it is corrupt or crafted")
            size = node.numel() * node.element_size()
            if size > node.untyped_storage().nbytes():
                raise CheckpointError(f"refusing {what}: a tensor of shape {tuple(node.shape)} repeats its "
                                      f"{node.untyped_storage().nbytes()} stored bytes by overlapping strides "
                                      f"{node.stride()} (no weight or optimizer state is such a view); it is "
                                      "corrupt or crafted")
            tensor_bytes += size
        elif isinstance(node, dict):
            stack.extend((x, depth + 1) for kv in node.items() for x in kv)
        elif isinstance(node, list | tuple | set | frozenset):
            stack.extend((x, depth + 1) for x in node)
    if tensor_bytes > MAX_READ_FRACTION * free:
        raise CheckpointError(f"refusing {what}: its tensors take {tensor_bytes / 2**20:,.0f} MiB once copied, more "
                              "than this machine's memory holds")


def _zip_declared_bytes(path: str | Path) -> int | None:
    """What the entries of a torch zip file decompress to, as its central directory declares (None: not a zip, such
    as torch's legacy format, which is read as it lies on disk)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None


# optimizer settings that pick how a step runs, not what it computes: a file's value would fail at the first step
OPTIMIZER_MODES = ("capturable", "fused", "differentiable")


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: Any, what: str) -> None:
    """Load `state` (read from the file `what` names) into `optimizer`, then `check_optimizer_state`; a state of
    another optimizer or model is a one-line `CheckpointError`, not a traceback at the first step."""
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RuntimeError) as err:
        raise CheckpointError(f"{what} holds an optimizer state that does not fit this model ({type(err).__name__}: "
                              f"{(str(err).strip().splitlines() or [''])[0][:100]}); it is corrupt or of another "
                              "model") from err
    check_optimizer_state(optimizer, what)


def check_optimizer_state(optimizer: torch.optim.Optimizer, what: str) -> None:
    """After `optimizer.load_state_dict` (which checks neither): numeric settings are finite numbers, flags are flags
    and those of `OPTIMIZER_MODES` the ones this process built the optimizer with; each parameter's state is
    a mapping whose moments are finite tensors of its parameter's shape and whose `step` is a finite count, with
    exactly the entries Adam keeps. Otherwise a one-line `CheckpointError` naming `what`, the file it came from (not
    a traceback at the first step)."""
    def like(key: str, value: Any, default: Any) -> bool:
        if key in OPTIMIZER_MODES:  # how the step runs (on which device, through which kernel): this process's
            return value == default
        if isinstance(default, bool):
            return isinstance(value, bool)
        if finite_number(default):
            return finite_number(value)
        if isinstance(default, tuple):  # Adam's betas (a list once read back from JSON)
            return isinstance(value, (list, tuple)) and len(value) == len(default) and all(map(finite_number, value))
        return True

    def refuse(detail: str) -> None:
        raise CheckpointError(f"{what} holds {detail}; it is corrupt or of another model")

    adam = isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))
    for i, group in enumerate(optimizer.param_groups):
        for key, default in optimizer.defaults.items():
            if not like(key, group.get(key, default), default):
                refuse(f"an optimizer setting {key}={str(group.get(key))[:40]} in group {i}")
        expected = {"step", "exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if group.get("amsgrad") else ())}
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            if not isinstance(state, dict):
                refuse(f"an optimizer state of type {type(state).__name__} for a parameter")
            if adam and state and set(state) != expected:
                refuse(f"an optimizer state with entries {sorted(map(str, state))[:5]}, not Adam's {sorted(expected)}")
            for key, value in state.items():
                if key == "step":
                    count = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
                    if not (finite_number(count) and count >= 0):
                        refuse(f"an optimizer step count {str(value)[:40]}")
                    continue
                if not isinstance(value, torch.Tensor) or value.shape != param.shape:
                    shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                    refuse(f"an optimizer {key} of shape {shape} for a parameter of shape {tuple(param.shape)}")
                if not bool(torch.isfinite(value).all()):
                    raise CheckpointError(f"{what} holds non-finite values in its optimizer {key}; it is corrupt")


def convert_pickled(src: str | Path, dst: str | Path) -> dict[str, Any]:
    """Rewrite a format-1 (pickled) checkpoint as safetensors. The pickle is read with `weights_only=True`, which
    builds nothing but tensors and plain containers; a file that needs more is refused."""
    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise FileNotFoundError(f"checkpoint '{src}' does not exist")
    ckpt = load_plain_pickle(src, "checkpoint")
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT or ckpt.get("format_version") != 1:
        raise CheckpointError(f"'{src}' is not a format-1 FlashNeRD dynamics checkpoint")
    payload = {k: v for k, v in ckpt.items() if k not in ("format", "format_version")}
    _check_fields(src, payload)
    try:
        save_checkpoint(dst, payload)
    except TypeError as err:  # a value that is neither a tensor nor a plain type (a dtype, mixed keys)
        raise CheckpointError(f"cannot convert '{src}': {err}") from err
    read_checkpoint(dst)  # what was written reads back
    return {"out": str(dst), "bytes": dst.stat().st_size, "kind": payload["kind"]}
