"""Assemble a MuJoCo scene (robot + terrain + objects) from the robot's MJCF with `mujoco.MjSpec`.

Objects (a free cube for in-hand manipulation) are appended after the robot, so the robot's DOFs are the leading
columns of qpos/qvel in every backend, and `RobotState` views only those."""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from flashnerd.robots import RobotSpec, get_robot
from flashnerd.robots.spec import DEFAULT_FLOOR_BITS
from flashnerd.robots.spec_file import actuator_force_limits, senses_subtree
from flashnerd.robots.variant import load_variant
from flashnerd.sim.actuation import actuation_for
from flashnerd.sim.naming import unused_name
from flashnerd.sim.randomize import randomization_for
from flashnerd.sim.terrain import TERRAINS, add_terrain
from flashnerd.sim.variant import apply_variant
from flashnerd.types import actuator_joint_columns

OBJECTS = ("cube",)
CUBE_SIZE = 0.065  # m, edge (Isaac Lab's in-hand cube)
CUBE_MASS = 0.1  # kg


def build_scene_spec(robot: RobotSpec, terrain: str = "flat", objects: tuple[str, ...] = (),
                     cube_mass: float = CUBE_MASS) -> mujoco.MjSpec:
    """Return an editable spec of `robot` standing on `terrain` (a ground plane, light and checker texture, and the
    terrain's boxes, see `sim/terrain.py`), with
    `objects` ("cube": a free cube at the robot's `object_spawn`) after the robot."""
    if terrain not in TERRAINS:
        raise ValueError(f"unknown terrain '{terrain}'; choose one of: {', '.join(TERRAINS)}")
    unknown = [o for o in objects if o not in OBJECTS]
    if unknown:
        raise ValueError(f"unknown scene object '{unknown[0]}'; choose from: {', '.join(OBJECTS)}")
    if objects and robot.object_spawn is None:
        raise ValueError(f"robot '{robot.name}' has no object_spawn; objects need one ('object_spawn:' in its spec "
                         "file)")
    try:
        spec = mujoco.MjSpec.from_file(str(robot.mjcf_path))
    except Exception as err:  # MuJoCo raises ValueError with a multi-line message
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"robot MJCF {robot.mjcf_path} failed to load: {first}") from err
    spec.option.timestep = robot.sim_dt
    # a robot's MJCF may bring its own floor (a user's often does); the scene adds the one every backend agrees on,
    # colliding as the MJCF's floor did (its contype/conaffinity; the robot's collision bits were chosen to meet it)
    planes = [g for g in spec.worldbody.geoms if g.type == mujoco.mjtGeom.mjGEOM_PLANE]
    bits = (planes[0].contype, planes[0].conaffinity) if planes else DEFAULT_FLOOR_BITS
    floor_name = planes[0].name if planes and planes[0].name else ""  # a <pair> or <exclude> may name it
    for geom in planes:
        spec.delete(geom)
    # the scene's floor takes the deleted plane's place (and name) before the compiles below, which resolve what
    # names it; a user's MJCF may already name its own texture "grid" or light "sun" (scene files often do): free names
    tex = spec.add_texture(
        name=unused_name(spec.textures, "grid"), type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER, rgb1=[0.22, 0.27, 0.32], rgb2=[0.15, 0.19, 0.23], width=256,
        height=256,
    )
    mat = spec.add_material(name=unused_name(spec.materials, "grid"), texrepeat=[8, 8], reflectance=0.1)
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = tex.name
    spec.worldbody.add_light(name=unused_name(spec.lights, "sun"), pos=[0, 0, 4], dir=[0, 0, -1],
                             type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)
    spec.worldbody.add_geom(
        name=floor_name or unused_name(spec.geoms, "floor"), type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05],
        material=mat.name, contype=bits[0], conaffinity=bits[1], condim=3, friction=[1.0, 0.005, 0.0001],
    )
    robot_model = fold_joint_force_limits(spec)
    add_robot_sensors(spec, robot, robot_model)
    if robot.variant is not None:  # before terrain and objects, so its regexes see the robot alone
        apply_variant(spec, robot.variant)
    add_terrain(spec, terrain, bits)
    if "cube" in objects:
        add_cube(spec, robot.object_spawn, mass=cube_mass, floor_bits=bits)
    return spec


def fold_joint_force_limits(spec: mujoco.MjSpec) -> mujoco.MjModel:
    """Write each joint actuator's whole force limit (`actuator_force_limits`: its forcerange within its joint's
    actuatorfrcrange) into its own forcerange and lift the joint's clamp. The physics is the same where the joint
    has this one actuator and no gravity compensation (those are folded; others keep both clamps), and the actuator
    force that the torque sensors and the learned backends read is then the torque the joint gets, and a variant's
    effort_scale scales the limit that acts. An actuator with no limit is left unlimited (forcerange zero), whatever
    forcerange it inherited. Returns the model it compiled (the robot's bodies and geoms, as this leaves them)."""
    model = spec.compile()
    limits = actuator_force_limits(model)  # (nu, 2)
    on_joint = model.actuator_trntype == int(mujoco.mjtTrn.mjTRN_JOINT)  # (nu,)
    drivers = np.bincount(model.actuator_trnid[on_joint, 0], minlength=model.njnt)  # (njnt,) joint actuators per joint
    alone = on_joint.all()  # a tendon or site actuator may also push a joint: then no clamp is lifted
    for a, act in enumerate(spec.actuators):
        j = int(model.actuator_trnid[a, 0])
        if on_joint[a] and model.jnt_actfrclimited[j] and not (alone and drivers[j] == 1
                                                                 and not model.jnt_actgravcomp[j]):
            continue  # the joint's clamp stays the only one that is exact
        limited = bool(np.isfinite(limits[a]).all())
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE if limited else mujoco.mjtLimited.mjLIMITED_FALSE
        act.forcerange = limits[a] if limited else np.zeros(2)
        if on_joint[a] and model.jnt_actfrclimited[j]:
            spec.joint(model.joint(j).name).actfrclimited = mujoco.mjtLimited.mjLIMITED_FALSE
    return model


def add_robot_sensors(spec: mujoco.MjSpec, robot: RobotSpec, model: mujoco.MjModel) -> None:
    """Add the sensors the analytical backends read, where the robot's MJCF lacks them: `<body>_contact` (the net
    contact force on each contact body, found + force) and `<joint>_torque` (the force of the actuator driving each
    joint; a `jointactuatorfrc` of the user's on that joint reads the same). An unnamed actuator is named after its
    joint. A sensor of the MJCF's own that has one of these names must be that sensor (the backends read its data by
    the name); anything else is a one-line error. `model` is `spec` compiled (its bodies and geoms as they are)."""
    have = {s.name: s for s in spec.sensors}
    unnamed = not all(model.body(i).name for i in range(1, model.nbody))  # only then can a sensor read a subtree
    subtree = {b for b in robot.all_contact_bodies if unnamed and senses_subtree(model, model.body(b).id)}
    for body in robot.all_contact_bodies:
        name = f"{body}_contact"
        # a body with collision geoms on unnamed bodies welded to it senses its subtree (MuJoCo's subtree1, the xbody)
        objtype, attr = ((mujoco.mjtObj.mjOBJ_XBODY, "subtree1") if body in subtree else
                         (mujoco.mjtObj.mjOBJ_BODY, "body1"))
        if name not in have:
            spec.add_sensor(name=name, type=mujoco.mjtSensor.mjSENS_CONTACT, objtype=objtype, objname=body,
                            intprm=[3, 3, 1])  # data found|force, reduce netforce, num 1
        elif not _is_sensor(have[name], mujoco.mjtSensor.mjSENS_CONTACT, objtype, body, [3, 3, 1]):
            raise _reserved_sensor(robot, name, f'<contact {attr}="{body}" data="found force" reduce="netforce" '
                                                'num="1"/>')
    by_joint = {a.target: a for a in spec.actuators if a.trntype == mujoco.mjtTrn.mjTRN_JOINT}
    for joint in robot.joint_names:
        act, name = by_joint.get(joint), f"{joint}_torque"
        if act is None:
            continue
        if name in have:
            # the joint's summed actuator force is the same number (one actuator per joint, gear 1, its clamp folded
            # into the actuator's) unless gravity compensation is added to it
            on_joint = (_is_sensor(have[name], mujoco.mjtSensor.mjSENS_JOINTACTFRC, mujoco.mjtObj.mjOBJ_JOINT, joint)
                        and not spec.joint(joint).actgravcomp)
            if not on_joint and (not act.name or not _is_sensor(have[name], mujoco.mjtSensor.mjSENS_ACTUATORFRC,
                                                                mujoco.mjtObj.mjOBJ_ACTUATOR, act.name)):
                raise _reserved_sensor(robot, name, f'<actuatorfrc actuator="{act.name or joint}"/>')
            continue
        if not act.name:
            act.name = f"{joint}_actuator"
        spec.add_sensor(name=name, type=mujoco.mjtSensor.mjSENS_ACTUATORFRC, objtype=mujoco.mjtObj.mjOBJ_ACTUATOR,
                        objname=act.name)


def _is_sensor(sensor, kind, objtype, objname: str, intprm: list[int] | None = None) -> bool:
    """Whether an `MjsSensor` is a `kind` sensor on `objname` (of `objtype`), with `intprm` leading its integer
    parameters where given, and no second object."""
    return (sensor.type == kind and sensor.objtype == objtype and sensor.objname == objname
            and sensor.reftype == mujoco.mjtObj.mjOBJ_UNKNOWN
            and (intprm is None or [int(v) for v in sensor.intprm[:len(intprm)]] == intprm))


def _reserved_sensor(robot: RobotSpec, name: str, expected: str) -> ValueError:
    return ValueError(f"the MJCF of robot '{robot.name}' has a sensor named '{name}' that is not what the backends "
                      f"read under that name ({expected}); rename that sensor, or make it that one")


def build_scene(robot: RobotSpec, terrain: str = "flat", objects: tuple[str, ...] = (),
                cube_mass: float = CUBE_MASS) -> mujoco.MjModel:
    """Compile `robot` on `terrain` (with `objects`) into an `MjModel`."""
    return build_scene_spec(robot, terrain, tuple(objects), cube_mass).compile()


def variant_robot(name: str, path: str | None, check: bool = True) -> RobotSpec:
    """The registered robot `name`, with the variant file `path` applied when given. With `check` its scene is
    compiled once here, so a regex that matches nothing, or an actuation or a randomization the robot cannot take,
    fails before any work (a caller that builds the scene next anyway passes False)."""
    robot = get_robot(name).with_variant(load_variant(path) if path else None)
    if path and check:
        scene = build_scene(robot)
        actuation_for(robot, scene)
        randomization_for(robot, scene)
    return robot


def add_cube(spec: mujoco.MjSpec, pos, size: float = CUBE_SIZE, mass: float = CUBE_MASS,
             floor_bits: tuple[int, int] = DEFAULT_FLOOR_BITS) -> None:
    """A free cube (edge `size`, `mass`) at `pos`; contype/conaffinity 3 collide with a hand whose geoms use bit 1 or
    2, and with the floor of contype/conaffinity `floor_bits`. Its body, joint and geom are named `cube` unless the
    robot took that name."""
    contype, conaffinity = 3 | floor_bits[1], 3 | floor_bits[0]
    body = spec.worldbody.add_body(name=unused_name(spec.bodies, "cube"), pos=list(pos))
    body.add_freejoint(name=unused_name(spec.joints, "cube"))
    body.add_geom(name=unused_name(spec.geoms, "cube"), type=mujoco.mjtGeom.mjGEOM_BOX, size=[size / 2] * 3,
                  mass=mass, contype=contype, conaffinity=conaffinity, condim=3, friction=[1.0, 0.005, 0.0001],
                  rgba=[0.85, 0.55, 0.15, 1.0])


def actuator_ctrl_limits(model: mujoco.MjModel) -> np.ndarray:
    """Control range (nu, 2) of every actuator, [-inf, inf] where the actuator is not ctrl-limited."""
    limited = model.actuator_ctrllimited.astype(bool)[:, None]  # (nu, 1)
    return np.where(limited, model.actuator_ctrlrange, np.array([-np.inf, np.inf]))


def position_actuators(model: mujoco.MjModel) -> dict[str, np.ndarray]:
    """kp, kd, effort_low, effort_high (each (nu,)) of the model's position actuators: the PD law and the torque
    limits (`actuator_force_limits`) MuJoCo applies."""
    limits = actuator_force_limits(model)  # (nu, 2)
    return {"kp": model.actuator_gainprm[:, 0].copy(), "kd": -model.actuator_biasprm[:, 2],
            "effort_low": limits[:, 0].copy(), "effort_high": limits[:, 1].copy()}


def pd_torque(law: dict[str, torch.Tensor], error: torch.Tensor, vel: torch.Tensor) -> torch.Tensor:
    """The torque (..., nu) of a position actuator `law` (kp, kd, effort_low, effort_high, each (nu,), as
    `position_actuators` gives them) at target errors and joint velocities (..., nu): kp e - kd v, clamped. A law
    with `no_load_speed` (nu,) (inf: none) clamps to its limits times max(0, 1 - |v| / no_load_speed), a DC motor's
    torque-speed line (sim/actuation.py applies the same in the analytical backends)."""
    raw = law["kp"] * error - law["kd"] * vel  # (..., nu)
    low, high = law["effort_low"], law["effort_high"]  # (nu,) each
    if "no_load_speed" in law:
        share = (1.0 - vel.abs() / law["no_load_speed"]).clamp_min(0.0)  # (..., nu) 1 where no line is set
        low, high = low * share, high * share  # (..., nu) each; identification sets lines on finite limits only
    return torch.minimum(torch.maximum(raw, low), high)


def robot_columns(robot: RobotSpec, model: mujoco.MjModel) -> tuple[int, int]:
    """(nq, nv) of the robot alone: its DOFs lead qpos/qvel of a scene with objects."""
    free = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    objects = free[1:] if robot.floating_base else free  # a floating robot's own free joint comes first
    if not objects:
        return model.nq, model.nv
    return int(model.jnt_qposadr[objects[0]]), int(model.jnt_dofadr[objects[0]])


def default_qpos(robot: RobotSpec, model: mujoco.MjModel) -> np.ndarray:
    """The robot's standing configuration (its qpos columns only): base at the spawn height, identity orientation,
    default joint angles (of the passive joints too where the robot's keyframe sets them)."""
    qpos = model.qpos0.copy()[:robot_columns(robot, model)[0]]
    if robot.floating_base:
        qpos[0:3] = (0.0, 0.0, robot.init_base_height)
        qpos[3:7] = (1.0, 0.0, 0.0, 0.0)
    qpos[actuator_joint_columns(model)[0]] = robot.default_joint_pos
    for joint, value in robot.passive_joint_pos:  # unactuated joints the keyframe places
        qpos[model.jnt_qposadr[joint]] = value
    return qpos


def sensor_address(model: mujoco.MjModel, robot: RobotSpec, name: str) -> int:
    """Address in sensordata of sensor `name`; a robot file without it is a one-line error."""
    try:
        return int(model.sensor_adr[model.sensor(name).id])
    except KeyError as err:
        raise ValueError(f"MJCF of '{robot.name}' lacks sensor '{name}'; add it to the robot file") from err


def check_actuators(robot: RobotSpec, model: mujoco.MjModel) -> None:
    """The MJCF must have one actuator per joint that the RobotSpec names (the action order)."""
    if model.nu != robot.num_joints:
        raise ValueError(f"MJCF of '{robot.name}' has {model.nu} actuators but its RobotSpec names "
                         f"{robot.num_joints} joints; make them agree")
