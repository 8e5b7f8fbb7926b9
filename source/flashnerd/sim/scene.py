"""Assemble a MuJoCo scene (robot + terrain) from the robot's MJCF with `mujoco.MjSpec`."""

from __future__ import annotations

import mujoco
import numpy as np

from flashnerd.robots import RobotSpec

TERRAINS = ("flat",)


def build_scene_spec(robot: RobotSpec, terrain: str = "flat") -> mujoco.MjSpec:
    """Return an editable spec of `robot` standing on `terrain` (a ground plane, light and checker texture)."""
    if terrain not in TERRAINS:
        raise ValueError(f"unknown terrain '{terrain}'; choose one of: {', '.join(TERRAINS)}")
    try:
        spec = mujoco.MjSpec.from_file(str(robot.mjcf_path))
    except Exception as err:  # MuJoCo raises ValueError with a multi-line message
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"robot MJCF {robot.mjcf_path} failed to load: {first}") from err
    spec.option.timestep = robot.sim_dt
    tex = spec.add_texture(
        name="grid", type=mujoco.mjtTexture.mjTEXTURE_2D, builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        rgb1=[0.22, 0.27, 0.32], rgb2=[0.15, 0.19, 0.23], width=256, height=256,
    )
    mat = spec.add_material(name="grid", texrepeat=[8, 8], reflectance=0.1)
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = tex.name
    spec.worldbody.add_light(name="sun", pos=[0, 0, 4], dir=[0, 0, -1], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)
    spec.worldbody.add_geom(
        name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05], material="grid",
        contype=1, conaffinity=1, condim=3, friction=[1.0, 0.005, 0.0001],
    )
    return spec


def build_scene(robot: RobotSpec, terrain: str = "flat") -> mujoco.MjModel:
    """Compile `robot` on `terrain` into an `MjModel`."""
    return build_scene_spec(robot, terrain).compile()


def default_qpos(robot: RobotSpec, model: mujoco.MjModel) -> np.ndarray:
    """The standing configuration: base at the spawn height, identity orientation, default joint angles."""
    qpos = model.qpos0.copy()
    if robot.floating_base:
        qpos[0:3] = (0.0, 0.0, robot.init_base_height)
        qpos[3:7] = (1.0, 0.0, 0.0, 0.0)
    actuated_qpos = model.jnt_qposadr[model.actuator_trnid[:, 0]]  # (nu,) qpos address of each actuated joint
    qpos[actuated_qpos] = robot.default_joint_pos
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
