"""Actuation an MJCF cannot state: joint targets that reach the actuators late, and a torque limit that falls with
joint speed. A robot variant's `actuators` entries set them (robots/variant.py):

- `delay_s`: the actuators see the targets sent that long ago, from the first physics substep that starts at or
  after their arrival (the delay rounded up to whole physics steps: the physics holds each substep's control). The
  control of each physics substep is read from a short history of the targets, so a delay of one control period
  replays the nominal response one control step later.
- `no_load_speed`: |actuator force| <= limit x max(0, 1 - |joint speed| / no_load_speed), a DC motor's torque-speed
  line through the stall torque (the `forcerange` limit) and the no-load speed. MuJoCo's actuator still computes
  and clamps its force from the target (as in the nominal model, with its own implicit velocity gain); before each
  physics substep the part of that force beyond the line is computed from the state and taken off again as an
  applied joint force (`qfrc_applied`), so the joint feels exactly the force on the line, and a line that never
  binds steps exactly as the nominal model.

The backends (`mujoco`, `mjwarp`) hold an `Actuation` when the robot's variant sets either key; without one they
step exactly as before. When a later entry of the variant matches the same actuator, its value wins. A variant that
randomizes either key (`randomize: {actuators.delay_s: [lo, hi]}`, sim/randomize.py) gives each world its own:
the target history is sized for the longest delay the range allows, and each world reads its substeps' controls
from its own slots (`offsets_for`) and cuts its force on its own line (`with_fields`).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from flashnerd.robots import RobotSpec
from flashnerd.robots.variant import VariantError
from flashnerd.sim.randomize import ACTUATION_KEYS, drawn_actuators
from flashnerd.utils.name_patterns import name_matches

PARAMS = ("gear", "gain", "bias0", "bias1", "bias2", "force_lo", "force_hi", "ctrl_lo", "ctrl_hi", "no_load_speed")


@dataclass(frozen=True)
class Actuation:
    """Per-actuator delay and torque-speed limit of one compiled scene (all arrays over the nu actuators)."""

    delay: np.ndarray  # (nu,) physics substeps
    history_len: int  # control steps of targets the longest delay reaches back, plus the newest
    offsets: np.ndarray  # (dec, nu) history slot each substep's control comes from (history_len - 1: the newest)
    qadr: np.ndarray  # (nu,) qpos address of each actuated joint
    dadr: np.ndarray  # (nu,) qvel address
    params: np.ndarray  # (nu, len(PARAMS)) float64, the force law and its limits, see PARAMS
    sim_dt: float  # physics step (s)
    drawn: dict[str, np.ndarray]  # randomized key ('delay_s', 'no_load_speed') -> (nu,) bool, the actuators it draws

    @property
    def drawn_delay(self) -> bool:
        """True when each world draws its own delay (the backends then keep per-world `offsets_for`)."""
        return "delay_s" in self.drawn

    def offsets_for(self, delay_s: np.ndarray) -> np.ndarray:
        """The history slots (k, dec, nu) each substep's control comes from in k worlds whose drawn delay is
        delay_s (k,) seconds on the actuators that draw it (the others keep the file's delay)."""
        steps = np.where(self.drawn["delay_s"], _whole_steps(delay_s[:, None], self.sim_dt), self.delay)  # (k, nu)
        return _slots(steps, self.offsets.shape[0], self.history_len)  # (k, dec, nu)

    @property
    def speed_limited(self) -> bool:
        """True when some actuator has a finite no-load speed (the backend then recomputes the cut each substep)."""
        return bool(np.isfinite(self.params[:, PARAMS.index("no_load_speed")]).any())

    def substep_targets(self, history: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
        """The target each substep's actuators see (N, dec, nu), from the targets of the last steps (N, H, nu);
        `offsets` (N, dec, nu) are the worlds' own slots when each draws its delay (`offsets_for`)."""
        if offsets is not None:
            return np.take_along_axis(history, offsets, axis=1)  # (N, dec, nu)
        return history[:, self.offsets, np.arange(self.offsets.shape[1])]  # (N, dec, nu)

    def speed_limit(self, target: np.ndarray, qpos: np.ndarray, qvel: np.ndarray,
                    params: np.ndarray | None = None) -> np.ndarray:
        """How much the torque-speed line cuts the force MuJoCo's actuators would apply under `target` (N, nu) at
        the state qpos (N, nq), qvel (N, nv): (N, nu) in actuator-force units, <= 0 in magnitude, zero where no
        line is set or where it cuts no deeper than the stall limit (MuJoCo's own clamp). `params` (N, nu, 10)
        replaces `self.params` where each world has its own (a randomized variant)."""
        gear, gain, b0, b1, b2, lo, hi, clo, chi, v0 = np.moveaxis(self.params if params is None else params, -1, 0)
        q, qd = qpos[:, self.qadr], qvel[:, self.dadr]  # (N, nu)
        force = gain * np.clip(target, clo, chi) + b0 + b1 * gear * q + b2 * gear * qd  # (N, nu) asked for
        applied = np.clip(force, lo, hi)  # (N, nu) what MuJoCo applies
        room = np.clip(1.0 - np.abs(qd) / v0, 0.0, 1.0)  # (N, nu) share of the stall limit left at this speed
        return np.where(np.isfinite(v0), np.clip(applied, lo * room, hi * room) - applied, 0.0)  # (N, nu)

    def with_fields(self, k: int, fields: dict[str, np.ndarray], drawn: dict[str, np.ndarray]) -> np.ndarray:
        """The force-law parameters (k, nu, 10) of k worlds whose actuator fields (`actuator_gainprm`,
        `actuator_biasprm` (k, nu, 10), `actuator_forcerange` (k, nu, 2); any subset) and actuation keys (`drawn`:
        'no_load_speed' -> (k,), Randomization.actuation_draws) were drawn per world."""
        params = np.repeat(self.params[None], k, axis=0)  # (k, nu, 10)
        if "no_load_speed" in drawn:
            column = params[..., PARAMS.index("no_load_speed")]  # (k, nu) view
            column[:] = np.where(self.drawn["no_load_speed"], drawn["no_load_speed"][:, None], column)
        if "actuator_gainprm" in fields:
            params[..., 1] = fields["actuator_gainprm"][..., 0]
        if "actuator_biasprm" in fields:
            params[..., 2:5] = fields["actuator_biasprm"][..., :3]
        if "actuator_forcerange" in fields:  # an actuator without a force limit keeps (-inf, inf)
            params[..., 5:7] = np.where(np.isfinite(self.params[:, 5:7]), fields["actuator_forcerange"],
                                        self.params[:, 5:7])
        return params


def actuation_for(robot: RobotSpec, model: mujoco.MjModel) -> Actuation | None:
    """The actuation `robot`'s variant adds to the compiled scene `model`, or None when it adds none. A delay takes
    effect at the first physics substep that starts at or after it (the physics holds each substep's control: a
    target that arrives 12 ms late on a 5 ms step is applied from the substep that starts at 15 ms); a speed limit on
    an actuator that is not a force-limited joint actuator with a fixed gain and an affine bias is a one-line
    `VariantError`."""
    variant = robot.variant
    entries = variant.spec.get("actuators", {}) if variant is not None else {}
    ranges = {key: variant.randomized[f"actuators.{key}"] for key in ACTUATION_KEYS
              if variant is not None and f"actuators.{key}" in variant.randomized}
    if not ranges and not any(set(ACTUATION_KEYS) & set(v) for v in entries.values()):
        return None
    where = variant.source or variant.name
    delay_s, speed = np.zeros(model.nu), np.full(model.nu, np.inf)
    for pattern, values in entries.items():
        for a in range(model.nu):
            if name_matches(pattern, model.actuator(a).name):
                delay_s[a] = values.get("delay_s", delay_s[a])
                speed[a] = values.get("no_load_speed", speed[a])
    selected = np.isin(np.arange(model.nu), drawn_actuators(variant, model)) if ranges else None  # (nu,)
    drawn = dict.fromkeys(ranges, selected)  # every drawn key selects the same actuators
    if "no_load_speed" in drawn:  # a finite placeholder: each world's draw replaces it (with_fields)
        speed[drawn["no_load_speed"]] = ranges["no_load_speed"][1]
    delay = _whole_steps(delay_s, robot.sim_dt)  # (nu,)
    longest = delay.max(initial=0)
    if "delay_s" in drawn:
        longest = max(longest, int(_whole_steps(np.asarray(ranges["delay_s"][1]), robot.sim_dt)))
    for a in np.flatnonzero(np.isfinite(speed)):
        fixed = (int(model.actuator_gaintype[a]) == mujoco.mjtGain.mjGAIN_FIXED
                 and int(model.actuator_dyntype[a]) == mujoco.mjtDyn.mjDYN_NONE
                 and int(model.actuator_biastype[a]) in (mujoco.mjtBias.mjBIAS_NONE, mujoco.mjtBias.mjBIAS_AFFINE)
                 and int(model.actuator_trntype[a]) == mujoco.mjtTrn.mjTRN_JOINT and model.actuator_gainprm[a, 0] != 0)
        if not fixed or not model.actuator_forcelimited[a]:
            raise VariantError(f"{where}: no_load_speed needs a force-limited joint actuator with a fixed gain and "
                               f"an affine bias; '{model.actuator(a).name}' is not one")
    dec = robot.decimation
    history_len = 1 + int(-(-longest // dec))  # ceil(longest delay / dec) older steps, plus the newest
    offsets = _slots(delay[None], dec, history_len)[0]  # (dec, nu)
    joint = model.actuator_trnid[:, 0]  # (nu,)
    ctrl = np.where(model.actuator_ctrllimited.astype(bool)[:, None], model.actuator_ctrlrange, [-np.inf, np.inf])
    force = np.where(model.actuator_forcelimited.astype(bool)[:, None], model.actuator_forcerange, [-np.inf, np.inf])
    params = np.stack([model.actuator_gear[:, 0], model.actuator_gainprm[:, 0], *model.actuator_biasprm[:, :3].T,
                       force[:, 0], force[:, 1], ctrl[:, 0], ctrl[:, 1], speed], axis=1)  # (nu, 10)
    qadr, dadr = model.jnt_qposadr[joint].astype(int), model.jnt_dofadr[joint].astype(int)
    return Actuation(delay, history_len, offsets, qadr, dadr, params, robot.sim_dt, drawn)


def _whole_steps(delay_s: np.ndarray, sim_dt: float) -> np.ndarray:
    """A delay in whole physics steps, rounded up; the tolerance keeps 0.01 s / 0.005 s = 2.0000000000000004 at 2."""
    return np.ceil(delay_s / sim_dt - 1e-9).astype(int)


def _slots(delay: np.ndarray, dec: int, history_len: int) -> np.ndarray:
    """The history slot (k, dec, nu) each substep's control comes from under delays (k, nu) in physics steps (slot
    history_len - 1 holds the newest target; floor division reaches back whole control steps)."""
    substep = np.arange(dec)[None, :, None]  # (1, dec, 1)
    return history_len - 1 + (substep - delay[:, None, :]) // dec  # (k, dec, nu)
