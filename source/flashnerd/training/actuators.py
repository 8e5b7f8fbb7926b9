"""Actuator identification: the PD gains, torque limits and drive behaviour that explain a robot's measured torques.

A learned backend reports each step's joint torque (for the task's torque terms) from a PD law on the model's states:
kp (ctrl - q) - kd qd, clamped to the effort limits, at the analytical backend's last substep (q and qd taken
(dec-1)/dec of the way to the next state). Its gains are the nominal robot's, unless the checkpoint carries
identified ones: logs of a worn or retuned robot with measured torque (`flashnerd record` data, a robot log's
`tau_<joint>` columns) give them by least squares per actuator on those same features, so the torque the model
reports is the torque the robot measured, not what the nominal actuator would have applied.

Two drive effects no PD law holds are identified with it, per actuator: a lag (the target in effect at the last
substep was sent `lag` control steps earlier: bus and driver latency, sim/actuation.py's `delay_s`) and a torque-speed
line (the limits shrink as max(0, 1 - |qd| / no_load_speed), a DC motor's). Each lag in 0..MAX_LAG is fitted with a
fixed clamp and with the best line of a grid of no-load speeds; a richer law is taken only where it lowers the
training error by more than MARGIN, and the joint's result only where it beats its starting law on held-out data."""

from __future__ import annotations

import mujoco
import torch

from flashnerd.data.dataset import TrajectoryData
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.models.checkpoint import DRIVE_FIELDS, MAX_LAG
from flashnerd.sim.scene import actuator_ctrl_limits, pd_torque, position_actuators

SATURATED_MIN = 3  # samples at exactly one extreme value that may show a clamp (an unclamped PD torque repeats none)
MIN_SAMPLES = 50  # finite, unclamped samples a joint needs for its gains to be fitted
MARGIN = 0.01  # a lag or a torque-speed line is taken only where it lowers the training error by more than this share
SPEED_GRID = (0.25, 8.0, 21)  # no-load speeds tried: this geometric range times the joint's fastest sample, points
LINE_PASSES = 4  # alternations of (gains on the unclamped samples) and (stall limits on the clamped ones)
MAX_SAMPLES = 200_000  # steps identification reads at most (whole trajectories, evenly spread): a 2-parameter law
SEARCH_SAMPLES = 20_000  # samples the no-load speed is searched on (evenly strided); the best is refitted on all
LAW = ("kp", "kd", "effort_low", "effort_high", "no_load_speed", "lag")  # one joint's law, in this order


def torque_features(data: TrajectoryData, rep: StateRepresentation, scene: mujoco.MjModel, phase: float,
                    lag: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(target error, joint velocity, measured torque, finite), each (M*T, nu), at `phase` of every step: what the
    learned backend's PD law reads (the target clamped to the actuator's ctrlrange, as the backend clamps it; with
    `lag`, the target sent that many steps earlier, none in a trajectory's first `lag` steps) and what it should give;
    `finite` marks the entries where all three are finite (a log may lack one joint's torque)."""
    nu = data.ctrl.shape[-1]
    limits = torch.as_tensor(actuator_ctrl_limits(scene), dtype=torch.float64)  # (nu, 2)
    ctrl = torch.clamp(data.ctrl.double(), limits[:, 0], limits[:, 1])  # (M, T, nu)
    if lag:
        none = torch.full_like(ctrl[:, :lag], float("nan"))  # (M, lag, nu) steps whose lagged target was not logged
        ctrl = torch.cat([none, ctrl[:, :-lag]], dim=1)[:, :ctrl.shape[1]]  # (M, T, nu)
    q0, q1 = rep.actuated_pos(data.qpos[:, :-1].double()), rep.actuated_pos(data.qpos[:, 1:].double())  # (M, T, nu)
    v0, v1 = rep.actuated_vel(data.qvel[:, :-1].double()), rep.actuated_vel(data.qvel[:, 1:].double())  # (M, T, nu)
    error = (ctrl - torch.lerp(q0, q1, phase)).reshape(-1, nu)  # (M*T, nu)
    vel = torch.lerp(v0, v1, phase).reshape(-1, nu)  # (M*T, nu)
    torque = data.torque.double().reshape(-1, nu)  # (M*T, nu)
    return error, vel, torque, torch.isfinite(error) & torch.isfinite(vel) & torch.isfinite(torque)


def nominal_actuators(scene: mujoco.MjModel) -> dict[str, torch.Tensor]:
    """kp, kd, effort_low, effort_high, lag and no_load_speed (each (nu,), float32) of the scene's position actuators
    (no lag, no torque-speed line)."""
    law = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in position_actuators(scene).items()}
    return {**law, **{k: torch.full_like(law["kp"], v) for k, v in DRIVE_FIELDS.items()}}


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


def _fit_lines(tau: torch.Tensor, error: torch.Tensor, vel: torch.Tensor, low: float, high: float,
               speeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Torque-speed laws of one joint for S no-load `speeds` (S,) at once, from its finite samples (K,): the laws
    (S, 5) in LAW order up to no_load_speed, their mean squared error (S,) and whether each is a law (S,). Gains come
    from the samples its line leaves free (2x2 normal equations), each side's stall limit from the samples it clamps
    (least squares of tau = limit x share); the two alternate LINE_PASSES times, from the nominal limits."""
    share = (1.0 - vel.abs()[None] / speeds[:, None]).clamp_min(0.0)  # (S, K)
    share2, tau_share = share.square(), tau[None] * share  # (S, K) each
    lo, hi = torch.full_like(speeds, low), torch.full_like(speeds, high)  # (S,) each
    free = torch.ones_like(share, dtype=torch.bool)  # (S, K)
    e, v, t = error[None], vel[None], tau[None]  # (1, K) each
    for _ in range(LINE_PASSES):
        w = free.to(share.dtype)  # (S, K)
        see, sev, svv = (w * e * e).sum(1), (w * e * v).sum(1), (w * v * v).sum(1)  # (S,) each
        set_, svt = (w * e * t).sum(1), (w * v * t).sum(1)  # (S,) each
        det = see * svv - sev * sev  # (S,) of the normal matrix [[see, -sev], [-sev, svv]]
        kp = (set_ * svv - sev * svt) / det  # (S,)
        kd = (sev * set_ - see * svt) / det  # (S,)
        raw = kp[:, None] * e - kd[:, None] * v  # (S, K) what each law asks for, unclamped
        for bound, sign in ((hi, 1.0), (lo, -1.0)):
            held = (raw - bound[:, None] * share) * sign > 0  # (S, K) samples this side's line clamps
            weight = (share2 * held).sum(1)  # (S,)
            fitted = (tau_share * held).sum(1) / weight.clamp_min(1e-12)  # (S,)
            bound.copy_(torch.where((held.sum(1) >= SATURATED_MIN) & (weight > 0), fitted, bound))
        free = (raw <= hi[:, None] * share) & (raw >= lo[:, None] * share)  # (S, K)
    clamped = torch.minimum(torch.maximum(raw, lo[:, None] * share), hi[:, None] * share)  # (S, K)
    err = (clamped - t).square().mean(1)  # (S,)
    valid = (free.sum(1) >= MIN_SAMPLES) & (det > 0) & (kp > 0) & torch.isfinite(kd) & (lo < hi)  # (S,)
    return torch.stack([kp, kd, lo, hi, speeds], 1), err, valid


def _best_line(tau: torch.Tensor, error: torch.Tensor, vel: torch.Tensor, low: float, high: float
               ) -> tuple[tuple[float, ...], float] | None:
    """The torque-speed law (kp, kd, low, high, no_load_speed) of least squared error over a geometric grid of
    no-load speeds around the joint's fastest sample, refined once around the best (searched on at most
    SEARCH_SAMPLES of the samples, the best speed then fitted on all); None when no speed fits."""
    fastest = max(float(vel.abs().max()), 1e-3)
    lo, hi, points = SPEED_GRID
    step = (hi / lo) ** (1 / (points - 1))
    speeds = fastest * lo * step ** torch.arange(points, dtype=tau.dtype)  # (S,)
    every = max(1, -(-tau.numel() // SEARCH_SAMPLES))  # stride of the search subset
    sample = (tau[::every], error[::every], vel[::every])  # (K/every,) each
    best = None
    for _ in range(2):  # the grid, then seven speeds across the best grid point's interval
        laws, err, valid = _fit_lines(*sample, low, high, speeds)
        if not bool(valid.any()):
            break
        i = int(torch.where(valid, err, float("inf")).argmin())
        if best is None or float(err[i]) < best[1]:
            best = float(laws[i, 4]), float(err[i])
        speeds = best[0] * step ** (torch.arange(7, dtype=tau.dtype) / 3 - 1)  # (7,)
    if best is None:
        return None
    laws, err, valid = _fit_lines(tau, error, vel, low, high, torch.tensor([best[0]], dtype=tau.dtype))
    return (tuple(laws[0].tolist()), float(err[0])) if bool(valid[0]) else None


def _squared_error(law: tuple[float, ...], error: torch.Tensor, vel: torch.Tensor, tau: torch.Tensor) -> float:
    """Mean squared torque error on samples (K,) of one joint's law (kp, kd, low, high, no_load_speed), through the
    backend's own `pd_torque`."""
    gains = {k: torch.tensor(x, dtype=error.dtype) for k, x in zip(LAW, law[:5])}
    return float((pd_torque(gains, error, vel) - tau).square().mean())


def _fit_drive(feats: list[tuple[torch.Tensor, ...]], j: int, rows: torch.Tensor, low: float, high: float
               ) -> tuple[tuple[float, ...], float] | None:
    """Joint j's law (LAW order) of least training error over the lags and clamp kinds, on the samples `rows` (K,)
    finite at every lag; a lag or a line is taken only where it lowers the error by more than MARGIN."""
    if int(rows.sum()) < MIN_SAMPLES:
        return None
    best = None
    for lag, (error, vel, torque, _) in enumerate(feats):
        e, v, tau = error[rows, j], vel[rows, j], torque[rows, j]  # (K,) each
        fixed = _fit_joint(tau, e, v, low, high)
        fixed = None if fixed is None else (*fixed, float("inf"))  # a constant clamp: no torque-speed line
        kinds = [(fixed, _squared_error(fixed, e, v, tau))] if fixed is not None else []
        if low > -float("inf") and high < float("inf"):  # a line needs a stall torque to fall from
            line = _best_line(tau, e, v, low, high)
            kinds += [line] if line is not None else []
        for law, err in kinds:
            if best is None or err < (1.0 - MARGIN) * best[1]:
                best = (*law, float(lag)), err
    return best


def _lagged(feats: list[tuple[torch.Tensor, ...]], lag: torch.Tensor, part: int) -> torch.Tensor:
    """Feature `part` (0 error, 1 velocity) (K, nu) with each joint's column at its own lag (nu,)."""
    stacked = torch.stack([f[part] for f in feats])  # (L, K, nu)
    index = lag.long()[None, None, :].expand(1, stacked.shape[1], -1)  # (1, K, nu)
    return stacked.gather(0, index)[0]  # (K, nu)


def _held_out_error(law: tuple[float, ...], feats: list[tuple[torch.Tensor, ...]], j: int, rows: torch.Tensor
                    ) -> float:
    """Mean squared torque error of joint j's law (LAW order) on the samples `rows` (K,) of per-lag features."""
    error, vel, torque, _ = feats[int(law[5])]  # (K, nu) each, at the law's lag
    return _squared_error(law[:5], error[rows, j], vel[rows, j], torque[rows, j])


def _spread(data: TrajectoryData) -> TrajectoryData:
    """At most MAX_SAMPLES steps of `data`: whole trajectories, evenly spread over the file."""
    keep = max(1, MAX_SAMPLES // max(data.traj_len, 1))
    if data.num_trajectories <= keep:
        return data
    return data.select(torch.linspace(0, data.num_trajectories - 1, keep).round().long())


def identify_actuators(train: TrajectoryData, val: TrajectoryData, rep: StateRepresentation, scene: mujoco.MjModel,
                       phase: float, prior: dict[str, torch.Tensor] | None = None
                       ) -> tuple[dict[str, torch.Tensor], dict]:
    """The checkpoint's `actuators` entry (kp, kd, effort_low, effort_high, lag, no_load_speed, each (nu,)) from the
    measured torques of `train`, and its card. Each joint starts from `prior` (a starting checkpoint's entry) or the
    scene's nominal actuator, and takes its fitted law only where that predicts the torque of `val` better;
    `card["identified"]` lists those joints, `card["lag"]` and `card["no_load_speed"]` their drives, and the torque
    NRMSE on `val` of the nominal actuators and of the entry is reported (on the steps every lag can read)."""
    nominal = nominal_actuators(scene)
    start = {**nominal, **prior} if prior is not None else nominal
    found = {k: v.clone() for k, v in start.items()}
    lags = range(MAX_LAG + 1)
    train, val = _spread(train), _spread(val)
    feats = [torque_features(train, rep, scene, phase, lag) for lag in lags]  # [(K, nu) x 4] per lag
    v_feats = [torque_features(val, rep, scene, phase, lag) for lag in lags]  # [(K', nu) x 4] per lag
    ok = torch.stack([f[3] for f in feats]).all(0)  # (K, nu) finite at every lag
    v_ok = torch.stack([f[3] for f in v_feats]).all(0)  # (K', nu)
    v_torque = v_feats[0][2]  # (K', nu) the same at every lag
    identified = []
    for j in range(ok.shape[1]):  # nu small problems: a loop over joints, not over samples
        rows, v_rows = ok[:, j], v_ok[:, j]  # (K,), (K',)
        fit = _fit_drive(feats, j, rows, float(nominal["effort_low"][j]), float(nominal["effort_high"][j]))
        if fit is None or not bool(v_rows.any()):
            continue
        before = tuple(float(start[k][j]) for k in LAW)
        if _held_out_error(fit[0], v_feats, j, v_rows) < _held_out_error(before, v_feats, j, v_rows):
            for k, value in zip(LAW, fit[0]):
                found[k][j] = value
            identified.append(j)
    card = {"train_samples": int(ok.any(1).sum()), "val_samples": int(v_ok.any(1).sum()), "identified": identified,
            "lag": [int(found["lag"][j]) for j in identified],
            "no_load_speed": [round(float(found["no_load_speed"][j]), 2) if torch.isfinite(found["no_load_speed"][j])
                              else None for j in identified]}  # None: no torque-speed line
    if bool(v_ok.any()):
        counts = v_ok.sum(0).clamp_min(1)  # (nu,)
        filled = torch.where(v_ok, v_torque, 0.0)  # (K', nu)
        mean = filled.sum(0) / counts  # (nu,)
        scale = (torch.where(v_ok, v_torque - mean, 0.0).square().sum(0) / counts).sqrt().clamp_min(1e-6)  # (nu,)

        def nrmse(law: dict[str, torch.Tensor]) -> float:
            error, vel = _lagged(v_feats, law["lag"], 0), _lagged(v_feats, law["lag"], 1)  # (K', nu) each
            torque = pd_torque({k: v.double() for k, v in law.items()}, error, vel)  # (K', nu)
            residual = torch.where(v_ok, (torque - v_torque) / scale, 0.0)  # (K', nu)
            return round(float((residual.square().sum() / v_ok.sum()).sqrt()), 4)

        card.update(torque_nrmse_nominal=nrmse(nominal), torque_nrmse_identified=nrmse(found))
    return found, card
