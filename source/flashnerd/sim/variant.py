"""Apply a `RobotVariant` to a robot's `MjSpec` (before terrain and objects are added).

Each regex must match at least one element of the robot, or the variant is refused in one line (a typo must not
silently leave the nominal model). Scales multiply the nominal values; joint values replace them. A key that the
variant randomizes is compiled neutral (factor 1, the joint's own value): the scene is the base each world's draw is
written over (`flashnerd.sim.randomize`).
"""

from __future__ import annotations

import re

import mujoco
import numpy as np

from flashnerd.robots.variant import RobotVariant, VariantError
from flashnerd.sim.naming import unused_name

PAYLOAD_BODY = "variant_payload"  # the payload body's name, or the first free `variant_payload_<k>`
GROUND_FRICTION = 1.0  # sliding friction of the floor and of every terrain box (sim/scene.py, sim/terrain.py)
PAYLOAD_INERTIA = 1e-6  # kg m^2 on each axis: a point mass, but MuJoCo needs a positive inertia


def _matching(where: str, pattern: str, named: list) -> list:
    found = [e for e in named if e.name and re.fullmatch(pattern, e.name)]
    if not found:
        names = ", ".join(e.name for e in named if e.name)[:200]
        raise VariantError(f"{where}: '{pattern}' matches none of the robot's names ({names})")
    return found


def payload_body(model: mujoco.MjModel, variant: RobotVariant) -> int | None:
    """Body id of the payload `apply_variant` added to the compiled `model` (None without one): the last child of the
    payload's parent, found by structure because the robot may already use the payload's usual name."""
    if "payload" not in variant.spec:
        return None
    parent = model.body(variant.spec["payload"]["body"]).id
    body = int(np.flatnonzero(model.body_parentid == parent)[-1])
    if not model.body(body).name.startswith(PAYLOAD_BODY) or np.any(model.body_parentid[1:] == body):
        raise RuntimeError(f"the last child of '{variant.spec['payload']['body']}' is not the variant's payload: "
                           "something added a body there after `apply_variant`")
    return body


def apply_variant(spec: mujoco.MjSpec, variant: RobotVariant) -> None:
    """Edit `spec` (the robot alone) as `variant` says."""
    v, where = variant.spec, variant.source or variant.name
    drawn = variant.randomized
    bodies = [b for b in spec.bodies if b.name != "world"]
    if "payload" in v:
        p = v["payload"]
        parent = _matching(f"{where}: payload.body", re.escape(p["body"]), bodies)[0]
        # the mass sits at the body's origin (an unset ipos would let MuJoCo move the frame instead); the body is the
        # parent's last child, which is how `payload_body` finds it in the compiled model
        parent.add_body(name=unused_name(spec.bodies, PAYLOAD_BODY), pos=p["pos"], ipos=[0.0, 0.0, 0.0],
                        explicitinertial=True, mass=p["mass"], inertia=[PAYLOAD_INERTIA] * 3)
    for pattern, factor in v.get("mass_scale", {}).items():
        factor = 1.0 if "mass_scale" in drawn else factor
        for body in _matching(f"{where}: mass_scale", pattern, bodies):
            if body.explicitinertial:  # the same shape, denser
                body.mass *= factor
                body.inertia = np.asarray(body.inertia) * factor
                body.fullinertia = np.asarray(body.fullinertia) * factor
            else:  # mass and inertia come from the geoms: make them denser
                for geom in body.geoms:
                    if np.isnan(geom.mass):
                        geom.density *= factor
                    else:
                        geom.mass *= factor
    for pattern, values in v.get("joints", {}).items():
        for joint in _matching(f"{where}: joints", pattern, [j for j in spec.joints
                                                             if j.type != mujoco.mjtJoint.mjJNT_FREE]):
            for key, value in values.items():
                if f"joints.{key}" in drawn:
                    continue
                if key == "damping":  # a vector in MjSpec; its first entry is the linear damping
                    damping = np.asarray(joint.damping, dtype=float).copy()
                    damping[0] = value
                    joint.damping = damping
                else:
                    setattr(joint, key, value)
    for pattern, scales in v.get("actuators", {}).items():
        scales = {k: 1.0 if f"actuators.{k}" in drawn else x for k, x in scales.items()}
        for act in _matching(f"{where}: actuators", pattern, list(spec.actuators)):
            position = act.gaintype == mujoco.mjtGain.mjGAIN_FIXED and act.biastype == mujoco.mjtBias.mjBIAS_AFFINE
            if not position and {"kp_scale", "kv_scale"} & set(scales):
                raise VariantError(f"{where}: actuator '{act.name}' is not a position actuator; kp/kv scales need one")
            gain, bias = np.asarray(act.gainprm, dtype=float).copy(), np.asarray(act.biasprm, dtype=float).copy()
            gain[0] *= scales.get("kp_scale", 1.0)
            bias[1] *= scales.get("kp_scale", 1.0)
            bias[2] *= scales.get("kv_scale", 1.0)
            act.gainprm, act.biasprm = gain, bias
            if "effort_scale" in scales:  # the scene folded a joint's actuatorfrcrange into this forcerange
                if act.forcelimited != mujoco.mjtLimited.mjLIMITED_TRUE:
                    raise VariantError(f"{where}: actuators '{pattern}' scales the force range of actuator "
                                       f"'{act.name}', which has none; give it a forcerange (or its joint an "
                                       "actuatorfrcrange) in the MJCF, or drop effort_scale")
                act.forcerange = np.asarray(act.forcerange, dtype=float) * scales["effort_scale"]
    scaled: dict[int, list] = {}  # id(geom) -> [geom, product of the factors of every pattern matching it]
    for pattern, factor in v.get("friction_scale", {}).items():
        factor = 1.0 if "friction_scale" in drawn else factor
        geoms = [g for b in bodies for g in b.geoms
                 if (g.name and re.fullmatch(pattern, g.name)) or re.fullmatch(pattern, b.name)]
        if not geoms:
            raise VariantError(f"{where}: friction_scale '{pattern}' matches no geom and no body of the robot")
        for geom in geoms:  # overlapping patterns multiply, as mass and actuator scales do
            scaled.setdefault(id(geom), [geom, 1.0])[1] *= factor
    for geom, factor in scaled.values():
        # MuJoCo takes the larger friction of two geoms of equal priority, so scaling the robot's geom alone
        # would change nothing on a grippier ground: scale the friction the contact had, and let it win
        friction = np.asarray(geom.friction, dtype=float).copy()
        friction[0] = factor * max(friction[0], GROUND_FRICTION)
        geom.friction = friction
        geom.priority = max(geom.priority, 1)

