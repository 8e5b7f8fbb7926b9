"""Learned `Dynamics` backends (`flashnerd`, `nerd`): one batched model call per control step.

The model predicts the state increment from the robot-centric frame (state, joint-target error, and contact features
computed from the *predicted* state: fixed ground probes, or variable contact rows against the scene's terrain, as the
checkpoint was fitted); caches are preallocated and reset per world. The contact summary for rewards and terminations
comes from the checkpoint's contact head (trained on the recorded contact sensors, for every contact body) where it
has one, and otherwise from a penetration-based estimate of the probe spheres (against the ground, or the nearest
terrain surface in rows mode; bodies without probes then never touch).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.utils.checkpoint

from flashnerd.contacts import contact_features
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.models import Ensemble, disagreement
from flashnerd.models.checkpoint import (
    SUFFIX,
    actuators_from_checkpoint,
    contact_head_from_checkpoint,
    model_from_checkpoint,
    read_checkpoint,
)
from flashnerd.robots import RobotSpec
from flashnerd.sim.scene import actuator_ctrl_limits, build_scene, default_qpos, pd_torque, position_actuators
from flashnerd.types import RobotState, actuated_columns
from flashnerd.utils.host_memory import MAX_READ_FRACTION, available_bytes

# Shipped checkpoints live in the repository's checkpoints/ folder (editable installs); FLASHNERD_CHECKPOINTS
# points elsewhere, e.g. for a copy of that folder next to a non-editable install.
CHECKPOINT_DIR = Path(os.environ.get("FLASHNERD_CHECKPOINTS", Path(__file__).resolve().parents[3] / "checkpoints"))
CONTACT_STIFFNESS = 2.0e4  # N/m: penetration -> force estimate (about body weight at a few millimetres)
MEMBER_MODES = ("mean", "step", "episode")  # how an ensemble's predictions move the worlds (LearnedConfig.members)
CONTACT_MARGIN = 0.002  # m: a probe this close to the ground counts as touching (MuJoCo's soft contact sinks ~mm)


def default_checkpoint(robot: RobotSpec, kind: str, terrain: str = "flat") -> Path:
    """Where the shipped checkpoint of `kind` for `robot` lives: checkpoints/<robot>/<kind>_<terrain>.safetensors
    when one was fitted on that terrain (e.g. `flashnerd_rough`), else checkpoints/<robot>/<kind>.safetensors."""
    folder = CHECKPOINT_DIR / robot.name
    on_terrain = folder / f"{kind}_{terrain}{SUFFIX}"
    return on_terrain if terrain != "flat" and on_terrain.is_file() else folder / f"{kind}{SUFFIX}"


def probe_owner(robot: RobotSpec, device: str | torch.device = "cpu") -> torch.Tensor:
    """(P, nb) one-hot: which contact body of the contact summary each probe belongs to (probes on other bodies are
    ignored)."""
    bodies = list(robot.all_contact_bodies)
    owner = torch.zeros(len(robot.probes), len(bodies), device=device)  # (P, nb)
    for i, p in enumerate(robot.probes):
        if p.body in bodies:
            owner[i, bodies.index(p.body)] = 1.0
    return owner


@dataclass(frozen=True)
class LearnedConfig:
    """Options of the learned backends (`flashnerd`, `nerd`, `rwm`)."""

    # a `flashnerd fit` checkpoint (default: the robot's shipped one, the one fitted on the scene's terrain if any)
    checkpoint: str | Path | None = None
    # torch.compile the element-wise work of a step (contact features, the input frame, the integration of the
    # increment and the torque, a FlashNeRD's streaming attention; not the matrix products): planning makes many
    # steps at one batch size, launch-bound on a CPU
    compile: bool = False
    # With an ensemble checkpoint, which prediction moves each world: "mean" of the members, a random member per
    # world redrawn every "step", or one per world kept for its "episode" (redrawn at reset), as PETS samples.
    members: str = "mean"
    # Keep the autograd graph through the steps (a differentiable rollout: SHAC, gradient-refined planning): states
    # and caches are then replaced, never written in place, and `detach()` cuts the graph. Off: the fast path.
    differentiable: bool = False
    # With `differentiable`: keep only each model step's inputs and outputs and recompute its activations in the
    # backward pass (activation checkpointing): less memory for long rollouts of many worlds, one more model forward.
    grad_checkpoint: bool = False


def _check_cache_memory(network, num_worlds: int, device: torch.device, path) -> None:
    """One-line error before the model's per-world state (its window, KV ring buffers or recurrent state) is built,
    where `num_worlds` of it would not fit in memory: a checkpoint's config sizes it (a span of 65,536 frames is
    256 MiB a world), and the env's memory check assumes a small per-world share."""
    todo, per_world = [network.init_cache(1, device=device)], 0
    while todo:  # the cache dataclass (an ensemble's holds its member's in `inner`)
        node = todo.pop()
        if isinstance(node, torch.Tensor):
            per_world += node.numel() * node.element_size()
        elif dataclasses.is_dataclass(node):
            todo.extend(getattr(node, f.name) for f in dataclasses.fields(node))
    free = available_bytes(device)
    need = num_worlds * per_world
    if need > MAX_READ_FRACTION * free:
        raise ValueError(f"the model of '{path}' keeps {per_world / 2**20:,.1f} MiB of state per world (its window or "
                         f"cache, sized by its config); {num_worlds:,} worlds need {need / 2**30:,.1f} GiB, more than "
                         f"{MAX_READ_FRACTION:.0%} of the {free / 2**30:,.1f} GiB free; use at most "
                         f"{int(MAX_READ_FRACTION * free // max(per_world, 1)):,} worlds")


class LearnedDynamics:
    """A learned model of `kind` stepping `num_worlds` worlds of `robot` behind the `Dynamics` interface.

    Besides the seam it exposes what model-level tools need: `network` (the `nn.Module`), `rep` (its state
    representation), `checkpoint_path`, and `set_state` / `reset_history` for a solver that resolves the state
    between model steps (two-way coupling). With `differentiable` the states it reports carry gradients with respect
    to the controls (and to every earlier state) until `detach()`."""

    def __init__(self, robot: RobotSpec, num_worlds: int, device: str | torch.device = "cpu", terrain: str = "flat",
                 config: LearnedConfig | None = None, kind: str = "flashnerd") -> None:
        config = config or LearnedConfig()
        robot = robot.without_ranges()  # a model has no masses to draw: its scene is the variant's fixed robot
        self.robot, self.num_worlds, self.device = robot, num_worlds, torch.device(device)
        self.control_dt = robot.control_dt
        path = Path(config.checkpoint) if config.checkpoint else default_checkpoint(robot, kind, terrain)
        if not config.checkpoint and not path.is_file():  # a user's robot, or a kind the package ships none of
            raise FileNotFoundError(f"no '{kind}' model of robot '{robot.name}' is shipped (looked for '{path}'); fit "
                                    f"one (flashnerd record --robot ... then flashnerd fit --model {kind} ...) and "
                                    "pass its checkpoint (--dynamics_checkpoint PATH)")
        ckpt = read_checkpoint(path, robot)
        if ckpt["kind"] != kind:
            raise ValueError(f"checkpoint '{path}' holds a '{ckpt['kind']}' model; the '{kind}' backend needs a "
                             f"'{kind}' checkpoint")
        if abs(ckpt["control_dt"] - robot.control_dt) > 1e-9:
            raise ValueError(f"checkpoint '{path}' was fitted at control dt {ckpt['control_dt']}, the robot steps at "
                             f"{robot.control_dt}")
        self.network, self.x_norm, self.y_norm = model_from_checkpoint(ckpt, self.device)
        self.model_kind = kind
        self.checkpoint_path = path
        self.scene = build_scene(robot, terrain)
        rep_info = ckpt["representation"]
        # fixed probes see the ground plane only; variable rows see this scene's terrain, whatever it was fitted on
        self.contact_mode = rep_info.get("contact", "probes")
        self.probes = contact_features(robot, self.scene, self.device, mode=self.contact_mode,
                                       max_rows=rep_info.get("max_rows", 16), compile=config.compile)
        self._compiled = config.compile
        if config.compile and hasattr(self.network, "compile_streaming"):  # a single FlashNeRD, not an ensemble
            self.network.compile_streaming()
        # the fast (no-grad) path's frame and integration: a few fused loops instead of ~60 small ops when compiled
        self._inputs_fast = torch.compile(self._inputs, dynamic=False) if config.compile else self._inputs
        self._integrate_fast = torch.compile(self._integrate, dynamic=False) if config.compile else self._integrate
        self.rep = StateRepresentation.for_robot(robot, self.scene, self.probes.dim)
        if rep_info["layout"] != self.rep.layout():
            raise ValueError(f"checkpoint '{path}' uses another state layout than this flashnerd; fit it again")
        self.nq, self.nv, self.nu = self.scene.nq, self.scene.nv, self.scene.nu
        self._joint_columns = actuated_columns(self.scene, robot.floating_base, self.nq, self.nv, self.device)
        _check_cache_memory(self.network, num_worlds, self.device, path)
        self.cache = self.network.init_cache(num_worlds, device=self.device)
        self.num_members = self.network.num_members if isinstance(self.network, Ensemble) else 1
        if config.members not in MEMBER_MODES:
            raise ValueError(f"unknown members mode '{config.members}'; choose one of: {', '.join(MEMBER_MODES)}")
        if config.members != "mean" and self.num_members == 1:
            raise ValueError(f"members='{config.members}' samples ensemble members, and '{path}' holds one model; "
                             "fit an ensemble with `flashnerd fit --ensemble K`")
        self.members_mode = config.members
        self.differentiable = config.differentiable
        if config.grad_checkpoint and not config.differentiable:
            raise ValueError("grad_checkpoint recomputes the activations of a differentiable rollout; set "
                             "differentiable=True as well, or drop it")
        self.grad_checkpoint = config.grad_checkpoint
        seed = int(torch.randint(0, 2**62, (1,)))  # member draws follow the global seed (the env sets it)
        self._member_gen = torch.Generator(device=self.device).manual_seed(seed)
        self._member = torch.randint(0, self.num_members, (num_worlds,), device=self.device,
                                     generator=self._member_gen)  # (N,) the member moving each world
        self._worlds = torch.arange(num_worlds, device=self.device)  # (N,)

        self._probe_owner = probe_owner(robot, self.device)  # (P, nb)
        self._nb = len(robot.all_contact_bodies)
        self.contact_head = contact_head_from_checkpoint(ckpt, robot.all_contact_bodies, self.device)
        # the PD law of the torque it reports: the logged robot's identified one where fitted, else the scene's
        # (limits per actuator, as MuJoCo clamps, may be uneven)
        law = actuators_from_checkpoint(ckpt, self.nu) or position_actuators(self.scene)
        self._law = {k: torch.as_tensor(law[k], dtype=torch.float32, device=self.device)
                     for k in ("kp", "kd", "effort_low", "effort_high", "no_load_speed") if k in law}  # (nu,) each
        if "no_load_speed" in self._law and not bool(torch.isfinite(self._law["no_load_speed"]).any()):
            del self._law["no_load_speed"]  # no line anywhere: the plain clamp, one product less per step
        # an identified drive lag: the torque reads the target sent `lag` control steps earlier, from `_past`
        lag = torch.as_tensor(law.get("lag", np.zeros(self.nu)), device=self.device).long()  # (nu,)
        self._lag = lag if bool((lag > 0).any()) else None
        # MuJoCo clamps each target to its actuator's ctrlrange (+-inf where unlimited); the model sees the same target
        ctrl_range = torch.as_tensor(actuator_ctrl_limits(self.scene), dtype=torch.float32, device=self.device)
        self._ctrl_low, self._ctrl_high = ctrl_range[:, 0], ctrl_range[:, 1]  # (nu,), (nu,)

        f32 = dict(dtype=torch.float32, device=self.device)
        q0 = torch.as_tensor(self.default_qpos(), **f32)
        self._qpos = q0.repeat(num_worlds, 1)  # (N, nq)
        self._qvel = torch.zeros(num_worlds, self.nv, **f32)  # (N, nv)
        self._torque = torch.zeros(num_worlds, self.nu, **f32)  # (N, nu)
        # the control of the last step (the contact head reads the end-of-step frame under it); a reset world's is
        # its joint positions, a frame without target error
        self._ctrl = self.rep.actuated_pos(self._qpos).clone()  # (N, nu)
        self.rep.actuated_vel(self._qvel)  # its index reaches the device now, not inside the first compiled step
        # the targets of the last max(lag) steps, newest first (only with a lagged law); a reset world's are the
        # default joint positions, as in the analytical backends' target history after a reset
        self._rest_target = self.rep.actuated_pos(q0[None])[0]  # (nu,)
        self._past = None if self._lag is None else self._rest_target.repeat(num_worlds, int(self._lag.max()), 1)
        self._torque_phase = (robot.decimation - 1) / robot.decimation
        self._contact = torch.zeros(num_worlds, self._nb, **f32)  # (N, nb)
        self._disagreement = torch.zeros(num_worlds, **f32) if self.num_members > 1 else None  # (N,)
        self._rebind_state()
        self._refresh_contacts()

    def default_qpos(self) -> np.ndarray:
        """The standing configuration (same as the analytical backend's)."""
        return default_qpos(self.robot, self.scene)

    def reset(self, world_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Write the state of `world_ids` and forget their history only."""
        ids = world_ids.to(self.device)
        self._own_buffers()
        self._qpos[ids] = qpos.to(self._qpos)
        self._qvel[ids] = qvel.to(self._qvel)
        self._torque[ids] = 0.0
        self._ctrl[ids] = self.rep.actuated_pos(self._qpos[ids])
        if self._past is not None:
            self._past[ids] = self._rest_target
        self.network.reset_cache(self.cache, ids)
        if self._disagreement is not None:
            self._disagreement[ids] = 0.0
            if self.members_mode == "episode":
                self._member[ids] = torch.randint(0, self.num_members, ids.shape, device=self.device,
                                                  generator=self._member_gen)
        self._refresh_contacts(ids)

    def set_qvel(self, world_ids: torch.Tensor, qvel: torch.Tensor) -> None:
        """Change velocities (a push) keeping the history."""
        self._own_buffers()
        ids = world_ids.to(self.device)
        self._qvel[ids] = qvel.to(self._qvel)
        self._refresh_contacts(ids)  # contact rows carry velocities

    def set_state(self, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Overwrite every world's state (N, nq), (N, nv) keeping the history: the next step starts from it."""
        self._own_buffers()
        self._qpos.copy_(qpos)
        self._qvel.copy_(qvel)
        self._refresh_contacts()

    def reset_history(self, world_ids: torch.Tensor) -> None:
        """Forget the history of `world_ids` (k,) only, keeping their state: the model's past frames and the drives'
        past targets (the default pose, as after `reset`)."""
        self._own_buffers()
        ids = world_ids.to(self.device)
        self.network.reset_cache(self.cache, ids)
        if self._past is not None:
            self._past[ids] = self._rest_target

    def step(self, ctrl: torch.Tensor) -> None:
        """One model call for all worlds: frame features -> normalized increment -> next state. Targets outside an
        actuator's ctrlrange are clamped to it, as MuJoCo does (and as recorded data was)."""
        ctrl = torch.clamp(ctrl.to(self._qpos), self._ctrl_low, self._ctrl_high)  # (N, nu)
        if self.differentiable:
            # the functional step: new caches and states, the graph from ctrl and the earlier states kept
            if self.grad_checkpoint:
                pred, self.cache = torch.utils.checkpoint.checkpoint(self.network.step_functional, self._frame(ctrl),
                                                                     self.cache, use_reentrant=False,
                                                                     preserve_rng_state=False)  # nothing random
            else:
                pred, self.cache = self.network.step_functional(self._frame(ctrl), self.cache)
            self._qpos, self._qvel, self._torque = self._advance(ctrl, pred)
            self._ctrl = ctrl
            self._remember(ctrl)
            self._rebind_state()
        else:
            with torch.no_grad():
                x = self._inputs_fast(self._qpos, self._qvel, ctrl, self._features)  # (N, I)
                delta = self._combine(self.network.step(x, self.cache))  # (N, O) normalized
                qpos, qvel, torque = self._integrate_fast(self._qpos, self._qvel, ctrl, delta, self._past)
                self._torque.copy_(torque)
                self._qpos.copy_(qpos)
                self._qvel.copy_(qvel)
                self._ctrl.copy_(ctrl)
                self._remember(ctrl)
        self._refresh_contacts()

    def _frame(self, ctrl: torch.Tensor) -> torch.Tensor:
        """The normalized model input (N, I) of the current state under control ctrl (N, nu); the contact features
        (N, P*8) probes or (N, R*(F+1)) packed rows are those of the current state, from `_refresh_contacts`."""
        return self._inputs(self._qpos, self._qvel, ctrl, self._features)  # (N, I)

    def _inputs(self, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor,
                features: torch.Tensor) -> torch.Tensor:
        """The normalized model input (N, I) of state qpos (N, nq), qvel (N, nv) under ctrl (N, nu) with contact
        features (N, dim); a function of its arguments only, so that it compiles to one graph."""
        return self.x_norm.normalize(self.rep.inputs(qpos, qvel, ctrl, features))  # (N, I)

    def _advance(self, ctrl: torch.Tensor, pred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The next qpos (N, nq), qvel (N, nv) and the PD torque (N, nu) from the model's prediction."""
        return self._integrate(self._qpos, self._qvel, ctrl, self._combine(pred), self._past)

    def _integrate(self, qpos0: torch.Tensor, qvel0: torch.Tensor, ctrl: torch.Tensor, delta: torch.Tensor,
                   past: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The next qpos (N, nq), qvel (N, nv) and PD torque (N, nu) from the state qpos0, qvel0, the normalized
        increment delta (N, O) and, under a lag, the past targets (N, max lag, nu); of its arguments only."""
        qpos, qvel = self.rep.apply(qpos0, qvel0, self.y_norm.denormalize(delta))  # (N, nq), (N, nv)
        # PD torque where the analytical backend reports it: at its last substep, (dec-1)/dec of the way from this
        # state to the next. The start-of-step torque overstates sum(tau^2) by 1.9x on walking data (measured), and
        # a torque penalty built on it would push policies trained on the model towards standing still.
        a = self._torque_phase
        rep = self.rep
        joint_pos = torch.lerp(rep.actuated_pos(qpos0), rep.actuated_pos(qpos), a)  # (N, nu)
        joint_vel = torch.lerp(rep.actuated_vel(qvel0), rep.actuated_vel(qvel), a)  # (N, nu)
        error = self._target_in_effect(ctrl, past) - joint_pos  # (N, nu)
        return qpos, qvel, pd_torque(self._law, error, joint_vel)  # (N, nu) torque

    def _target_in_effect(self, ctrl: torch.Tensor, past: torch.Tensor | None) -> torch.Tensor:
        """The target (N, nu) each actuator's drive holds at the last substep: this step's ctrl, or under an
        identified lag the one sent that many steps earlier (from the past targets (N, max lag, nu))."""
        if self._lag is None:
            return ctrl
        targets = torch.cat([ctrl[:, None], past], dim=1)  # (N, 1 + max lag, nu) newest first
        index = self._lag[None, None, :].expand(ctrl.shape[0], 1, -1)  # (N, 1, nu)
        return targets.gather(1, index)[:, 0]  # (N, nu)

    def _remember(self, ctrl: torch.Tensor) -> None:
        """Push this step's targets (N, nu) into the lag history: replaced in differentiable mode (a rollout's earlier
        torques keep the targets they read), else written in place (a buffer made inside `torch.inference_mode`, as
        rsl_rl's rollouts step, could not take a reset's write outside it)."""
        if self._past is None:
            return
        pushed = torch.cat([ctrl[:, None], self._past[:, :-1]], dim=1)  # (N, max lag, nu) newest first
        if self.differentiable:
            self._past = pushed
        else:
            self._past.copy_(pushed)

    def detach(self) -> None:
        """Cut the autograd graph: the current states and caches keep their values and forget how they were made
        (truncated backpropagation between differentiable rollouts)."""
        self._qpos, self._qvel, self._torque, self._ctrl = (t.detach() for t in
                                                            (self._qpos, self._qvel, self._torque, self._ctrl))
        self._past = None if self._past is None else self._past.detach()
        self._features = self._features.detach()
        if self._disagreement is not None:
            self._disagreement = self._disagreement.detach()
        _map_cache(self.cache, torch.Tensor.detach)
        self._rebind_state()

    def to_dtype(self, dtype: torch.dtype) -> LearnedDynamics:
        """Every floating tensor of the backend (the network, normalizers, contact geometry, states, caches) cast to
        `dtype`, e.g. float64 for finite-difference checks of gradients; returns self."""
        _cast_floats(self, dtype, set())
        self._rebind_state()
        return self

    def _own_buffers(self) -> None:
        """Before an in-place write in differentiable mode: fresh copies of the states and caches, so that the
        values earlier steps saved for the backward pass stay as they were."""
        if not self.differentiable:
            return
        self._qpos, self._qvel, self._torque, self._ctrl = (t.clone() for t in
                                                            (self._qpos, self._qvel, self._torque, self._ctrl))
        self._past = None if self._past is None else self._past.clone()
        if self._disagreement is not None:
            self._disagreement = self._disagreement.clone()
        _map_cache(self.cache, torch.Tensor.clone)
        self._rebind_state()

    def _rebind_state(self) -> None:
        """The reported `RobotState` on the current tensors (replaced, not written, in differentiable mode)."""
        self._state = RobotState(self._qpos, self._qvel, self._torque, self._contact, self.robot.floating_base,
                                 self._disagreement, **self._joint_columns)

    def _combine(self, pred: torch.Tensor) -> torch.Tensor:
        """The normalized increment (N, O) that moves each world: the model's, or from an ensemble's (K, N, O) the
        members' mean or each world's drawn member; records the members' disagreement."""
        if self.num_members == 1:
            return pred
        if self.differentiable:  # a penalty on it (MOPO) then steers SHAC's actions away from what the members dispute
            self._disagreement = disagreement(pred)  # (N,), replaced: earlier rewards keep the values they read
        else:
            self._disagreement.copy_(disagreement(pred))
        if self.members_mode == "mean":
            return pred.mean(dim=0)  # (N, O)
        if self.members_mode == "step":
            self._member.random_(0, self.num_members, generator=self._member_gen)
        return pred[self._member, self._worlds]  # (N, O)

    def _refresh_contacts(self, world_ids: torch.Tensor | None = None) -> None:
        """Contact features of the current state (the next step's input) and the contact summary, one pass; of
        `world_ids` only when given (a reset or a push moves a few worlds: the others' features stand). Compiled
        features take every world (one batch size, no recompiles)."""
        if world_ids is not None and self._compiled:
            world_ids = None
        if world_ids is not None:  # indices (a mask, int32 or repeated ids as reset takes them), each world once
            world_ids = (world_ids.nonzero()[:, 0] if world_ids.dtype == torch.bool else world_ids.long()).unique()
        ids = slice(None) if world_ids is None else world_ids
        qpos, qvel, ctrl = self._qpos[ids], self._qvel[ids], self._ctrl[ids]  # (n, nq), (n, nv), (n, nu)
        features, distance = self.probes.features_and_distance(qpos, qvel)  # (n, dim), (n, P)
        # replaced, not written: earlier steps' graphs keep the features they read, and features made under
        # torch.inference_mode (a rollout) may not be written outside it
        self._features = features if world_ids is None else self._features.index_copy(0, world_ids, features)
        with torch.no_grad():  # the summary feeds thresholds (terminations, contact counts): no gradient
            if self.contact_head is not None:  # (n, nb) the head's forces on the end-of-step frame
                frame = self.rep.inputs(qpos, qvel, ctrl, features)  # (n, I)
                self._contact[ids] = self.contact_head.contact_force(self.x_norm.normalize(frame))
                return
            if self.probes.num_probes == 0:  # no probes: the contact summary stays zero
                return
            depth = (CONTACT_MARGIN - distance).clamp_min(0.0)  # (n, P)
            force = CONTACT_STIFFNESS * depth  # (n, P)
            self._contact[ids] = (force[:, :, None] * self._probe_owner).amax(dim=1)  # (n, nb) largest probe force

    def state(self) -> RobotState:
        return self._state

    def close(self) -> None:
        """Nothing to release: the model and its caches are freed with the object."""


def _map_cache(cache, fn) -> None:
    """Replace every tensor field of a model cache (an ensemble's inner one included) by fn(field)."""
    inner = getattr(cache, "inner", cache)
    for name, value in vars(inner).items():
        if isinstance(value, torch.Tensor):
            setattr(inner, name, fn(value))


def _cast_floats(obj, dtype: torch.dtype, seen: set[int]) -> None:
    """Cast the floating tensors and modules held by `obj` and by the flashnerd objects it holds, in place."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    for name, value in vars(obj).items():
        cast = _cast_value(value, dtype, seen)
        if cast is not value:
            setattr(obj, name, cast)


def _cast_value(value, dtype: torch.dtype, seen: set[int]):
    """`value` with its floating tensors in `dtype`: a tensor cast, a module or flashnerd object cast in place, the
    lists, tuples and dicts that hold them (e.g. the kinematics' per-body joint constants) rebuilt; anything else is
    returned as it is."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, torch.nn.Module):
        return value.to(dtype)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):  # a named tuple keeps its own form
        items = [_cast_value(v, dtype, seen) for v in value]
        return type(value)(items) if any(a is not b for a, b in zip(items, value)) else value
    if isinstance(value, dict):
        items = {k: _cast_value(v, dtype, seen) for k, v in value.items()}
        return items if any(items[k] is not v for k, v in value.items()) else value
    if hasattr(value, "__dict__") and type(value).__module__.startswith("flashnerd"):
        _cast_floats(value, dtype, seen)
    return value
