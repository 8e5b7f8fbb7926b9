"""Actuator identification: the PD gains and torque limits that explain a robot's measured joint torques.

A learned backend reports each step's joint torque (for the task's torque terms) from a PD law on the model's states:
kp (ctrl - q) - kd qd, clamped to the effort limits, at the analytical backend's last substep (q and qd taken
(dec-1)/dec of the way to the next state). Its gains are the nominal robot's, unless the checkpoint carries
identified ones: logs of a worn or retuned robot with measured torque (`flashnerd record` data, a robot log's
`tau_<joint>` columns) give them by least squares per actuator on those same features, so the torque the model
reports is the torque the robot measured, not what the nominal actuator would have applied."""

from __future__ import annotations

import mujoco
import torch

from flashnerd.data.dataset import TrajectoryData
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.robots.spec_file import actuator_force_limits

SATURATED_MIN = 3  # samples at exactly one extreme value that show a clamp (an unclamped PD torque repeats none)
MIN_SAMPLES = 50  # unclamped samples per actuator below which its nominal gains are kept


def torque_features(data: TrajectoryData, rep: StateRepresentation, phase: float
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(target error, joint velocity, measured torque), each (M*T, nu), at `phase` of every step: what the learned
    backend's PD law reads and what it should give. Rows whose torque or state is not finite are left out."""
    ctrl = data.ctrl.double()  # (M, T, nu)
    q0, q1 = rep.actuated_pos(data.qpos[:, :-1].double()), rep.actuated_pos(data.qpos[:, 1:].double())  # (M, T, nu)
    v0, v1 = rep.actuated_vel(data.qvel[:, :-1].double()), rep.actuated_vel(data.qvel[:, 1:].double())  # (M, T, nu)
    error = (ctrl - torch.lerp(q0, q1, phase)).reshape(-1, ctrl.shape[-1])  # (M*T, nu)
    vel = torch.lerp(v0, v1, phase).reshape(-1, ctrl.shape[-1])  # (M*T, nu)
    torque = data.torque.double().reshape(-1, ctrl.shape[-1])  # (M*T, nu)
    ok = (torch.isfinite(error) & torch.isfinite(vel) & torch.isfinite(torque)).all(1)  # (M*T,)
    return error[ok], vel[ok], torque[ok]


def nominal_actuators(scene: mujoco.MjModel) -> dict[str, torch.Tensor]:
    """kp, kd, effort_low, effort_high (each (nu,), float32) of the scene's position actuators."""
    limits = torch.as_tensor(actuator_force_limits(scene), dtype=torch.float32)  # (nu, 2)
    return {"kp": torch.as_tensor(scene.actuator_gainprm[:, 0], dtype=torch.float32),
            "kd": torch.as_tensor(-scene.actuator_biasprm[:, 2], dtype=torch.float32),
            "effort_low": limits[:, 0].contiguous(), "effort_high": limits[:, 1].contiguous()}


def pd_torque(gains: dict[str, torch.Tensor], error: torch.Tensor, vel: torch.Tensor) -> torch.Tensor:
    """The clamped PD torque (K, nu) of `gains` for target errors and velocities (K, nu)."""
    raw = gains["kp"].to(error) * error - gains["kd"].to(error) * vel  # (K, nu)
    return torch.minimum(torch.maximum(raw, gains["effort_low"].to(error)), gains["effort_high"].to(error))


def _clamp_at(values: torch.Tensor, upper: bool, nominal: float) -> float:
    """The limit one actuator's torques `values` (K,) show on one side (`upper` or lower): the extreme value where at
    least SATURATED_MIN samples sit exactly on it (the clamp), else the nominal limit, widened to the extreme if the
    robot went past it."""
    extreme = float(values.max() if upper else values.min())
    if int((values == extreme).sum()) >= SATURATED_MIN:
        return extreme
    return max(nominal, extreme) if upper else min(nominal, extreme)


def identify_actuators(train: TrajectoryData, val: TrajectoryData, rep: StateRepresentation, scene: mujoco.MjModel,
                       phase: float) -> tuple[dict[str, torch.Tensor], dict]:
    """Per-actuator kp, kd (least squares on the unclamped samples of `train`) and effort limits (the clamps the
    torques show) as a checkpoint's `actuators` entry, and its card: the torque NRMSE on `val` of the nominal and of
    the identified actuators. An actuator with fewer than MIN_SAMPLES unclamped samples keeps its nominal values."""
    nominal = nominal_actuators(scene)
    error, vel, torque = torque_features(train, rep, phase)  # (K, nu) each
    nu = torque.shape[1]
    found = {k: v.clone() for k, v in nominal.items()}
    for j in range(nu):  # nu least-squares problems of two unknowns: a loop over joints, not over samples
        tau = torque[:, j]  # (K,)
        if tau.numel() == 0:
            continue
        low = _clamp_at(tau, False, float(nominal["effort_low"][j]))
        high = _clamp_at(tau, True, float(nominal["effort_high"][j]))
        free = (tau > low) & (tau < high)  # (K,) samples the clamp did not touch
        if int(free.sum()) < MIN_SAMPLES:
            continue
        design = torch.stack([error[free, j], -vel[free, j]], 1)  # (F, 2)
        kp, kd = torch.linalg.lstsq(design, tau[free, None]).solution[:, 0].tolist()
        found["kp"][j], found["kd"][j] = kp, kd
        found["effort_low"][j], found["effort_high"][j] = low, high
    card = {"train_samples": int(torque.shape[0])}
    v_error, v_vel, v_torque = torque_features(val, rep, phase)  # (K', nu) each
    if v_torque.numel():
        scale = v_torque.std(0).clamp_min(1e-6)  # (nu,)
        nrmse = lambda gains: float(((pd_torque(gains, v_error, v_vel) - v_torque) / scale)  # noqa: E731
                                    .square().mean().sqrt())
        card.update(val_samples=int(v_torque.shape[0]), torque_nrmse_nominal=round(nrmse(nominal), 4),
                    torque_nrmse_identified=round(nrmse(found), 4))
    return found, card
