"""Domain randomization: a robot variant's `randomize` ranges drawn per world and written into that world's model.

A variant's `randomize` section (robots/variant.py) names values to draw uniformly in a range whenever a world is built
or reset. The scene is compiled with those keys neutral (sim/variant.py), and a `Randomization` turns each world's
draws into the model fields a compiled scene with those values would have:

| path | model fields (of the elements the variant's patterns match) |
|---|---|
| `payload.mass` | `body_mass` of the payload body |
| `mass_scale` | `body_mass`, `body_inertia` (the nominal values times the draw) |
| `friction_scale` | `geom_friction[:, 0]` (the draw times the sliding friction of the geom's ground contacts) |
| `joints.damping/armature/frictionloss` | `dof_damping`, `dof_armature`, `dof_frictionloss` (the draw) |
| `actuators.kp_scale` | `actuator_gainprm[:, 0]`, `actuator_biasprm[:, 1]` (times the draw) |
| `actuators.kv_scale` | `actuator_biasprm[:, 2]` |
| `actuators.effort_scale` | `actuator_forcerange` |
| `actuators.delay_s`, `actuators.no_load_speed` | none: the world's actuation (sim/actuation.py), see below |

A drawn `delay_s` or `no_load_speed` is no model field: the backends give each world its own delay (which substep
reads which stored target) and its own torque-speed line from `actuation_draws`, sized at build for the longest
delay the range allows.

The backends write these fields into per-world models (`mujoco`: one `MjModel` per world, one shared model when
only the actuation is drawn; `mjwarp`: batched model fields) and then recompute the constants MuJoCo derives from
them (`mj_setConst`; MuJoCo Warp's `set_const`), so a world steps exactly as a scene compiled with its drawn values.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from flashnerd.robots import RobotSpec
from flashnerd.robots.variant import VariantError
from flashnerd.sim.variant import payload_body
from flashnerd.utils.name_patterns import name_matches


@dataclass(frozen=True)
class FieldWrite:
    """One model field a path writes: rows `index`, columns `cols` (None: the whole row), scaled or set."""

    field: str
    index: np.ndarray  # (k,) element rows
    cols: tuple[int, ...] | None
    scale: bool  # True: the base value times the draw; False: the draw itself


ACTUATION_KEYS = ("delay_s", "no_load_speed")  # drawn actuator keys that are no model field (sim/actuation.py)


class Randomization:
    """The draws of one variant's `randomize` ranges and the per-world model fields they give (see the module doc)."""

    def __init__(self, paths: list[str], low: np.ndarray, high: np.ndarray, writes: list[list[FieldWrite]],
                 model: mujoco.MjModel) -> None:
        self.paths = paths
        self.low, self.high = low, high  # (P,) each
        self.writes = writes  # per path, the fields its draw is written to (none for a drawn actuation key)
        # drawn actuation key -> its column of the draws
        self.actuation = {p.split(".", 1)[1]: i for i, p in enumerate(paths)
                          if p in (f"actuators.{k}" for k in ACTUATION_KEYS)}
        self.fields = tuple(dict.fromkeys(w.field for ws in writes for w in ws))
        self.base = {f: np.array(getattr(model, f), dtype=float) for f in self.fields}  # the neutral scene's fields
        # whether the derived constants need recomputing (mass, inertia, armature); damping, friction, gains do not
        self.needs_set_const = any(f in ("body_mass", "body_inertia", "dof_armature") for f in self.fields)

    def start(self, num_worlds: int) -> np.ndarray:
        """The draws (N, P) of `num_worlds` worlds, which `redraw` fills (the backends expose them as `draws`), from
        a stream of its own seeded from the run's torch seed."""
        self._rng = np.random.default_rng(int(torch.randint(2**62, ())))
        self.draws = np.zeros((num_worlds, len(self.paths)))  # (N, P)
        return self.draws

    def redraw(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """New uniform draws for worlds `ids` (k,) and the model fields they give: field -> (k, *field shape)."""
        self.draws[ids] = self.low + (self.high - self.low) * self._rng.random((len(ids), len(self.paths)))
        return self.values(self.draws[ids])

    def actuation_draws(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The current draws of worlds `ids` (k,) of each drawn actuation key: key -> (k,) (empty when none)."""
        return {key: self.draws[ids, p] for key, p in self.actuation.items()}

    def values(self, draws: np.ndarray) -> dict[str, np.ndarray]:
        """The fields of worlds with `draws` (n, P): field -> (n, *field shape), float64."""
        out = {f: np.repeat(b[None], len(draws), axis=0) for f, b in self.base.items()}  # (n, *shape) each
        for p, writes in enumerate(self.writes):
            for w in writes:
                rows = (w.index,) if w.cols is None else (w.index[:, None], np.asarray(w.cols)[None, :])
                target = out[w.field][(slice(None), *rows)]  # (n, k[, c], ...)
                v = draws[:, p].reshape(-1, *[1] * (target.ndim - 1))  # (n, 1, ...)
                out[w.field][(slice(None), *rows)] = self.base[w.field][rows][None] * v if w.scale else v
        return out


def _robot_elements(model: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray]:
    """Body ids of the robot (every body before the scene's objects, which follow the robot; terrain adds geoms to
    the world body only) and the geom ids on them."""
    free = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    objects = [j for j in free if model.jnt_bodyid[j] != 1]  # a floating robot's own free joint sits on body 1
    first_object = int(model.jnt_bodyid[objects[0]]) if objects else model.nbody
    bodies = np.arange(1, first_object)
    geoms = np.flatnonzero(np.isin(model.geom_bodyid, bodies))
    return bodies, geoms


def _names(model: mujoco.MjModel, kind, ids) -> list[str]:
    return [mujoco.mj_id2name(model, kind, int(i)) or "" for i in ids]


def drawn_actuators(variant, model: mujoco.MjModel) -> np.ndarray:
    """The actuators (ids) whose `actuators.<key>` a world draws: those the variant's `actuators` patterns match,
    every one without the section."""
    acts = np.arange(model.nu)
    return _match(variant.spec.get("actuators"), _names(model, mujoco.mjtObj.mjOBJ_ACTUATOR, acts), acts)


def _match(patterns, names: list[str], ids: np.ndarray) -> np.ndarray:
    """ids whose (non-empty) name fully matches any pattern (None: all ids), as sim/variant.py matches them."""
    if patterns is None:
        return np.asarray(ids, dtype=int)
    return np.asarray([i for i, n in zip(ids, names) if n and any(name_matches(p, n) for p in patterns)], dtype=int)


def randomization_for(robot: RobotSpec, model: mujoco.MjModel) -> Randomization | None:
    """The randomization of `robot`'s variant over the compiled scene `model` (built with the drawn keys neutral), or
    None when the variant draws nothing. A path that selects no element is a one-line `VariantError`."""
    variant = robot.variant
    if variant is None or not variant.randomized:
        return None
    v, where = variant.spec, variant.source or variant.name
    bodies, geoms = _robot_elements(model)
    body_names = _names(model, mujoco.mjtObj.mjOBJ_BODY, bodies)
    joints = [j for j in range(model.njnt) if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE
              and model.jnt_bodyid[j] in bodies]
    joint_names = _names(model, mujoco.mjtObj.mjOBJ_JOINT, joints)
    act_names = _names(model, mujoco.mjtObj.mjOBJ_ACTUATOR, np.arange(model.nu))
    payload = payload_body(model, variant)
    paths, low, high, writes = [], [], [], []
    for path, (lo, hi) in variant.randomized.items():
        section, _, key = path.partition(".")
        if path == "payload.mass":
            ws = [FieldWrite("body_mass", np.array([payload]), None, False)]
        elif path == "mass_scale":  # the payload's mass is its own key (sim/variant.py leaves it unscaled too)
            ids = _match(v["mass_scale"], [n if b != payload else "" for b, n in zip(bodies, body_names)], bodies)
            ws = [FieldWrite("body_mass", ids, None, True), FieldWrite("body_inertia", ids, None, True)]
        elif path == "friction_scale":
            body_name = dict(zip(bodies, body_names))
            geom_body = {g: body_name[model.geom_bodyid[g]] for g in geoms}
            names = _names(model, mujoco.mjtObj.mjOBJ_GEOM, geoms)
            ids = np.asarray([g for g, n in zip(geoms, names) if any((n and name_matches(p, n)) or name_matches(
                p, geom_body[g]) for p in v["friction_scale"])], dtype=int)
            ws = [FieldWrite("geom_friction", ids, (0,), True)]
        elif section == "joints":
            ids = _match(v.get("joints"), joint_names, np.asarray(joints, dtype=int))
            ws = [FieldWrite(f"dof_{key}", model.jnt_dofadr[ids].astype(int), None, False)]
        elif key in ACTUATION_KEYS:  # no model field: the backends draw the world's actuation (sim/actuation.py)
            ws = []
            if not len(drawn_actuators(variant, model)):
                raise VariantError(f"{where}: randomize '{path}' selects no actuator of the robot")
        else:  # actuators
            ids = drawn_actuators(variant, model)
            position = (model.actuator_gaintype[ids] == mujoco.mjtGain.mjGAIN_FIXED) & (
                model.actuator_biastype[ids] == mujoco.mjtBias.mjBIAS_AFFINE)
            if key != "effort_scale" and not position.all():
                raise VariantError(f"{where}: randomize '{path}' needs position actuators; "
                                   f"'{act_names[ids[~position][0]]}' is not one")
            if key == "effort_scale":
                unlimited = [i for i in ids if not model.actuator_forcelimited[i]]
                if unlimited:
                    raise VariantError(f"{where}: randomize '{path}' scales the force range of actuator "
                                       f"'{act_names[unlimited[0]]}', which has none; give it a forcerange (or its "
                                       "joint an actuatorfrcrange)")
                ws = [FieldWrite("actuator_forcerange", ids, None, True)]
            elif key == "kp_scale":
                ws = [FieldWrite("actuator_gainprm", ids, (0,), True), FieldWrite("actuator_biasprm", ids, (1,), True)]
            else:
                ws = [FieldWrite("actuator_biasprm", ids, (2,), True)]
        if ws and not len(ws[0].index):
            raise VariantError(f"{where}: randomize '{path}' selects no element of the robot")
        paths.append(path)
        low.append(lo)
        high.append(hi)
        writes.append(ws)
    return Randomization(paths, np.asarray(low), np.asarray(high), writes, model)
