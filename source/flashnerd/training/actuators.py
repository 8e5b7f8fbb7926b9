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
from flashnerd.sim.scene import actuator_ctrl_limits, pd_torque, position_actuators

SATURATED_MIN = 3  # samples at exactly one extreme value that may show a clamp (an unclamped PD torque repeats none)
MIN_SAMPLES = 50  # finite, unclamped samples a joint needs for its gains to be fitted


def torque_features(data: TrajectoryData, rep: StateRepresentation, scene: mujoco.MjModel, phase: float
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(target error, joint velocity, measured torque, finite), each (M*T, nu), at `phase` of every step: what the
    learned backend's PD law reads (the target clamped to the actuator's ctrlrange, as the backend clamps it) and what
    it should give; `finite` marks the entries where all three are finite (a log may lack one joint's torque)."""
    nu = data.ctrl.shape[-1]
    limits = torch.as_tensor(actuator_ctrl_limits(scene), dtype=torch.float64)  # (nu, 2)
    ctrl = torch.clamp(data.ctrl.double(), limits[:, 0], limits[:, 1])  # (M, T, nu)
    q0, q1 = rep.actuated_pos(data.qpos[:, :-1].double()), rep.actuated_pos(data.qpos[:, 1:].double())  # (M, T, nu)
    v0, v1 = rep.actuated_vel(data.qvel[:, :-1].double()), rep.actuated_vel(data.qvel[:, 1:].double())  # (M, T, nu)
    error = (ctrl - torch.lerp(q0, q1, phase)).reshape(-1, nu)  # (M*T, nu)
    vel = torch.lerp(v0, v1, phase).reshape(-1, nu)  # (M*T, nu)
    torque = data.torque.double().reshape(-1, nu)  # (M*T, nu)
    return error, vel, torque, torch.isfinite(error) & torch.isfinite(vel) & torch.isfinite(torque)


def nominal_actuators(scene: mujoco.MjModel) -> dict[str, torch.Tensor]:
    """kp, kd, effort_low, effort_high (each (nu,), float32) of the scene's position actuators."""
    return {k: torch.as_tensor(v, dtype=torch.float32) for k, v in position_actuators(scene).items()}


def _fit_joint(tau: torch.Tensor, error: torch.Tensor, vel: torch.Tensor, low: float, high: float
               ) -> tuple[float, float, float, float] | None:
    """(kp, kd, low, high) of one joint from its finite samples (K,), or None when they do not determine a PD law.
    A side's extreme value held by at least SATURATED_MIN samples is a clamp only if the law fitted on the other
    samples asks for more than it there, by more than the law's scatter (a sensor's repeated reading is not);
    otherwise that side keeps the nominal limit `low`/`high`, widened to what the robot measured beyond it."""
    if tau.numel() < MIN_SAMPLES:
        return None
    clamps = {"low": float(tau.min()), "high": float(tau.max())}
    clamps = {k: v for k, v in clamps.items() if int((tau == v).sum()) >= SATURATED_MIN}
    for _ in range(3):  # each pass drops the clamps its fit does not confirm; none left to drop by the third
        lo, hi = clamps.get("low", min(low, float(tau.min()))), clamps.get("high", max(high, float(tau.max())))
        free = (tau > lo if "low" in clamps else torch.ones_like(tau, dtype=torch.bool)) & \
               (tau < hi if "high" in clamps else torch.ones_like(tau, dtype=torch.bool))  # (K,)
        if int(free.sum()) < MIN_SAMPLES:
            return None
        design = torch.stack([error[free], -vel[free]], 1)  # (F, 2)
        kp, kd = torch.linalg.lstsq(design, tau[free, None]).solution[:, 0].tolist()
        if not (kp > 0 and abs(kd) < float("inf")):
            return None
        raw = kp * error - kd * vel  # (K,) what the fitted law asks for, unclamped
        noise = float((raw[free] - tau[free]).std(unbiased=False))  # the law's scatter where nothing clamps
        # a clamp: the law asks for more than the value held, by more than its scatter (a reading repeated by a
        # quantized sensor sits within it)
        confirmed = {k: v for k, v in clamps.items()
                     if (float(raw[tau == v].mean()) - v) * (1 if k == "high" else -1) > noise}
        if confirmed == clamps:
            return kp, kd, lo, hi
        clamps = confirmed
    return None


def _squared_error(law: tuple[float, float, float, float], error: torch.Tensor, vel: torch.Tensor,
                   tau: torch.Tensor) -> float:
    """Mean squared torque error of one joint's (kp, kd, low, high) on samples (K,)."""
    kp, kd, low, high = law
    return float((torch.clamp(kp * error - kd * vel, low, high) - tau).square().mean())


def identify_actuators(train: TrajectoryData, val: TrajectoryData, rep: StateRepresentation, scene: mujoco.MjModel,
                       phase: float, prior: dict[str, torch.Tensor] | None = None
                       ) -> tuple[dict[str, torch.Tensor], dict]:
    """The checkpoint's `actuators` entry (kp, kd, effort_low, effort_high, each (nu,)) from the measured torques of
    `train`, and its card. Each joint starts from `prior` (a starting checkpoint's entry) or the scene's nominal
    actuator, and takes its fitted law only where that predicts the torque of `val` better; `card["identified"]`
    lists those joints, and the torque NRMSE on `val` of the nominal actuators and of the entry is reported."""
    nominal = nominal_actuators(scene)
    start = prior if prior is not None else nominal
    found = {k: v.clone() for k, v in start.items()}
    error, vel, torque, ok = torque_features(train, rep, scene, phase)  # (K, nu) each
    v_error, v_vel, v_torque, v_ok = torque_features(val, rep, scene, phase)  # (K', nu) each
    identified = []
    for j in range(torque.shape[1]):  # nu problems of two unknowns: a loop over joints, not over samples
        m, vm = ok[:, j], v_ok[:, j]  # (K,), (K',)
        fit = _fit_joint(torque[m, j], error[m, j], vel[m, j], float(nominal["effort_low"][j]),
                         float(nominal["effort_high"][j]))
        if fit is None or not bool(vm.any()):
            continue
        before = tuple(float(start[k][j]) for k in ("kp", "kd", "effort_low", "effort_high"))
        held_out = v_error[vm, j], v_vel[vm, j], v_torque[vm, j]
        if _squared_error(fit, *held_out) < _squared_error(before, *held_out):
            found["kp"][j], found["kd"][j], found["effort_low"][j], found["effort_high"][j] = fit
            identified.append(j)
    card = {"train_samples": int(ok.any(1).sum()), "val_samples": int(v_ok.any(1).sum()), "identified": identified}
    if bool(v_ok.any()):
        counts = v_ok.sum(0).clamp_min(1)  # (nu,)
        filled = torch.where(v_ok, v_torque, 0.0)  # (K', nu)
        mean = filled.sum(0) / counts  # (nu,)
        scale = (torch.where(v_ok, v_torque - mean, 0.0).square().sum(0) / counts).sqrt().clamp_min(1e-6)  # (nu,)

        def nrmse(gains: dict[str, torch.Tensor]) -> float:
            residual = torch.where(v_ok, (pd_torque(gains, v_error, v_vel) - v_torque) / scale, 0.0)  # (K', nu)
            return round(float((residual.square().sum() / v_ok.sum()).sqrt()), 4)

        card.update(torque_nrmse_nominal=nrmse(nominal), torque_nrmse_identified=nrmse(found))
    return found, card
