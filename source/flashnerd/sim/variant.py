"""Apply a `RobotVariant` to a robot's `MjSpec` (before terrain and objects are added).

Each regex must match at least one element of the robot, or the variant is refused in one line (a typo must not
silently leave the nominal model). Scales multiply the nominal values; joint values replace them. A key that the
variant randomizes is compiled neutral (factor 1, the joint's own value): the scene is the base each world's draw is
written over (`flashnerd.sim.randomize`).

What the MJCF leaves to the compiler is pinned to its nominal value first where the variant would otherwise change
it: a position actuator's `dampratio` becomes the velocity gain it compiles to on the nominal robot (a controller's
gain does not grow with a payload, and `kp_scale` scales the position gain alone), and under
`<compiler inertiafromgeom="true">` a body's mass comes from its geoms, so `mass_scale` scales those.
"""

from __future__ import annotations

import mujoco
import numpy as np

from flashnerd.robots.variant import RobotVariant, VariantError
from flashnerd.sim.naming import unused_name
from flashnerd.utils.name_patterns import name_matches
from flashnerd.utils.strict_yaml import brief

PAYLOAD_BODY = "variant_payload"  # the payload body's name, or the first free `variant_payload_<k>`
# friction and condim of the floor, every terrain box, the heightfield and the cube (sim/scene.py, sim/terrain.py,
# sim/heightfield.py); their priority, solref, solimp and solmix are the MJCF's main geom default
GROUND_FRICTION = (1.0, 0.005, 0.0001)
GROUND_CONDIM = 3
PAYLOAD_INERTIA = 1e-6  # kg m^2 on each axis: a point mass, but MuJoCo needs a positive inertia


def _matching(where: str, pattern: str, named: list) -> list:
    found = [e for e in named if e.name and name_matches(pattern, e.name)]
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


def _ground_contact(spec: mujoco.MjSpec, geom: mujoco.MjsGeom) -> None:
    """Give `geom` the parameters of its contacts with the ground and a priority above the ground's, so that it alone
    decides them (MuJoCo's `mj_contactParam`: the geom of higher priority decides; of equal priority condim and
    friction are the larger, solref and solimp mixed by solmix). A geom that decided them already is left alone."""
    ground = spec.default.geom  # what the ground geoms do not set themselves comes from the main default
    if geom.priority > ground.priority:
        return
    friction, condim = np.asarray(GROUND_FRICTION, dtype=float), GROUND_CONDIM
    solref, solimp = np.asarray(ground.solref, dtype=float), np.asarray(ground.solimp, dtype=float)
    if geom.priority == ground.priority:
        own_ref, own_imp = np.asarray(geom.solref, dtype=float), np.asarray(geom.solimp, dtype=float)
        friction, condim = np.maximum(np.asarray(geom.friction, dtype=float), friction), max(geom.condim, condim)
        m1, m2 = (x if x >= mujoco.mjMINVAL else 0.0 for x in (geom.solmix, ground.solmix))
        mix = 0.5 if m1 + m2 == 0.0 else m1 / (m1 + m2)
        if own_ref[0] > 0 and solref[0] > 0:  # time constants and damping ratios mix, direct values take the smaller
            solref = mix * own_ref + (1 - mix) * solref
        else:
            solref = np.minimum(own_ref, solref)
        solimp = mix * own_imp + (1 - mix) * solimp
    geom.friction, geom.condim, geom.solref, geom.solimp = friction, condim, solref, solimp
    geom.priority = ground.priority + 1


def _pin_damping_ratios(spec: mujoco.MjSpec) -> None:
    """Replace each position actuator's `dampratio` (a positive biasprm[2], which MuJoCo turns into a velocity gain
    from the joint's inertia when it compiles) with the velocity gain it has on the nominal robot."""
    ratio = [a for a, act in enumerate(spec.actuators)
             if act.biastype == mujoco.mjtBias.mjBIAS_AFFINE and act.biasprm[2] > 0]
    if ratio:
        nominal = spec.compile()
        for a in ratio:
            bias = np.asarray(spec.actuators[a].biasprm, dtype=float).copy()
            bias[2] = nominal.actuator_biasprm[a, 2]
            spec.actuators[a].biasprm = bias


def apply_variant(spec: mujoco.MjSpec, variant: RobotVariant) -> None:
    """Edit `spec` (the robot alone) as `variant` says."""
    v, where = variant.spec, variant.source or variant.name
    drawn = variant.randomized
    bodies = [b for b in spec.bodies if b.name != "world"]
    if ("payload" in v or "mass_scale" in v) and spec.compiler.settotalmass > 0:
        raise VariantError(f"{where}: the robot's MJCF sets <compiler settotalmass>, which would scale the variant's "
                           "payload and masses back to that total; remove it (MuJoCo deprecates it) and give the "
                           "masses themselves")
    _pin_damping_ratios(spec)
    from_geoms = spec.compiler.inertiafromgeom == mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_TRUE
    if "payload" in v:
        p = v["payload"]
        parent = next((b for b in bodies if b.name == p["body"]), None)
        if parent is None:
            names = ", ".join(b.name for b in bodies if b.name)[:200]
            raise VariantError(f"{where}: payload.body {brief(p['body'])} is not a body of the robot (a body's name, "
                               f"not a regex): {names}")
        # the mass sits at the body's origin (an unset ipos would let MuJoCo move the frame instead); the body is the
        # parent's last child, which is how `payload_body` finds it in the compiled model
        parent.add_body(name=unused_name(spec.bodies, PAYLOAD_BODY), pos=p["pos"], ipos=[0.0, 0.0, 0.0],
                        explicitinertial=True, mass=p["mass"], inertia=[PAYLOAD_INERTIA] * 3)
    for pattern, factor in v.get("mass_scale", {}).items():
        factor = 1.0 if "mass_scale" in drawn else factor
        for body in _matching(f"{where}: mass_scale", pattern, bodies):
            if body.explicitinertial and not (from_geoms and body.geoms):  # the same shape, denser
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
                 if (g.name and name_matches(pattern, g.name)) or name_matches(pattern, b.name)]
        if not geoms:
            names = ", ".join([b.name for b in bodies if b.name] + [g.name for b in bodies for g in b.geoms if g.name])
            raise VariantError(f"{where}: friction_scale '{pattern}' matches no geom and no body of the robot "
                               f"({names[:200]})")
        for geom in geoms:  # overlapping patterns multiply, as mass and actuator scales do
            scaled.setdefault(id(geom), [geom, 1.0])[1] *= factor
    for geom, factor in scaled.values():
        # MuJoCo takes the larger friction of two geoms of equal priority, so scaling the robot's geom alone would
        # change nothing on a grippier ground: the geom takes the parameters its ground contacts had, a priority that
        # lets it decide them, and the factor on their sliding friction (a geom that decided them already keeps its
        # own: a foot of priority 1 slides at its own friction, times the factor)
        _ground_contact(spec, geom)
        friction = np.asarray(geom.friction, dtype=float).copy()
        friction[0] *= factor
        geom.friction = friction

