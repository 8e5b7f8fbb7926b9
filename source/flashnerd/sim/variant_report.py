"""What a robot variant does to its robot, read off the compiled scenes: every value of the variant's fixed robot
that differs from the nominal robot's (masses, joint damping, armature and friction loss, PD gains and torque limits,
the sliding friction of the robot's geoms against the floor, the payload), the actuation no MJCF states (delays,
torque-speed lines), and the elements each `randomize` range draws for. `flashnerd variant` prints it, so a user sees
that a pattern matched the joints they meant before an hour of recording.

Elements are matched by name between the two scenes (a payload body shifts the ids of the bodies after it); a body
or geom without a name is `<parent body>/body<k>` or `<body>/geom<k>`, its place among its parent's children.
"""

from __future__ import annotations

import mujoco
import numpy as np

from flashnerd.robots import RobotSpec
from flashnerd.sim.actuation import actuation_for
from flashnerd.sim.randomize import Randomization, randomization_for
from flashnerd.sim.scene import build_scene, position_actuators
from flashnerd.sim.variant import payload_body

BODY, JOINT, GEOM, ACTUATOR = (mujoco.mjtObj.mjOBJ_BODY, mujoco.mjtObj.mjOBJ_JOINT, mujoco.mjtObj.mjOBJ_GEOM,
                               mujoco.mjtObj.mjOBJ_ACTUATOR)
RTOL = 1e-9  # relative difference below which a compiled value counts as unchanged (float rounding of the compile)


def _body_names(model: mujoco.MjModel) -> list[str]:
    """Each body's name, or `<parent>/body<k>` (its place among its parent's children) when it has none: the payload
    is its parent's last child, so no other body's place changes."""
    names, seen = [model.body(0).name or "world"], {}
    for b in range(1, model.nbody):
        parent = int(model.body_parentid[b])
        k = seen[parent] = seen.get(parent, -1) + 1
        names.append(model.body(b).name or f"{names[parent]}/body{k}")
    return names


def _geom_names(model: mujoco.MjModel) -> list[str]:
    """Each geom's name, or `<body>/geom<k>` (its place among its body's geoms) when it has none."""
    bodies, names, seen = _body_names(model), [], {}
    for g in range(model.ngeom):
        b = int(model.geom_bodyid[g])
        k = seen[b] = seen.get(b, -1) + 1
        names.append(model.geom(g).name or f"{bodies[b]}/geom{k}")
    return names


def _dof_names(model: mujoco.MjModel) -> list[str]:
    """The joint of each dof that is not a free joint's (None for a free joint's six)."""
    return [None if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else (model.joint(j).name or f"joint{j}")
            for j in model.dof_jntid]


def _ground_friction(model: mujoco.MjModel) -> np.ndarray:
    """(ngeom,) sliding friction of each geom's contacts with the floor, as MuJoCo's `mj_contactParam` picks it: the
    geom of higher priority decides, of equal priority the larger friction wins (a geom's own value alone where the
    scene has no floor plane)."""
    own = model.geom_friction[:, 0]  # (ngeom,)
    planes = np.flatnonzero((model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE) & (model.geom_bodyid == 0))
    if not len(planes):
        return own.copy()
    floor = int(planes[0])
    mine, theirs = model.geom_priority, model.geom_priority[floor]  # (ngeom,), ()
    return np.where(mine > theirs, own, np.where(mine < theirs, own[floor], np.maximum(own, own[floor])))


def _quantities(model: mujoco.MjModel) -> dict[str, dict[str, float]]:
    """quantity -> {element name: value} of everything a variant may change in a compiled scene."""
    pd = position_actuators(model)
    acts = [model.actuator(a).name or f"actuator{a}" for a in range(model.nu)]
    dofs = _dof_names(model)
    out = {"mass (kg)": dict(zip(_body_names(model), model.body_mass.tolist())),
           "ground friction": dict(zip(_geom_names(model), _ground_friction(model).tolist()))}
    for field, label in (("dof_damping", "damping (N m s/rad)"), ("dof_armature", "armature (kg m^2)"),
                         ("dof_frictionloss", "friction loss (N m)")):
        out[label] = {n: float(v) for n, v in zip(dofs, getattr(model, field)) if n is not None}
    for key, label in (("kp", "kp (N m/rad)"), ("kd", "kd (N m s/rad)"), ("effort_low", "effort low (N m)"),
                       ("effort_high", "effort high (N m)")):
        out[label] = dict(zip(acts, pd[key].tolist()))
    return out


def compiled_changes(nominal: mujoco.MjModel, varied: mujoco.MjModel) -> list[dict]:
    """Rows {quantity, element, nominal, variant} for every value of the compiled `varied` scene that differs from
    the `nominal` scene's, by element name; an element of one scene only (the payload body) has None on the other."""
    before, after = _quantities(nominal), _quantities(varied)
    rows = []
    for quantity, values in after.items():
        old = before[quantity]
        for element, value in values.items():
            if element not in old or not np.isclose(old[element], value, rtol=RTOL, atol=0.0):
                rows.append({"quantity": quantity, "element": element, "nominal": old.get(element),
                             "variant": value})
    return rows


def actuation_changes(robot: RobotSpec, model: mujoco.MjModel) -> list[dict]:
    """Rows {quantity, element, nominal, variant} of the actuation `robot`'s variant adds to its compiled scene
    `model`: each actuator's delay (seconds, whole physics steps) and the no-load speed of its torque-speed line."""
    actuation = actuation_for(robot, model)
    if actuation is None:
        return []
    rows = []
    for a in range(model.nu):
        name = model.actuator(a).name or f"actuator{a}"
        if actuation.delay[a]:
            rows.append({"quantity": "delay (s)", "element": name, "nominal": 0.0,
                         "variant": round(float(actuation.delay[a]) * robot.sim_dt, 9),
                         "physics_steps": int(actuation.delay[a])})
        speed = float(actuation.params[a, -1])
        if np.isfinite(speed):
            rows.append({"quantity": "no-load speed (rad/s)", "element": name, "nominal": None, "variant": speed})
    return rows


def _element_names(model: mujoco.MjModel, field: str, index: np.ndarray) -> list[str]:
    if field.startswith("body_"):
        names = _body_names(model)
    elif field.startswith("geom_"):
        names = _geom_names(model)
    elif field.startswith("dof_"):
        names = _dof_names(model)
    else:
        names = [model.actuator(a).name or f"actuator{a}" for a in range(model.nu)]
    return [names[int(i)] for i in index]


def drawn_elements(robot: RobotSpec, model: mujoco.MjModel, randomization: Randomization) -> dict[str, dict]:
    """path -> {range, elements} of each `randomize` range: the names of the elements a world's draw is written to
    (for a drawn delay or no-load speed, the actuators whose actuation it sets)."""
    actuation = actuation_for(robot, model)
    out = {}
    for path, low, high, writes in zip(randomization.paths, randomization.low, randomization.high,
                                       randomization.writes):
        if writes:
            names = _element_names(model, writes[0].field, writes[0].index)
        else:  # a drawn actuation key: the actuators it selects
            names = [model.actuator(int(a)).name or f"actuator{a}"
                     for a in np.flatnonzero(actuation.drawn[path.split(".", 1)[1]])]
        out[path] = {"range": [float(low), float(high)], "elements": names}
    return out


def variant_report(robot: RobotSpec) -> dict:
    """What `robot`'s variant changes: `changes`, rows of the fixed robot against the nominal one (compiled values,
    then the actuation), its total mass on both, and `draws`, the elements each `randomize` range writes to."""
    nominal = build_scene(robot.with_variant(None))
    fixed_robot = robot.with_variant(robot.variant.fixed())
    fixed = build_scene(fixed_robot)
    changes = compiled_changes(nominal, fixed) + actuation_changes(fixed_robot, fixed)
    payload = payload_body(fixed, fixed_robot.variant)
    if payload is not None:  # where the added mass sits, in its parent body's frame
        name = _body_names(fixed)[payload]
        row = next(r for r in changes if r["quantity"] == "mass (kg)" and r["element"] == name)
        row.update(parent=fixed.body(int(fixed.body_parentid[payload])).name, pos=fixed.body_pos[payload].tolist())
    out = {"changes": changes, "total_mass_kg": {"nominal": float(nominal.body_mass.sum()),
                                                 "variant": float(fixed.body_mass.sum())}}
    if robot.variant.randomized:
        model = build_scene(robot)  # the scene every world's draws are written over (drawn keys neutral)
        out["draws"] = drawn_elements(robot, model, randomization_for(robot, model))
    return out
