"""A robot from its own MJCF and a spec file outside the package: derivation, contact spheres exact against MuJoCo's
collision distances, sensors the backends add, one-line errors, and the whole pipeline (record, fit, bench model,
train on the velocity task, eval) with no change to the package."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np
import pytest
import torch
from conftest import grouped_hound

import flashnerd.robots as robots
from flashnerd.cli.main import main
from flashnerd.contacts import ContactRowDetector, contact_features
from flashnerd.data.dataset import load_dataset
from flashnerd.dynamics import make_dynamics
from flashnerd.envs import DoneTerm, mdp
from flashnerd.envs.registry import task_cfgs, with_robot
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.robots import RobotFileError, get_robot
from flashnerd.robots.spec_file import actuator_force_limits, collision_probes
from flashnerd.robots.variant import load_variant
from flashnerd.sim.scene import add_cube, build_scene, build_scene_spec, default_qpos

HOUND = Path(__file__).parent / "assets" / "hound"
TASK = "FlashNeRD-Velocity-Flat-Anymal-C-v0"


@pytest.fixture(scope="module")
def hound_dir(tmp_path_factory) -> Path:
    """The hound copied to a folder of its own, as a user keeps a robot (MJCF, meshes, spec file)."""
    root = tmp_path_factory.mktemp("user") / "hound"
    shutil.copytree(HOUND, root)
    return root


@pytest.fixture
def hound(hound_dir):
    return get_robot(str(hound_dir / "hound.yaml"))


def _write_spec(folder: Path, text: str, mjcf: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if mjcf is not None:
        (folder / "robot.xml").write_text(mjcf)
    (folder / "robot.yaml").write_text(text)
    return folder / "robot.yaml"


def test_spec_file_derives_the_robot_from_its_mjcf(hound, hound_dir):
    model = mujoco.MjModel.from_xml_path(str(hound_dir / "hound.xml"))
    actuated = [model.joint(model.actuator_trnid[a, 0]).name for a in range(model.nu)]
    assert hound.name == "hound" and list(hound.joint_names) == actuated
    home = model.key("home").qpos
    adr = [model.jnt_qposadr[model.joint(j).id] for j in hound.joint_names]
    assert np.allclose(hound.default_joint_pos, home[adr]) and hound.init_base_height == pytest.approx(home[2])
    assert hound.floating_base and hound.control_dt == pytest.approx(0.02)
    assert hound.contact_bodies["base"] == ("base",)
    assert hound.contact_bodies["feet"] == ("FL_calf", "FR_calf", "RL_calf", "RR_calf")  # the leaves of the tree
    assert hound.contact_bodies["thighs"] == ("FL_thigh", "FR_thigh", "RL_thigh", "RR_thigh")
    assert hound.undesired_contacts == ("thighs",)
    # base box: 8 corners; per leg a thigh capsule, a calf capsule and a foot sphere; the meshes are visual
    assert len(hound.probes) == 8 + 4 * 3
    assert hound.stiffness == 40.0 and hound.effort_limit == 25.0
    assert get_robot("hound") is hound  # known by name once read


def test_contact_probes_reach_the_floor_exactly_as_mujoco_measures_each_geom():
    """For spheres, capsules and boxes, the lowest point of a geom's probes is the geom's signed distance to a plane, as
    MuJoCo's collision pipeline (mj_geomDistance) computes it, in random poses above and into the floor."""
    xml = """<mujoco><worldbody><geom name="floor" type="plane" size="0 0 1"/>
      <body name="b" pos="0 0 0.5"><freejoint/>
        <geom name="s" type="sphere" size="0.05" pos="0.1 0.02 -0.03"/>
        <geom name="c" type="capsule" size="0.03 0.12" pos="-0.05 0.04 0.01" euler="0.4 0.9 0.2"/>
        <geom name="x" type="box" size="0.07 0.04 0.02" pos="0.02 -0.1 0.05" euler="-0.3 0.2 1.1"/>
      </body></worldbody></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    probes = collision_probes(model)
    geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] == 1]
    per_geom = [1, 1, 8]  # a sphere, a capsule (one segment probe), a box's corners
    assert len(probes) == sum(per_geom) and probes[1].to is not None
    rng = np.random.default_rng(0)
    floor = model.geom("floor").id
    for _ in range(50):
        quat = rng.normal(size=4)
        data.qpos[:] = (*rng.uniform(-0.3, 0.3, 2), rng.uniform(-0.05, 0.25), *(quat / np.linalg.norm(quat)))
        mujoco.mj_kinematics(model, data)
        start = 0
        rot = data.xmat[1].reshape(3, 3)
        for g, k in zip(geoms, per_geom):
            ends = [e for p in probes[start:start + k] for e in ((p.pos, p.radius), (p.to or p.pos, p.radius))]
            low = min(float((data.xpos[1] + rot @ np.asarray(e))[2]) - r for e, r in ends)
            start += k
            exact = mujoco.mj_geomDistance(model, data, floor, g, 1.0, None)
            assert low == pytest.approx(exact, abs=1e-7)


def test_contact_rows_of_capsules_and_spheres_match_mujoco_against_boxes_and_the_ground(hound):
    """Every (probe, scene geom) pair of the hound's capsule legs and sphere feet on the blocks terrain (boxes and
    ramps): the detector's signed distance and nearest scene point against mj_geomDistance between the geoms."""
    model = build_scene(hound, "blocks")
    det = ContactRowDetector(hound, model, max_rows=8)
    robot_geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0
                   and (model.geom_contype[g] or model.geom_conaffinity[g])]
    probe_geom = [g for g in robot_geoms for _ in range(8 if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX else 1)]
    assert len(probe_geom) == len(hound.probes)
    scene = [model.geom("floor").id] + [g for g in range(model.ngeom) if model.geom_bodyid[g] == 0
                                        and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX]
    gen = torch.Generator().manual_seed(5)
    u = lambda *shape: torch.rand(*shape, generator=gen)  # noqa: E731
    boxes = torch.as_tensor(model.geom_pos[scene[1:]], dtype=torch.float32)  # (B, 3)
    n = 64
    qpos = torch.as_tensor(model.qpos0, dtype=torch.float32).repeat(n, 1)
    qpos[:, :2] = boxes[torch.randint(len(boxes), (n,), generator=gen), :2] + 0.6 * (u(n, 2) - 0.5)  # near a box
    qpos[:, 2] = 0.15 + 0.35 * u(n)
    quat = torch.randn(n, 4, generator=gen)
    qpos[:, 3:7] = quat / quat.norm(dim=1, keepdim=True)
    qpos[:, 7:] = torch.tensor(hound.default_joint_pos) + 0.8 * (u(n, 12) - 0.5)
    dist, point, _, _ = det._pairs(det._ends(qpos))  # (N, P, G), (N, P, G, 3)
    data = mujoco.MjData(model)
    fromto = np.zeros(6)
    checked = {"capsule": 0, "sphere": 0}
    for w in range(n):
        data.qpos[:] = qpos[w].double().numpy()
        mujoco.mj_kinematics(model, data)
        for i, g in enumerate(probe_geom):
            kind = mujoco.mjtGeom(model.geom_type[g]).name.removeprefix("mjGEOM_").lower()
            if kind == "box":
                continue  # a box's corners are exact against a plane only (the test above)
            for j, s in enumerate(scene):
                exact = mujoco.mj_geomDistance(model, data, s, g, 0.5, fromto)
                if exact >= 0.5:
                    continue
                ref = _dense_distance(model, data, g, s)
                assert dist[w, i, j].item() == pytest.approx(ref, abs=1e-4), (kind, w, i, j)
                if ref > 1e-3:  # separated: MuJoCo's distance agrees, and the row's point is a nearest one (near
                    # parallel faces there are many: the point need not be MuJoCo's, but its gap must be the distance)
                    assert dist[w, i, j].item() == pytest.approx(exact, abs=2e-5), (kind, w, i, j)
                    gap = _segment_gap(model, data, g, point[w, i, j].double().numpy())
                    assert gap == pytest.approx(exact, abs=1e-4), (kind, w, i, j)
                checked[kind] += j > 0  # pairs with a box
    assert checked["capsule"] > 100 and checked["sphere"] > 20, checked


def _dense_distance(model: mujoco.MjModel, data: mujoco.MjData, g: int, scene: int) -> float:
    """Signed distance of robot geom `g` (a sphere or a capsule) to scene geom `scene` (the floor or a box) by brute
    force: the scene's signed distance at 4001 points along the geom's segment, less its radius. (MuJoCo's own
    capsule-box distance is wrong for a capsule deep inside a thin box, so penetrations are checked against this.)"""
    center, axis = data.geom_xpos[g], data.geom_xmat[g].reshape(3, 3)[:, 2]
    half_len = model.geom_size[g][1] if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE else 0.0
    points = center + np.outer(np.linspace(-1, 1, 4001) * half_len, axis)  # (S, 3)
    if model.geom_type[scene] == mujoco.mjtGeom.mjGEOM_PLANE:
        return float(points[:, 2].min() - model.geom_size[g][0])
    local = (points - data.geom_xpos[scene]) @ data.geom_xmat[scene].reshape(3, 3)  # (S, 3) in the box frame
    q = np.abs(local) - model.geom_size[scene]
    sdf = np.linalg.norm(np.maximum(q, 0.0), axis=1) + np.minimum(q.max(axis=1), 0.0)
    return float(sdf.min() - model.geom_size[g][0])


def _segment_gap(model: mujoco.MjModel, data: mujoco.MjData, g: int, point: np.ndarray) -> float:
    """Distance from `point` to the surface of robot geom `g` (a sphere or a capsule), outside it."""
    center, axis = data.geom_xpos[g], data.geom_xmat[g].reshape(3, 3)[:, 2]
    half_len = model.geom_size[g][1] if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE else 0.0
    along = np.clip(np.dot(point - center, axis), -half_len, half_len)
    return float(np.linalg.norm(point - center - along * axis) - model.geom_size[g][0])


def test_backends_add_the_sensors_a_bare_mjcf_lacks(hound):
    model = build_scene(hound)
    for body in hound.all_contact_bodies:
        assert model.sensor(f"{body}_contact").type == mujoco.mjtSensor.mjSENS_CONTACT
    for joint in hound.joint_names:
        assert model.sensor(f"{joint}_torque").type == mujoco.mjtSensor.mjSENS_ACTUATORFRC
    # Standing in its home pose, the hound holds itself up on its feet; the base touches nothing.
    dyn = make_dynamics("mujoco", hound, num_worlds=2)
    ctrl = torch.tensor(hound.default_joint_pos).repeat(2, 1)
    for _ in range(100):  # 2 s
        dyn.step(ctrl)
    state = dyn.state()
    assert (state.qpos[:, 2] > 0.25).all()
    feet = [hound.all_contact_bodies.index(b) for b in hound.contact_bodies["feet"]]
    force = state.contact_force
    assert (force[:, feet] > 5.0).all() and (force[:, 0] == 0).all()
    weight = mujoco.mj_getTotalmass(model) * 9.81
    assert force[:, feet].sum(1).mean() == pytest.approx(weight, rel=0.05)  # the feet carry the robot's weight
    dyn.close()


def test_the_velocity_task_runs_a_robot_from_a_spec_file(hound, hound_dir):
    env = gym.make(TASK, num_envs=4, robot=str(hound_dir / "hound.yaml")).unwrapped
    assert env.robot.name == "hound" and env.num_actions == 12
    obs, *_ = env.step(torch.zeros(4, 12))
    assert torch.isfinite(obs["policy"]).all()
    with pytest.raises(ValueError, match="is written for robot 'microduck'"):
        gym.make("FlashNeRD-Roll-Flat-Microduck-v0", num_envs=2, robot=str(hound_dir / "hound.yaml"))


def _shuffled_hound(folder: Path, hound_dir: Path) -> Path:
    """The hound with its actuators listed by joint kind (all abductions, then hips, then knees: not tree order) and a
    passive, spring-loaded tail hinge as the base's first child (so every leg joint's qpos column moves by one), left
    unnamed as MJCFs often leave their passive joints."""
    xml = (hound_dir / "hound.xml").read_text()
    lines = re.findall(r"\n    <position [^\n]*/>", xml)
    by_kind = sorted(lines, key=lambda line: ("abduction", "hip", "knee").index(re.search(r'class="(\w+)"',
                                                                                         line).group(1)))
    xml = xml.replace("".join(lines), "".join(by_kind))
    tail = ('<body name="tail" pos="-0.2 0 0.02"><joint axis="0 1 0" stiffness="5" damping="0.2" '
            'range="-1 1"/><geom class="visual" type="capsule" size="0.01" fromto="0 0 0 -0.15 0 0"/>'
            '<inertial mass="0.1" pos="-0.07 0 0" diaginertia="0.0002 0.0002 0.00001"/></body>\n'
            '      <body name="FL_hip"')
    xml = xml.replace('<body name="FL_hip"', tail, 1)
    legs = "0 0.8 -1.5  " * 4
    xml = xml.replace(f'qpos="0 0 0.33 1 0 0 0  {legs.strip()}"', f'qpos="0 0 0.33 1 0 0 0  0.3  {legs.strip()}"')
    xml = xml.replace(f'ctrl="{legs.strip()}"', 'ctrl="' + " ".join(["0"] * 4 + ["0.8"] * 4 + ["-1.5"] * 4) + '"')
    folder.mkdir(parents=True, exist_ok=True)
    for item in hound_dir.iterdir():
        if item.is_dir():
            shutil.copytree(item, folder / item.name, dirs_exist_ok=True)
    (folder / "hound.xml").write_text(xml)
    (folder / "hound.yaml").write_text((hound_dir / "hound.yaml").read_text() + "name: hound_shuffled\n")
    return folder / "hound.yaml"


@pytest.mark.parametrize("backend", ["mujoco", "flashnerd"])
def test_actions_and_joint_observations_follow_the_actuators_whatever_the_mjcfs_joint_order(tmp_path, hound_dir,
                                                                                          backend):
    """A robot whose actuators are not in tree order and which has a passive joint: the env's joint positions and
    velocities are the actuated joints' own columns in actuator order (read from MuJoCo's model by name), a reset puts
    each joint near its own default angle and leaves the passive joint alone, and the robot stands under actions of
    zero (it fell within 2 s when the env read the trailing qpos columns as the joints)."""
    spec = _shuffled_hound(tmp_path / "shuffled", hound_dir)
    robot = get_robot(str(spec))
    assert robot.joint_names[:4] == ("FL_hip_joint", "FR_hip_joint", "RL_hip_joint", "RR_hip_joint")
    model = mujoco.MjModel.from_xml_path(str(spec.parent / "hound.xml"))
    qadr = [int(model.jnt_qposadr[model.joint(j).id]) for j in robot.joint_names]
    vadr = [int(model.jnt_dofadr[model.joint(j).id]) for j in robot.joint_names]
    tail = int(model.jnt_qposadr[model.body_jntadr[model.body("tail").id]])
    assert qadr != list(range(8, 20)) and tail == 7
    kwargs = {}
    if backend == "flashnerd":  # a model of this robot: its layout is all the test needs, not its accuracy
        pytest.importorskip("h5py")
        data, ckpt = tmp_path / "d.h5", tmp_path / "m.safetensors"
        assert main(["record", "--robot", str(spec), "--num_worlds", "4", "--steps", "20", "--traj_len", "20",
                     "--out", str(data)]) == 0
        assert main(["fit", "--data", str(data), "--out", str(ckpt), "--max_steps", "2", "--size", "cpu",
                     "--contact_head_steps", "0"]) == 0
        kwargs = {"checkpoint": str(ckpt)}
    env = gym.make(TASK, num_envs=8, robot=str(spec), dynamics=backend, **kwargs).unwrapped
    env.reset(seed=0)
    state = env.state
    assert torch.equal(state.joint_pos, state.qpos[:, qadr]) and torch.equal(state.joint_vel, state.qvel[:, vadr])
    default = torch.tensor(robot.default_joint_pos)
    ratio = state.joint_pos[:, default != 0] / default[default != 0]  # reset: default angle times a factor
    low, high = env.cfg.events["reset_robot_joints"].params["position_range"]
    assert ((ratio >= low - 1e-5) & (ratio <= high + 1e-5)).all()
    assert torch.allclose(state.qpos[:, tail], torch.tensor(0.3))  # the passive joint starts where the keyframe has it
    steps = 100 if backend == "mujoco" else 2  # 2 s of zero actions (the default targets) in MuJoCo
    fell = torch.zeros(8, dtype=torch.bool)
    for _ in range(steps):
        obs, _, terminated, _, _ = env.step(torch.zeros(8, 12))
        fell |= terminated.cpu()
    assert torch.isfinite(obs["policy"]).all() and env.joint_acc.shape == (8, 12)
    if backend == "mujoco":
        assert not fell.any()
    env.close()


def test_a_users_sensor_under_a_name_the_backends_read_must_be_that_sensor(tmp_path, hound_dir):
    """A touch sensor named `FL_calf_contact`, or a torque sensor of the wrong kind under `<joint>_torque`, would be
    read as the net contact force or the actuator torque: one-line errors. A user's own sensor that is the right one
    is used as it is."""
    xml = (hound_dir / "hound.xml").read_text()
    site = '<site name="fl_tip" pos="0 0 -0.2" size="0.02"/>'
    cases = (('<touch name="FL_calf_contact" site="fl_tip"/>', "sensor named 'FL_calf_contact'"),
             ('<contact name="base_contact" body1="base" data="found" reduce="mindist"/>',
              "sensor named 'base_contact'"),
             ('<jointactuatorfrc name="FL_hip_joint_torque" joint="FR_hip_joint"/>', "'FL_hip_joint_torque'"),
             ('<jointactuatorfrc name="FL_hip_joint_torque" joint="FL_hip_joint"/>', None),
             ('<contact name="base_contact" body1="base" data="found force" reduce="netforce" num="1"/>', None))
    for k, (sensor, message) in enumerate(cases):
        edited = xml.replace('<geom name="FL" class="foot"', site + '<geom name="FL" class="foot"', 1)
        edited = edited.replace("</actuator>", f"</actuator>\n  <sensor>{sensor}</sensor>", 1)
        spec = _write_spec(tmp_path / f"s{k}", f"mjcf: robot.xml\nname: hound_sensor{k}\n", edited)
        shutil.copytree(hound_dir / "meshes", spec.parent / "meshes")
        robot = get_robot(str(spec))
        if message is None:
            model = build_scene(robot)
            own = re.search(r'name="([^"]+)"', sensor).group(1)  # kept as the user wrote it, not added again
            assert model.sensor(own).id == 0 and model.nsensor == len(robot.all_contact_bodies) + 12
            continue
        with pytest.raises(ValueError, match=re.escape(message)) as err:
            build_scene(robot)
        assert "rename that sensor" in str(err.value) and "\n" not in str(err.value)


def test_named_bodies_welded_to_the_base_that_collide_are_in_the_base_group(tmp_path, hound_dir):
    """A head with a collision sphere welded to the base: the robot lying on it has fallen, so it joins `base` (a
    welded visual-only mast does not), and MuJoCo's contact with the head reaches the task's base termination."""
    head = ('<body name="head" pos="0.24 0 0.04"><geom class="collision" type="sphere" size="0.05"/>'
            '<body name="mast" pos="0 0 0.05"><geom class="visual" type="cylinder" size="0.01 0.05"/></body></body>\n'
            '      <body name="FL_hip"')
    xml = (hound_dir / "hound.xml").read_text().replace('<body name="FL_hip"', head, 1)
    spec = _write_spec(tmp_path / "headed", "mjcf: robot.xml\nname: hound_headed\n", xml)
    shutil.copytree(hound_dir / "meshes", spec.parent / "meshes")
    robot = get_robot(str(spec))
    assert robot.contact_bodies["base"] == ("base", "head")
    env = gym.make(TASK, num_envs=2, robot=str(spec)).unwrapped
    env.reset(seed=0)
    qpos = env.state.qpos.clone()
    qpos[:, 2] = 0.04  # nose down: the head on the floor
    qpos[:, 3:7] = torch.tensor([0.9239, 0.0, 0.3827, 0.0])  # pitched 45 degrees forward
    env.dyn.reset(torch.arange(2), qpos, torch.zeros_like(env.state.qvel))
    env.dyn.step(torch.tensor(robot.default_joint_pos).repeat(2, 1))
    assert (env.contact_force("base")[:, 1] > 1.0).all()
    env.close()


def test_a_robot_without_what_the_task_needs_is_refused(hound_dir):
    spec = str(hound_dir / "hound.yaml")
    cfg, _ = task_cfgs(TASK)
    hands = DoneTerm(mdp.illegal_contact, params={"group": "hands", "threshold": 1.0})
    with pytest.raises(ValueError, match="robot 'hound' has no contact group hands"):
        with_robot(dataclasses.replace(cfg, terminations={**cfg.terminations, "hands": hands}), spec)
    with pytest.raises(ValueError, match="robot 'franka' has a fixed base"):
        with_robot(cfg, "franka")
    assert with_robot(cfg, spec).robot == spec


@pytest.mark.parametrize("text, xml_edit, match", [
    ("mjcf: robot.xml\nfeet_regex: x\n", None, "unknown key 'feet_regex'"),
    ("mjcf: missing.xml\n", None, "does not exist"),
    ("mjcf: robot.xml\ncontact_bodies: {feet: '.*_toe'}\n", None, "'.*_toe' matches no name"),
    ("mjcf: robot.xml\nname: anymal_c\n", None, "which is built in"),
    ("mjcf: robot.xml\nname: 'two words'\n", None, "must be letters"),
    ("mjcf: robot.xml\ndecimation: 2.5\n", None, "decimation must be a whole number"),
    ("mjcf: robot.xml\nkeyframe: crouch\n", None, "no keyframe 'crouch'"),
    ("mjcf: robot.xml\ndefault_joint_pos: {'.*_calf_joint': 0.0}\n", None, "outside its range"),
    ("mjcf: robot.xml\n", ('type="capsule" size="0.025"', 'type="cylinder" size="0.025"'),
     "is a cylinder, which contact rows do not take exactly; set 'unsupported_geoms: bounding_box'"),
    ("mjcf: robot.xml\n", ('<position class="abduction" name="FL_hip"', '<motor name="FL_hip"'),
     "actuator 'FL_hip' is not a position actuator"),
    ("mjcf: robot.xml\n", ("<freejoint", "<joint type='ball'/><freejoint"), "failed to load"),
    ("mjcf: robot.xml\n", ("<worldbody>", "<worldbody><<"), r"failed to load: XML parse error 15: .* Line number=\d+"),
    # bodies beside the robot: a static rig before it, a crate or a body holding a floor after it
    ("mjcf: robot.xml\n", ("<worldbody>", '<worldbody><body name="rig" pos="0 0 2"><camera name="cam"/></body>'),
     "the first body is 'rig' and free joints move 'base'; .* move static bodies"),
    ("mjcf: robot.xml\n", ("</worldbody>", '<body name="crate" pos="2 0 0.1"><geom type="box" size="0.1 0.1 0.1"/>'
                                           '</body></worldbody>'), "body 'crate' beside the robot .* has collision"),
    ("mjcf: robot.xml\n", ("</worldbody>", '<body name="ground"><geom type="plane" size="5 5 0.1"/></body>'
                                           '</worldbody>'), "body 'ground' beside the robot"),
    # a servo's ctrlrange copied from its joint's range in degrees, however small
    ("mjcf: robot.xml\n", ('<compiler angle="radian"', '<compiler angle="degree"'), None),
    ("- just\n- a list\n", None, "must be a YAML mapping with an 'mjcf' key"),
    ("mjcf: robot.xml\ninit_joint_noise: [0.1, 0.2]\n", None, "lists 2 values for the 12 joint positions of qpos"),
    ("mjcf: robot.xml\nobject_spawn: [0.0, 0.0]\n", None, r"object_spawn must be \[x, y, z\]"),
    # MuJoCo reads nan and inf as numbers; the robot would step to NaN
    ("mjcf: robot.xml\n", ('damping="0.5"', 'damping="nan"'), "gives joint 'FL_hip_joint' dof_damping nan"),
    ("mjcf: robot.xml\n", ('<inertial mass="8.0"', '<inertial mass="inf"'), "gives body 'base' body_mass inf"),
    # a model built Y-up: its home pose rolls the base 90 degrees, and spawned level it would lie on its side
    ("mjcf: robot.xml\n", ('qpos="0 0 0.33 1 0 0 0', 'qpos="0 0 0.33 0.7071068 0.7071068 0 0'),
     "the floating base's z axis tilts 90 degrees from up in keyframe 'home'"),
    # a few bytes of XML that ask the compiler for gigabytes
    ("mjcf: robot.xml\n", ("<asset>", '<asset><hfield name="hf" nrow="60000" ncol="60000" size="1 1 1 1"/>'),
     "declares heightfields and textures of 54,932 MiB, more than this machine's memory holds"),
    ("mjcf: robot.xml\n", ("<asset>", '<asset><texture name="tx" type="cube" builtin="flat" width="40000" '
                                       'height="40000"/>'), "more than this machine's memory holds"),
])
def test_bad_spec_files_are_one_line_errors(tmp_path, hound_dir, text, xml_edit, match):
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="other"')
    if xml_edit is not None:
        xml = xml.replace(*xml_edit)
    if match is None:  # in degrees, the abduction joints' range and their ctrlrange both "-5 5": 5 rad, not 5 degrees
        xml = re.sub(r'range="(-?[\d.]+) (-?[\d.]+)"/><position ctrlrange',
                     lambda m: f'range="{math.degrees(float(m[1])):.4f} {math.degrees(float(m[2])):.4f}"/><position '
                               'ctrlrange', xml)  # every joint in degrees, its ctrlrange kept in radians
        xml = xml.replace('<joint axis="1 0 0" range="-45.8366 45.8366"/><position ctrlrange="-0.8 0.8"/>',
                          '<joint axis="1 0 0" range="-5 5"/><position ctrlrange="-5 5"/>')
        match = (r"ctrlrange \[-5, 5\], the numbers of its joint's range, which MuJoCo read in degrees as "
                 r"\[-0.08727, 0.08727\] rad")
    shutil.copytree(hound_dir / "meshes", tmp_path / "r" / "meshes")
    spec = _write_spec(tmp_path / "r", text, xml)
    with pytest.raises(RobotFileError, match=match) as err:
        get_robot(str(spec))
    assert "\n" not in str(err.value)


def test_a_home_pose_pitched_within_the_limit_loads_and_spawns_level(tmp_path, hound_dir):
    """A keyframe captured with the base pitched 25 degrees is a level robot's pose: it loads, and spawns level."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="pitched"')
    xml = xml.replace('qpos="0 0 0.33 1 0 0 0', 'qpos="0 0 0.33 0.9762960 0 0.2164396 0')
    shutil.copytree(hound_dir / "meshes", tmp_path / "r" / "meshes")
    robot = get_robot(str(_write_spec(tmp_path / "r", "mjcf: robot.xml\n", xml)))
    assert np.allclose(default_qpos(robot, build_scene(robot))[3:7], [1.0, 0.0, 0.0, 0.0])


def test_a_heightfield_declared_in_an_included_file_is_counted_before_mujoco_allocates_it(tmp_path, hound_dir):
    """MuJoCo allocates a heightfield's samples as it parses: 60000 x 60000 in a file the MJCF includes is refused
    before that (it once took the whole machine's memory)."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="other"')
    xml = xml.replace("<asset>", '<include file="terrain.xml"/><asset>')
    shutil.copytree(hound_dir / "meshes", tmp_path / "r" / "meshes")
    spec = _write_spec(tmp_path / "r", "mjcf: robot.xml\n", xml)
    (tmp_path / "r" / "terrain.xml").write_text('<mujoco><asset><hfield name="hf" nrow="60000" ncol="60000" '
                                               'size="1 1 1 1"/></asset></mujoco>')
    with pytest.raises(RobotFileError, match="declares heightfields and textures of 54,932 MiB"):
        get_robot(str(spec))


@pytest.mark.parametrize("edit, match", [
    # 100 x 100 x 100 spheres from three nested lines: MuJoCo multiplies replicate counts as it parses
    (("</worldbody>", '<replicate count="100" offset="0.01 0 0"><replicate count="100" offset="0 0.01 0"><replicate '
                      'count="100" offset="0 0 0.01"><geom type="sphere" size="0.001" contype="0" conaffinity="0"/>'
                      '</replicate></replicate></replicate></worldbody>'),
     r"failed to load: Caught an unknown exception! \(an allocation failed within the compile's 0.5 GiB and 60 s of "
     r"CPU: it declares more than a robot needs\)"),
    # an include of the terminal or a pipe: read in the bounded child, whose stdin is empty, it never blocks
    (("<asset>", '<include file="/dev/stdin"/><asset>'), "failed to load: .*"),
])
def test_an_mjcf_that_expands_past_its_limits_is_compiled_in_a_bounded_child_first(tmp_path, hound_dir, monkeypatch,
                                                                                    edit, match):
    """What a few lines ask MuJoCo to build (nested replicate counts, flexcomp grids, an image's size, a model
    attached from another file) is known only by compiling: a user's MJCF is compiled first in a child process with
    a memory and a CPU cap (here 0.5 GiB: the hound compiles in 0.25), and what fails there is one line."""
    import flashnerd.robots.spec_file as spec_file

    monkeypatch.setattr(spec_file, "COMPILE_MEMORY_BYTES", 1 << 29)
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="expanding"').replace(*edit)
    shutil.copytree(hound_dir / "meshes", tmp_path / "r" / "meshes")
    with pytest.raises(RobotFileError, match=match) as err:
        get_robot(str(_write_spec(tmp_path / "r", "mjcf: robot.xml\n", xml)))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("ctrl_in_degrees", [True, False])
def test_a_ctrlrange_written_in_degrees_is_refused_and_one_in_radians_is_kept(tmp_path, hound_dir, ctrl_in_degrees):
    """Under angle="degree" MuJoCo converts joint ranges but not ctrlrange: a ctrlrange copied from the joint's range
    in degrees would let targets through 57x too far. Refused with the radian values; one in radians loads as is."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="other"')
    xml = xml.replace('angle="radian"', 'angle="degree"')

    def in_degrees(match: re.Match) -> str:
        lo, hi = (math.degrees(float(v)) for v in match.group(2).split())
        ctrl = f"{lo:.6f} {hi:.6f}" if ctrl_in_degrees else match.group(2)
        return f'{match.group(1)}range="{lo:.6f} {hi:.6f}"/><position ctrlrange="{ctrl}"/>'

    xml, n = re.subn(r'(<joint axis="[^"]+" )range="([^"]+)"/><position ctrlrange="[^"]+"/>', in_degrees, xml)
    assert n == 3
    shutil.copytree(hound_dir / "meshes", tmp_path / "r" / "meshes")
    spec = _write_spec(tmp_path / "r", "mjcf: robot.xml\n", xml)
    if not ctrl_in_degrees:
        robot = get_robot(str(spec))
        model = mujoco.MjModel.from_xml_path(str(spec.parent / "robot.xml"))
        assert np.allclose(model.jnt_range[model.joint(robot.joint_names[0]).id], [-0.8, 0.8], atol=1e-6)
        return
    with pytest.raises(RobotFileError, match=r"ctrlrange \[-45.8366, 45.8366\], the numbers of its joint's range, "
                                             r"which MuJoCo read in degrees as \[-0\.8, 0\.8\] rad .* else write the "
                                             "ctrlrange in radians") as err:
        get_robot(str(spec))
    assert "\n" not in str(err.value)


def test_radian_ranges_in_an_mjcf_without_a_compiler_angle_are_named_as_the_likely_cause(tmp_path, hound_dir):
    """Without `<compiler angle>` MuJoCo reads angles in degrees: joint ranges written in radians become 57x
    narrower, and their ctrlrange (the same numbers) looks like degrees; the error names the missing angle first."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="noangle"')
    xml = xml.replace(' angle="radian"', "")
    shutil.copytree(hound_dir / "meshes", tmp_path / "r" / "meshes")
    with pytest.raises(RobotFileError, match=r"ctrlrange \[-0\.8, 0\.8\], the numbers of its joint's range, which "
                                             r"MuJoCo read in degrees as \[-0\.01396, 0\.01396\] rad "
                                             r"\(angle=\"degree\" is MuJoCo's default\); if the MJCF's angles are "
                                             r"radians, add <compiler angle=\"radian\"/>") as err:
        get_robot(str(_write_spec(tmp_path / "r", "mjcf: robot.xml\n", xml)))
    assert "\n" not in str(err.value)


def test_an_ellipsoid_of_equal_axes_is_its_sphere(tmp_path, hound_dir):
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="ell"')
    xml = xml.replace('<geom name="FL" class="foot" pos="0 0 -0.2"/>',
                      '<geom name="FL" class="foot" type="ellipsoid" size="0.022 0.022 0.022" pos="0 0 -0.2"/>')
    shutil.copytree(hound_dir / "meshes", tmp_path / "e" / "meshes")
    robot = get_robot(str(_write_spec(tmp_path / "e", "mjcf: robot.xml\n", xml)))  # no unsupported_geoms needed
    hound = get_robot(str(hound_dir / "hound.yaml"))
    assert robot.probes == hound.probes


def test_unsupported_geoms_take_their_bounding_box_when_asked(tmp_path, hound_dir):
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="cyl"')
    xml = xml.replace('type="capsule" size="0.025" fromto="0 0 0 0 0 -0.2"',
                      'type="cylinder" size="0.025 0.1" pos="0 0 -0.1"')
    shutil.copytree(hound_dir / "meshes", tmp_path / "c" / "meshes")
    robot = get_robot(str(_write_spec(tmp_path / "c", "mjcf: robot.xml\nunsupported_geoms: bounding_box\n", xml)))
    thigh = [p for p in robot.probes if p.body == "FL_thigh"]
    assert len(thigh) == 8 and min(p.pos[2] for p in thigh) == pytest.approx(-0.2)  # the cylinder's bottom face


def test_record_fit_bench_train_eval_a_robot_from_outside_the_package(hound_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    spec = str(hound_dir / "hound.yaml")
    data = tmp_path / "hound.h5"
    main(["record", "--robot", spec, "--num_worlds", "6", "--steps", "40", "--traj_len", "20", "--out", str(data)])
    robots._FROM_FILES.clear()  # as in a new process: fit finds the robot from the spec file the dataset names
    ckpt = tmp_path / "hound.safetensors"
    main(["fit", "--data", str(data), "--out", str(ckpt), "--max_steps", "3", "--batch_size", "8",
          "--ar_batch_size", "4", "--contact_head_steps", "5"])
    capsys.readouterr()
    main(["bench", "model", "--robot", spec, "--batch", "4", "--min_seconds", "0.05", "--models", "flashnerd"])
    bench = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert bench["robot"] == "hound" and bench["steps_per_s"]["flashnerd"]["4"] > 0
    main(["train", "--task", TASK, "--robot", spec, "--num_envs", "8", "--max_iterations", "1", "--eval_episodes",
          "2", "--dynamics", "flashnerd", "--dynamics_checkpoint", str(ckpt)])
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert trained["log_dir"].startswith("logs/rsl_rl/hound_flat/")
    main(["eval", "--task", TASK, "--robot", spec, "--num_envs", "2", "--episodes", "2"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["checkpoint"] == trained["checkpoint"]  # the newest run of the hound's experiment
    assert result["episodes"] == 2 and np.isfinite(result["mean_return"])
    main(["bench", "ppo", "--task", TASK, "--robot", spec, "--dynamics", "flashnerd", "--dynamics_checkpoint",
          f"flashnerd={ckpt}", "--num_envs", "4", "--max_iterations", "1", "--eval_episodes", "1", "--out_dir", "bp"])
    bench = json.loads((tmp_path / "bp" / "bench_ppo.json").read_text())
    assert bench["robot"] == spec and np.isfinite(bench["backends"]["flashnerd"]["eval_mujoco"]["mean_return"])
    assert bench["backends"]["flashnerd"]["dynamics_checkpoint"] == str(ckpt)  # the hound's model: loads on no other
    loop = ["improve", "--task", TASK, "--robot", spec, "--rounds", "1", "--iterations", "1", "--num_envs", "8",
            "--target_minutes", "0.05", "--target_worlds", "4", "--traj_len", "20", "--fit_budget", "2",
            "--eval_episodes", "2", "--contact_head_steps", "5", "--out_dir", "imp"]
    assert main(loop) == 2  # no model of the hound is shipped
    err = capsys.readouterr().err.strip()
    assert "no flashnerd model is shipped for robot 'hound'" in err and len(err.splitlines()) == 1, err
    assert main([*loop, "--dynamics_checkpoint", str(ckpt)]) == 0
    (row,) = json.loads((tmp_path / "imp" / "improve.json").read_text())["rounds"]
    rollouts = load_dataset(row["lineages"][0]["data"], get_robot(spec))  # checked against the hound's layout
    assert rollouts.attrs["robot"] == "hound" and rollouts.qpos.shape[0] > 0
    assert read_checkpoint(row["next_model"])["robot"] == "hound"


def test_mjwarp_steps_a_robot_from_outside_the_package_as_mujoco_does(hound):
    n, steps = 3, 25
    dyns = [make_dynamics(name, hound, n) for name in ("mjwarp", "mujoco")]
    gen = torch.Generator().manual_seed(3)
    qpos = torch.as_tensor(dyns[1].default_qpos(), dtype=torch.float32).repeat(n, 1)  # (n, nq)
    qpos[:, 7:] += 0.1 * torch.randn(n, hound.num_joints, generator=gen)
    for dyn in dyns:
        dyn.reset(torch.arange(n), qpos, torch.zeros(n, dyn.nv))
    stand = torch.tensor(hound.default_joint_pos).repeat(n, 1)
    worst = 0.0
    for _ in range(steps):
        ctrl = stand + 0.2 * torch.randn(n, hound.num_joints, generator=gen)
        for dyn in dyns:
            dyn.step(ctrl)
        worst = max(worst, (dyns[0].state().qpos - dyns[1].state().qpos).abs().max().item())
    assert worst < 1e-3
    feet = [hound.all_contact_bodies.index(b) for b in hound.contact_bodies["feet"]]
    assert dyns[0].state().contact_force[:, feet].sum(1).min() > 50.0  # standing on its feet in both
    for dyn in dyns:
        dyn.close()


def test_two_spec_files_for_different_robots_of_one_name_are_refused(tmp_path, hound_dir, hound, monkeypatch):
    monkeypatch.setattr(robots, "_FROM_FILES", dict(robots._FROM_FILES))  # the other 'hound' leaves with the test
    monkeypatch.setattr(robots, "_BY_PATH", dict(robots._BY_PATH))
    shutil.copytree(hound_dir, tmp_path / "copy")
    assert get_robot(str(tmp_path / "copy" / "hound.yaml")).model_hash() == hound.model_hash()  # a copy: the same
    (tmp_path / "copy" / "hound.xml").write_text((hound_dir / "hound.xml").read_text().replace('kp="40"', 'kp="60"'))
    with pytest.raises(RobotFileError, match="names robot 'hound', as .* does, for another robot"):
        get_robot(str(tmp_path / "copy" / "hound.yaml"))


def test_a_refused_or_removed_spec_file_does_not_block_the_robot_of_that_name(tmp_path, hound_dir, monkeypatch):
    """B, a changed copy of A under A's name, is refused and not held against A when A is edited; C, a true copy,
    is held against A while it is there (two files, two robots, one name) and no longer once removed."""
    monkeypatch.setattr(robots, "_FROM_FILES", dict(robots._FROM_FILES))
    monkeypatch.setattr(robots, "_BY_PATH", dict(robots._BY_PATH))
    xml = (hound_dir / "hound.xml").read_text()

    def write(folder: str, kp: str) -> str:
        if not (tmp_path / folder / "meshes").exists():
            shutil.copytree(hound_dir / "meshes", tmp_path / folder / "meshes")
        return str(_write_spec(tmp_path / folder, "mjcf: robot.xml\nname: hound_x\n",
                               xml.replace('kp="40"', f'kp="{kp}"')))

    a, b = write("a", "40"), write("b", "60.0")
    assert get_robot(a).stiffness == 40.0
    with pytest.raises(RobotFileError, match="names robot 'hound_x', as .*/a/robot.yaml' does, for another robot"):
        get_robot(b)
    write("a", "70.0")
    assert get_robot(a).stiffness == 70.0  # the refused B is not held against A
    c = write("c", "70.0")
    assert get_robot(c).stiffness == 70.0  # a copy of A: the same robot
    write("a", "75.00")
    with pytest.raises(RobotFileError, match="as .*/c/robot.yaml' does, for another robot"):
        get_robot(a)
    shutil.rmtree(tmp_path / "c")
    assert get_robot(a).stiffness == 75.0  # C is gone: nothing to confuse A with


def test_an_mjcf_without_a_model_name_names_the_robot_after_its_file(tmp_path, hound_dir):
    """MuJoCo calls every model without `<mujoco model=...>` "MuJoCo Model": two such robots are two robots."""
    xml = (hound_dir / "hound.xml").read_text().replace('<mujoco model="hound">', "<mujoco>")
    for stem in ("terrier", "beagle"):
        folder = tmp_path / stem
        shutil.copytree(hound_dir / "meshes", folder / "meshes")
        (folder / f"{stem}.xml").write_text(xml)
        (folder / "robot.yaml").write_text(f"mjcf: {stem}.xml\n")
        assert get_robot(str(folder / "robot.yaml")).name == stem


def test_a_floor_in_the_users_mjcf_and_site_only_leaf_bodies_are_handled(tmp_path, hound_dir):
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="tipped"')
    xml = xml.replace('<geom name="FL" class="foot" pos="0 0 -0.2"/>',
                      '<geom name="FL" class="foot" pos="0 0 -0.2"/><body name="FL_tip" pos="0 0 -0.2"><site/></body>')
    xml = xml.replace("<worldbody>", '<worldbody><geom name="their_floor" type="plane" size="5 5 0.1"/>')
    xml = xml.replace("<keyframe>", '<contact><pair geom1="their_floor" geom2="FL" friction="0.7 0.7"/></contact>'
                                    "<keyframe>")  # the scene's floor keeps the name a pair gives it
    shutil.copytree(hound_dir / "meshes", tmp_path / "t" / "meshes")
    robot = get_robot(str(_write_spec(tmp_path / "t", "mjcf: robot.xml\n", xml)))
    assert robot.contact_bodies["feet"] == ("FL_calf", "FR_calf", "RL_calf", "RR_calf")  # the tip has no geometry
    model = build_scene(robot)
    planes = [model.geom(g).name for g in range(model.ngeom) if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE]
    assert planes == ["their_floor"]  # one floor, the scene's, under the name the MJCF gave its own


def test_the_ground_collides_with_the_robot_as_the_floor_of_its_mjcf_did(tmp_path, hound_dir):
    """A robot whose collision geoms use bit 2, standing in its MJCF on a floor of bit 2, stands on the scene's floor,
    boxes and heightfield (they take its floor's bits); without that floor (MuJoCo's default bits 1 would meet none
    of its geoms) it is refused in one line instead of falling through the ground."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="bits"')
    xml = xml.replace('group="3" contype="0" conaffinity="1"', 'group="3" contype="2" conaffinity="2"')
    shutil.copytree(hound_dir / "meshes", tmp_path / "b" / "meshes")
    floor = '<worldbody><geom name="their_floor" type="plane" size="5 5 0.1" contype="2" conaffinity="2"/>'
    robot = get_robot(str(_write_spec(tmp_path / "b", "mjcf: robot.xml\n", xml.replace("<worldbody>", floor))))
    assert robot.probes and robot.contact_bodies["feet"] == ("FL_calf", "FR_calf", "RL_calf", "RR_calf")
    for terrain in ("flat", "platforms", "rough"):
        model = build_scene(robot, terrain)
        ground = [g for g in range(model.ngeom) if model.geom_bodyid[g] == 0 and model.geom_contype[g]]
        assert len(ground) > (terrain != "flat")
        assert all((model.geom_contype[g], model.geom_conaffinity[g]) == (2, 2) for g in ground), terrain
    model = build_scene(robot)
    data = mujoco.MjData(model)
    data.qpos[:model.nq] = default_qpos(robot, model)
    data.ctrl[:] = robot.default_joint_pos
    for _ in range(round(1.0 / model.opt.timestep)):
        mujoco.mj_step(model, data)
    assert data.qpos[2] > 0.5 * robot.init_base_height  # standing, not falling through the floor
    spec = build_scene_spec(robot)
    floor = next(g for g in spec.worldbody.geoms if g.type == mujoco.mjtGeom.mjGEOM_PLANE)
    floor.contype, floor.conaffinity = 4, 4  # bits the cube's own (1 and 2, for hands) do not meet
    add_cube(spec, (1.0, 0.0, 0.5), floor_bits=(4, 4))  # a manipulated object lands on any floor
    model = spec.compile()
    data = mujoco.MjData(model)
    for _ in range(round(1.0 / model.opt.timestep)):
        mujoco.mj_step(model, data)
    assert abs(data.body("cube").xpos[2] - 0.065 / 2) < 2e-3
    shutil.copytree(hound_dir / "meshes", tmp_path / "c" / "meshes")
    with pytest.raises(RobotFileError, match=r"collision geoms collides with the ground \(contype 1, conaffinity 1"):
        get_robot(str(_write_spec(tmp_path / "c", "mjcf: robot.xml\n", xml.replace('model="bits"', 'model="bare"'))))


@pytest.mark.parametrize("name", ["lynx", "tortoise"])
def test_quadrupeds_authored_unlike_the_hound_stand_and_their_probes_touch_where_mujocos_feet_do(name):
    """Two more quadrupeds from outside the package, written the other ways MJCFs are (tests/assets/<name>: lynx has
    <general> actuators grouped by joint kind, torque limits as actuatorfrcrange, foot bodies, a collision head and
    geoms of contype 2; tortoise is a scene file including the robot, in degrees, with knee joints whose ref is 60
    degrees, no force limits and its keyframe home yawed). Each stands in MuJoCo on its feet alone, and the learned
    backends' probes of its feet touch the ground exactly when MuJoCo's feet carry it."""
    robot = get_robot(str(Path(__file__).parent / "assets" / name / f"{name}.yaml"))
    dyn = make_dynamics("mujoco", robot, num_worlds=2)
    ctrl = torch.tensor(robot.default_joint_pos).repeat(2, 1)  # (2, nu)
    for _ in range(round(1.5 / robot.control_dt)):
        dyn.step(ctrl)
    state = dyn.state()
    feet = [robot.all_contact_bodies.index(b) for b in robot.contact_bodies["feet"]]
    weight = mujoco.mj_getTotalmass(build_scene(robot)) * 9.81
    assert len(feet) == 4 and (state.qpos[:, 2] > 0.6 * robot.init_base_height).all()
    torch.testing.assert_close(state.contact_force[:, feet].sum(1), torch.full((2,), weight), rtol=0.02, atol=0.0)
    assert (state.contact_force[:, [0]] == 0).all()  # the base group touches nothing
    probes = contact_features(robot, build_scene(robot))
    _, distance = probes.features_and_distance(state.qpos, state.qvel)  # (2, P)
    for body in robot.contact_bodies["feet"]:
        on_foot = [i for i, p in enumerate(robot.probes) if p.body == body]
        assert distance[:, on_foot].amin(dim=1).abs().max() < 3e-3, body  # MuJoCo's feet sink about a millimetre
    dyn.close()


def test_contact_rows_take_the_world_boxes_that_collide_and_not_visual_ones(tmp_path, hound_dir):
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="boxed"')
    boxes = ('<worldbody><geom name="marker" type="box" size="0.3 0.3 0.01" pos="2 0 0.01" contype="0" '
             'conaffinity="0"/><geom name="step" type="box" size="0.3 0.3 0.05" pos="-2 0 0.05"/>')
    shutil.copytree(hound_dir / "meshes", tmp_path / "x" / "meshes")
    robot = get_robot(str(_write_spec(tmp_path / "x", "mjcf: robot.xml\n", xml.replace("<worldbody>", boxes))))
    detector = ContactRowDetector(robot, build_scene(robot))
    torch.testing.assert_close(detector.box_center, torch.tensor([[-2.0, 0.0, 0.05]]))  # the step, not the marker


def test_a_dataset_naming_a_hostile_spec_path_is_a_one_line_error(tmp_path):
    from flashnerd.robots import robot_of_record

    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (2 << 20))
    not_yaml = tmp_path / "x.yaml"
    not_yaml.write_text("just a string")
    for spec, match in ((str(big), "a spec file is a few lines"), (str(not_yaml), "must be a YAML mapping"),
                        (str(tmp_path / "gone.yaml"), "which is not here")):
        with pytest.raises(ValueError, match=match) as err:
            robot_of_record("someone_elses_robot", spec)
        assert "\n" not in str(err.value)


def test_the_feet_are_what_the_robot_stands_on(tmp_path, hound_dir):
    """A head welded to the base, an IMU mount, a foot in a leaf body of its own on one leg and a shin capsule in an
    unnamed welded body beside it: the derived feet are still one body per leg, the lowest in the home pose."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="headed"')
    xml = xml.replace('<body name="FL_hip"', '<body name="head" pos="0.24 0 0.03"><geom class="collision" '
                      'type="sphere" size="0.04"/></body><body name="imu" pos="0 0 0.05"><site/></body>'
                      '<body name="FL_hip"', 1)
    shin = '<geom class="collision" type="capsule" size="0.015" fromto="0 0 -0.02 0 0 -0.18"/>'
    xml = xml.replace(shin, f'<body pos="0.01 0 0" euler="0 0.3 0">{shin}</body>', 1)  # FL's shin, unnamed
    xml = xml.replace('<geom name="FL" class="foot" pos="0 0 -0.2"/>',
                      '<body name="FL_foot" pos="0 0 -0.2"><geom name="FL" class="foot"/></body>')
    shutil.copytree(hound_dir / "meshes", tmp_path / "h" / "meshes")
    robot = get_robot(str(_write_spec(tmp_path / "h", "mjcf: robot.xml\n", xml)))
    assert robot.contact_bodies["feet"] == ("FL_foot", "FR_calf", "RL_calf", "RR_calf")
    # the unnamed body's capsule rides on FL_calf, where MuJoCo puts the geom
    model = mujoco.MjModel.from_xml_path(str(tmp_path / "h" / "robot.xml"))
    data = mujoco.MjData(model)
    data.qpos[:] = model.key("home").qpos
    mujoco.mj_kinematics(model, data)
    g = next(g for g in range(model.ngeom) if model.geom_bodyid[g] > 0 and not model.body(model.geom_bodyid[g]).name)
    (probe,) = [p for p in robot.probes if p.body == "FL_calf" and p.to is not None]
    calf = model.body("FL_calf").id
    ends = [data.xpos[calf] + data.xmat[calf].reshape(3, 3) @ np.asarray(e) for e in (probe.pos, probe.to)]
    axis = data.geom_xmat[g].reshape(3, 3)[:, 2] * model.geom_size[g][1]
    assert np.allclose(ends, [data.geom_xpos[g] + axis, data.geom_xpos[g] - axis], atol=1e-9)


@pytest.mark.parametrize("name", ["anymal_c", "g1", "microduck"])
def test_the_feet_derived_from_the_packages_own_mjcfs_are_the_hand_written_ones(tmp_path, monkeypatch, name):
    """The humanoid's hands and head, ANYmal-C's shanks and the duck's head are no feet."""
    monkeypatch.setattr(robots, "_FROM_FILES", dict(robots._FROM_FILES))
    monkeypatch.setattr(robots, "_BY_PATH", dict(robots._BY_PATH))
    mjcf = get_robot(name).mjcf_path
    spec = _write_spec(tmp_path, f"mjcf: {mjcf}\nname: derived_{name}\nunsupported_geoms: bounding_box\n")
    assert get_robot(str(spec)).contact_bodies["feet"] == get_robot(name).contact_bodies["feet"]


def test_an_unnamed_body_on_its_own_joint_with_collision_geometry_is_a_one_line_error(tmp_path, hound_dir):
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="nameless"')
    xml = xml.replace('<geom name="FL" class="foot" pos="0 0 -0.2"/>',
                      '<body pos="0 0 -0.2"><joint axis="0 1 0"/><geom name="FL" class="foot"/></body>')
    xml = xml.replace('qpos="0 0 0.33 1 0 0 0  0 0.8 -1.5', 'qpos="0 0 0.33 1 0 0 0  0 0.8 -1.5 0', 1)  # its angle
    shutil.copytree(hound_dir / "meshes", tmp_path / "n" / "meshes")
    with pytest.raises(RobotFileError, match="is on an unnamed body that moves on a joint of its own") as err:
        get_robot(str(_write_spec(tmp_path / "n", "mjcf: robot.xml\n", xml)))
    assert "\n" not in str(err.value)


def test_a_users_texture_material_light_and_sky_named_like_the_scenes_own_are_kept(tmp_path, hound_dir):
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="decorated"')
    xml = xml.replace("<asset>", '<asset><texture name="grid" type="2d" builtin="checker" width="8" height="8"/>'
                      '<material name="grid" texture="grid"/><texture name="sky" type="skybox" builtin="gradient" '
                      'width="8" height="8"/>')
    xml = xml.replace("<worldbody>", '<worldbody><light name="sun" pos="0 0 3"/><geom name="floor" type="box" '
                      'size="0.1 0.1 0.1" pos="3 3 0.1" material="grid"/>')
    shutil.copytree(hound_dir / "meshes", tmp_path / "d" / "meshes")
    robot = get_robot(str(_write_spec(tmp_path / "d", "mjcf: robot.xml\n", xml)))
    model = build_scene(robot)
    assert model.light("sun").pos[2] == pytest.approx(3.0) and model.texture("grid").width == 8  # the user's
    planes = [g for g in range(model.ngeom) if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE]
    assert [model.geom(g).name for g in planes] == ["floor_1"]  # the scene's floor, beside the user's box "floor"
    assert model.mat_texid[model.geom_matid[planes[0]], mujoco.mjtTextureRole.mjTEXROLE_RGB] == model.texture(
        "grid_1").id  # its own checker
    from flashnerd.viz.video import RobotRenderer

    renderer = RobotRenderer(robot, width=32, height=24)  # the video's scene: a sky only when the MJCF has none
    frame = renderer.render(renderer.model.qpos0.copy())
    skies = [t for t in range(renderer.model.ntex) if renderer.model.tex_type[t] == mujoco.mjtTexture.mjTEXTURE_SKYBOX]
    renderer.close()
    assert [renderer.model.texture(t).name for t in skies] == ["sky"] and frame.shape == (24, 32, 3)
    assert renderer.model.texture("sky").width == 8  # the user's


def test_a_robot_owning_the_names_of_the_scenes_terrain_and_object_still_gets_both(tmp_path, hound_dir):
    """A robot body `cube` and geoms `terrain_0` / `terrain_hfield` (and an hfield asset of that name) do not clash
    with the terrain and the cube the scene adds: those take the next free names and are found by structure."""
    from flashnerd.sim.heightfield import read_heightfield, rough_heightfield
    from flashnerd.sim.reaction import object_body
    from flashnerd.sim.terrain import terrain_boxes

    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="crowded"')
    xml = xml.replace("<asset>", '<asset><hfield name="terrain_hfield" nrow="2" ncol="2" size="1 1 0.1 0.1"/>')
    xml = xml.replace('<geom class="visual" type="mesh" mesh="shell"/>', '<geom class="visual" type="mesh" '
                      'mesh="shell"/><body name="cube" pos="0 0 0.06"><geom name="terrain_0" class="visual" '
                      'type="box" size="0.02 0.02 0.01"/><geom name="terrain_hfield" class="visual" type="sphere" '
                      'size="0.01"/></body>', 1)
    shutil.copytree(hound_dir / "meshes", tmp_path / "c" / "meshes")
    robot = dataclasses.replace(get_robot(str(_write_spec(tmp_path / "c", "mjcf: robot.xml\n", xml))),
                                object_spawn=(1.0, 0.0, 0.3))
    dyn = make_dynamics("mujoco", robot, 1, terrain="platforms", objects=("cube",))
    model = dyn.scene
    assert model.body("cube").parentid != 0  # the robot's own body, in the robot
    cube = object_body(model, dyn.nv_r)
    assert model.body(cube).name == "cube_1" and model.body(cube).pos[0] == pytest.approx(1.0)
    boxes = [g for g in range(model.ngeom) if model.geom_bodyid[g] == 0
             and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX]
    assert len(boxes) == len(terrain_boxes("platforms")) and model.geom(boxes[0]).name == "terrain_0_1"
    assert ContactRowDetector(robot, model, torch.device("cpu")).box_half.shape[0] == len(boxes)
    rough = build_scene(robot, "rough")
    field = read_heightfield(rough)
    assert field is not None and np.allclose(field.heights, rough_heightfield().heights, atol=1e-5)
    assert rough.geom(rough_geom := int(np.flatnonzero(rough.geom_type == mujoco.mjtGeom.mjGEOM_HFIELD)[0])).name \
        == "terrain_hfield_1" and rough.hfield(int(rough.geom_dataid[rough_geom])).name == "terrain_hfield_1"


def test_a_group_holding_the_floating_body_replaces_the_derived_base_group(tmp_path, hound_dir):
    """As the shipped humanoid's `pelvis` group does; per-position joint noise and an object spawn are read."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="trunked"')
    shutil.copytree(hound_dir / "meshes", tmp_path / "t" / "meshes")
    noise = [0.1 * k for k in range(12)]
    robot = get_robot(str(_write_spec(tmp_path / "t", f"mjcf: robot.xml\ncontact_bodies: {{trunk: base}}\n"
                                      f"init_joint_noise: {noise}\nobject_spawn: [0.1, 0.2, 0.3]\n", xml)))
    assert list(robot.contact_bodies) == ["trunk", "feet"] and robot.contact_bodies["trunk"] == ("base",)
    assert robot.init_joint_noise == pytest.approx(tuple(noise)) and robot.object_spawn == (0.1, 0.2, 0.3)


def test_a_joints_actuatorfrcrange_is_the_torque_limit_every_backend_reads_and_a_variant_scales(tmp_path, hound_dir):
    """Rear legs limited by their joints' actuatorfrcrange (15 N m) and not by their actuators (forcelimited="false",
    an inherited forcerange of 25), RL_hip by neither. MuJoCo clamps the joint's force, not the actuator's: the scene
    folds the joint's clamp into the actuator's, so the physics is MuJoCo's own to rounding, the torque sensor reads
    what the joint gets (it read the unclamped actuator force), the learned backends' clamp (the actuator's range)
    is the joint's, and effort_scale scales the limit that acts (it scaled the inherited, disabled forcerange)."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="hound_jointlimited"')
    for joint in ("RL_thigh", "RL_calf", "RR_hip", "RR_thigh"):
        xml = xml.replace(f'<joint name="{joint}_joint" ', f'<joint name="{joint}_joint" actuatorfrcrange="-15 15" ')
    xml = xml.replace('<joint name="RR_calf_joint" ', '<joint name="RR_calf_joint" actuatorfrcrange="-15 5" ')  # uneven
    xml = re.sub(r'(<position class="\w+" name="R[LR]_\w+")', r'\1 forcelimited="false"', xml)
    shutil.copytree(hound_dir / "meshes", tmp_path / "j" / "meshes")
    spec = _write_spec(tmp_path / "j", "mjcf: robot.xml\n", xml)
    robot = get_robot(str(spec))
    raw = mujoco.MjModel.from_xml_path(str(spec.parent / "robot.xml"))
    expected = np.array([[-25.0, 25.0]] * 6 + [[-np.inf, np.inf]] + [[-15.0, 15.0]] * 4 + [[-15.0, 5.0]])  # (12, 2)
    assert np.array_equal(actuator_force_limits(raw), expected) and robot.effort_limit == 25.0
    scene = build_scene(robot)
    assert np.array_equal(np.where(scene.actuator_forcelimited[:, None], scene.actuator_forcerange, expected), expected)
    assert np.array_equal(scene.actuator_forcelimited, np.isfinite(expected[:, 1]))
    assert not scene.jnt_actfrclimited.any()
    # the same motion as the MJCF itself, in the air, targets at the far ends of their ranges
    runs = []
    for model in (raw, scene):
        data = mujoco.MjData(model)
        mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
        data.qpos[2] = 1.0
        data.ctrl[:] = np.where(np.arange(12) % 2, model.actuator_ctrlrange[:, 1], model.actuator_ctrlrange[:, 0])
        torques = []
        for _ in range(40):
            mujoco.mj_step(model, data)
            torques.append(data.qfrc_actuator[model.jnt_dofadr[model.actuator_trnid[:, 0]]].copy())  # (12,)
        runs.append((data.qpos.copy(), np.array(torques), data))
    assert np.allclose(runs[0][0], runs[1][0][:raw.nq], atol=1e-9)
    data = runs[1][2]
    sensed = np.array([data.sensor(f"{j}_torque").data[0] for j in robot.joint_names])  # (12,) the last step's
    assert np.allclose(sensed, runs[0][1][-1], atol=1e-6)
    assert (sensed[7:] >= expected[7:, 0] - 1e-9).all() and (sensed[7:] <= expected[7:, 1] + 1e-9).all()
    assert np.abs(runs[0][1][:, 7:11]).max() == pytest.approx(15.0)  # the joints' clamp did bind
    stronger = tmp_path / "j" / "stronger.yaml"
    stronger.write_text("robot: hound_jointlimited\n"
                        "actuators: {'(FL|FR|RR)_.*|RL_(thigh|calf)': {effort_scale: 1.2}}\n")
    varied = build_scene(robot.with_variant(load_variant(stronger)))
    assert np.allclose(actuator_force_limits(varied), 1.2 * expected)
    stronger.write_text("robot: hound_jointlimited\nactuators: {'RL_hip': {effort_scale: 1.2}}\n")
    with pytest.raises(ValueError, match="scales the force range of actuator 'RL_hip', which has none"):
        build_scene(robot.with_variant(load_variant(stronger)))


def test_a_default_pose_other_than_the_keyframes_spawns_on_the_floor_and_resets_keep_joint_ranges(tmp_path, hound_dir):
    """Knees at -0.6 rad instead of the keyframe's -1.5 stretch the legs: the keyframe's base height would put the feet
    inside the floor, so the height comes from the geometry (lowest point 1 cm up); and the velocity task's reset,
    which scales the default angles by 0.5-1.5, would put knees at -0.3 rad, above their limit of -0.5."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="hound_stretched"')
    shutil.copytree(hound_dir / "meshes", tmp_path / "s" / "meshes")
    spec = _write_spec(tmp_path / "s", "mjcf: robot.xml\ndefault_joint_pos: {'.*_calf_joint': -0.6}\n", xml)
    robot = get_robot(str(spec))
    model = build_scene(robot)
    data = mujoco.MjData(model)
    data.qpos[:model.nq] = default_qpos(robot, model)
    mujoco.mj_forward(model, data)
    feet = [model.geom(g).id for g in ("FL", "FR", "RL", "RR")]
    lowest = min(data.geom_xpos[g][2] - model.geom_size[g][0] for g in feet)
    assert lowest == pytest.approx(0.01, abs=1e-6) and data.ncon == 0
    same = _write_spec(tmp_path / "k", "mjcf: ../s/robot.xml\nname: hound_same\n"
                                       "default_joint_pos: {'.*_calf_joint': -1.5}\n")  # the keyframe's own angle
    assert get_robot(str(same)).init_base_height == pytest.approx(0.33)  # so the keyframe's height
    env = gym.make(TASK, num_envs=256, robot=str(spec)).unwrapped
    env.reset(seed=0)
    knees = [robot.joint_names.index(j) for j in robot.joint_names if j.endswith("calf_joint")]
    q = env.state.joint_pos[:, knees]  # (256, 4)
    assert (q <= -0.5 + 1e-6).all() and (q >= -0.9 - 1e-6).all() and (q > -0.5 - 1e-6).any()
    env.close()


def test_the_model_hash_covers_the_files_an_mjcf_includes(tmp_path, hound_dir):
    """A Menagerie-style scene.xml that <include>s the robot: editing the robot's file must change the hash that
    datasets and checkpoints are checked against (it hashed scene.xml alone), and only then."""
    folder = tmp_path / "m"
    shutil.copytree(hound_dir / "meshes", folder / "meshes")
    xml = (hound_dir / "hound.xml").read_text()
    (folder / "hound.xml").write_text(xml)
    (folder / "scene.xml").write_text('<mujoco model="hound scene 2">\n  <include file="hound.xml"/>\n</mujoco>\n')
    spec = _write_spec(folder, "mjcf: scene.xml\n")
    assert get_robot(str(spec)).name == "hound_scene_2"  # from the model name "hound scene 2", made a valid name
    before = get_robot(str(spec)).model_hash()
    assert get_robot(str(spec)).model_hash() == before
    (folder / "hound.xml").write_text(xml.replace('kp="40"', 'kp="80.0"'))  # another size: a new stamp for sure
    assert get_robot(str(spec)).stiffness == 80.0 and get_robot(str(spec)).model_hash() != before


def test_a_learned_backend_without_a_model_of_the_robot_says_how_to_get_one(hound):
    with pytest.raises(FileNotFoundError, match="no 'nerd' model of robot 'hound' is shipped .*--dynamics_checkpoint"):
        make_dynamics("nerd", hound, num_worlds=2)


def test_a_variant_of_a_robot_from_a_spec_file_is_checked_with_its_spec(tmp_path, hound_dir, hound, capsys):
    variant = tmp_path / "heavy_hound.yaml"
    variant.write_text("robot: hound\npayload: {body: FL_thigh, mass: 0.5, pos: [0.0, 0.0, -0.1]}\n"
                       "actuators: {'FL_.*': {kp_scale: 0.8, delay_s: 0.01}}\nrandomize: {payload.mass: [0.0, 1.0]}\n")
    assert main(["variant", str(variant), "--robot", str(hound_dir / "hound.yaml")]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["robot"] == "hound"
    # what it changes, read off the compiled spec-file robot: the payload, kp of the FL actuators (and their bias
    # term's), their delay in whole 5 ms physics steps; the randomized payload draws for the added body
    changed = {(r["quantity"], r["element"]): r["variant"] for r in printed["changes"]}
    nominal = build_scene(hound)
    fl = {nominal.actuator(a).name: nominal.actuator_gainprm[a, 0] for a in range(nominal.nu)
          if nominal.actuator(a).name.startswith("FL_")}
    assert fl and changed == {("mass (kg)", "variant_payload"): 0.5,
                              **{("kp (N m/rad)", n): pytest.approx(0.8 * kp) for n, kp in fl.items()},
                              **{("delay (s)", n): 0.01 for n in fl}}
    assert printed["draws"]["payload.mass"]["elements"] == ["variant_payload"]
    scene = build_scene(hound.with_variant(load_variant(variant)))
    assert scene.body_mass.sum() == pytest.approx(build_scene(hound).body_mass.sum() + 0.5)
    other = tmp_path / "other.yaml"
    other.write_text(variant.read_text().replace("robot: hound", "robot: hound_mk2"))
    for argv, message in (([str(other), "--robot", str(hound_dir / "hound.yaml")], "--robot .* is robot 'hound'"),
                          ([str(other)], "is for robot 'hound_mk2', which is not built in; pass its spec file")):
        assert main(["variant", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and re.search(message, err), err


def test_a_robot_owning_the_payloads_name_keeps_its_body_and_the_payload_is_drawn_on_the_added_one(tmp_path,
                                                                                                      hound_dir):
    """A robot body `variant_payload` (with mass of its own) does not clash with a variant's payload: the payload takes
    the next free name, is found by structure, and a randomized payload mass is written to it, never to the robot's
    body; a randomized mass scale scales the robot's body and leaves the payload alone."""
    from flashnerd.sim.variant import payload_body

    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="laden"')
    xml = xml.replace('<geom class="visual" type="mesh" mesh="shell"/>', '<geom class="visual" type="mesh" '
                      'mesh="shell"/><body name="variant_payload" pos="0 0 0.06"><inertial mass="0.3" pos="0 0 0" '
                      'diaginertia="1e-4 1e-4 1e-4"/></body>', 1)
    shutil.copytree(hound_dir / "meshes", tmp_path / "l" / "meshes")
    robot = get_robot(str(_write_spec(tmp_path / "l", "mjcf: robot.xml\n", xml)))
    variant = tmp_path / "v.yaml"
    variant.write_text("robot: laden\npayload: {body: base, mass: 2.0, pos: [0.05, 0.0, 0.02]}\n"
                       "mass_scale: {'variant_payload.*|base': 1.5}\n"  # the payload is never scaled: its own key
                       "randomize: {payload.mass: [0.0, 4.0], mass_scale: [0.5, 2.0]}\n")
    laden = robot.with_variant(load_variant(variant))
    fixed = build_scene(laden.with_variant(load_variant(variant).fixed()))
    own, added = fixed.body("variant_payload").id, payload_body(fixed, laden.variant)
    assert fixed.body(added).name == "variant_payload_1" and fixed.body_parentid[added] == fixed.body("base").id
    assert np.allclose(fixed.body_pos[added], [0.05, 0.0, 0.02]) and fixed.body_mass[added] == pytest.approx(2.0)
    assert fixed.body_mass[own] == pytest.approx(0.45)  # the robot's own body is scaled as the regex says
    torch.manual_seed(0)
    dyn = make_dynamics("mujoco", laden, 4)
    draws = dyn.draws  # (worlds, [payload.mass, mass_scale])
    for model, (mass, scale) in zip(dyn._models, draws):
        assert model.body_mass[added] == pytest.approx(mass) and model.body_mass[own] == pytest.approx(0.3 * scale)


WAISTED = """<mujoco model="waisted"><compiler angle="radian"/><worldbody>
  <body name="torso" pos="0 0 1.0"><freejoint/><geom type="box" size="0.1 0.15 0.2"/>
    <body name="waist" pos="0 0 -0.25"><joint name="waist_joint" axis="0 0 1"/><geom type="sphere" size="0.08"/>
      <body name="l_thigh" pos="0 0.1 -0.05"><joint name="l_hip" axis="0 1 0"/>
        <geom type="capsule" size="0.05" fromto="0 0 0 0 0 -0.3"/>
        <body name="l_foot" pos="0 0 -0.6"><joint name="l_knee" axis="0 1 0"/><geom type="sphere" size="0.04"/></body>
      </body>
      <body name="r_thigh" pos="0 -0.1 -0.05"><joint name="r_hip" axis="0 1 0"/>
        <geom type="capsule" size="0.05" fromto="0 0 0 0 0 -0.3"/>
        <body name="r_foot" pos="0 0 -0.6"><joint name="r_knee" axis="0 1 0"/><geom type="sphere" size="0.04"/></body>
      </body>
      <body name="l_arm" pos="0 0.25 0.3"><joint name="l_shoulder" axis="0 1 0"/>
        <geom type="capsule" size="0.03" fromto="0 0 0 0 0 -0.4"/></body>
    </body>
  </body></worldbody>
  <actuator><position joint="waist_joint" kp="50"/><position joint="l_hip" kp="50"/><position joint="l_knee" kp="50"/>
    <position joint="r_hip" kp="50"/><position joint="r_knee" kp="50"/><position joint="l_shoulder" kp="50"/></actuator>
</mujoco>"""


def test_feet_on_legs_that_hang_from_one_jointed_waist_are_each_kept(tmp_path):
    """Both legs start below the waist joint; the arm, also below it, hangs far above the ground."""
    robot = get_robot(str(_write_spec(tmp_path / "w", "mjcf: robot.xml\n", WAISTED)))
    assert robot.contact_bodies["feet"] == ("l_foot", "r_foot")


def test_a_foot_on_an_unnamed_body_welded_to_the_shank_is_sensed_with_it(tmp_path, hound_dir):
    """A foot sphere in an unnamed body of its own under each calf (a user's grouping): the calf is the foot, with
    the hound's probes, and its contact sensor reads its subtree: through a drop onto the floor it reads what
    sensors on the sphere and on the calf's own capsule read together (contacts counted and forces summed), where a
    body sensor on the calf alone would miss the sphere's contacts."""
    grouped = get_robot(str(grouped_hound(tmp_path)))
    hound = get_robot(str(hound_dir / "hound.yaml"))
    assert grouped.contact_bodies["feet"] == hound.contact_bodies["feet"] == ("FL_calf", "FR_calf", "RL_calf",
                                                                               "RR_calf")
    assert len(grouped.probes) == len(hound.probes)
    for a, b in zip(sorted(grouped.probes, key=repr), sorted(hound.probes, key=repr)):
        assert a.body == b.body and np.allclose(a.pos, b.pos, atol=1e-12) and a.radius == b.radius
    spec = build_scene_spec(grouped)
    assert spec.sensor("FL_calf_contact").objtype == mujoco.mjtObj.mjOBJ_XBODY
    assert build_scene(hound).sensor("FL_calf_contact").objtype == mujoco.mjtObj.mjOBJ_BODY
    parts = {"sphere": (mujoco.mjtObj.mjOBJ_GEOM, "FL"), "capsule": (mujoco.mjtObj.mjOBJ_BODY, "FL_calf")}
    for name, (objtype, objname) in parts.items():
        spec.add_sensor(name=name, type=mujoco.mjtSensor.mjSENS_CONTACT, objtype=objtype, objname=objname,
                        intprm=[3, 3, 1])
    model = spec.compile()
    data = mujoco.MjData(model)
    data.qpos[:] = default_qpos(grouped, model)
    data.qpos[2] += 0.1  # dropped from 10 cm: the feet land within the rollout
    data.ctrl[:] = grouped.default_joint_pos
    sphere_only = 0
    for _ in range(300):
        mujoco.mj_step(model, data)
        calf, sphere, capsule = (data.sensor(n).data.copy() for n in ("FL_calf_contact", "sphere", "capsule"))
        assert calf[0] == sphere[0] + capsule[0]  # found: the number of contacts
        assert np.allclose(calf[1:], sphere[1:] + capsule[1:], rtol=1e-9, atol=1e-9)
        sphere_only += int(sphere[0] == 1 and capsule[0] == 0)
    assert sphere_only > 100  # the foot stood on its sphere, which a body sensor on the calf does not see


def test_a_head_whose_collision_geom_sits_on_an_unnamed_part_is_in_the_base_group(tmp_path, hound_dir):
    """The base group takes the named bodies welded to the base that collide, through their unnamed welded parts
    too; the head's sensor then reads its subtree."""
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="parted"')
    xml = xml.replace('<body name="FL_hip"', '<body name="head" pos="0.24 0 0.03"><body pos="0.02 0 0"><geom '
                      'class="collision" type="sphere" size="0.04"/></body></body><body name="FL_hip"', 1)
    shutil.copytree(hound_dir / "meshes", tmp_path / "p" / "meshes")
    robot = get_robot(str(_write_spec(tmp_path / "p", "mjcf: robot.xml\n", xml)))
    assert robot.contact_bodies["base"] == ("base", "head")
    assert build_scene(robot).sensor("head_contact").objtype == mujoco.mjtObj.mjOBJ_XBODY


@pytest.mark.parametrize("edit, match", [
    (('<geom class="collision" type="capsule" size="0.025" fromto="0 0 0 0 0 -0.2"/>',
      '<body><geom class="collision" type="capsule" size="0.025" fromto="0 0 0 0 0 -0.2"/></body>'),
     "sits on an unnamed body welded to 'FL_thigh' .* a body below 'FL_thigh' other than its unnamed welded parts "
     "collides too"),
    (("</worldbody>", '<body pos="2 0 0.1"><geom type="box" size="0.1 0.1 0.1"/></body></worldbody>'),
     r"unnamed body #14 beside the robot \(the tree of its first body 'base'\) has collision geometry; the MJCF "
     "holds the robot alone"),
])
def test_collision_geometry_on_unnamed_bodies_that_cannot_be_placed_is_a_one_line_error(tmp_path, hound_dir, edit,
                                                                                        match):
    xml = (hound_dir / "hound.xml").read_text().replace('model="hound"', 'model="hidden"').replace(*edit, 1)
    shutil.copytree(hound_dir / "meshes", tmp_path / "u" / "meshes")
    with pytest.raises(RobotFileError, match=match) as err:
        get_robot(str(_write_spec(tmp_path / "u", "mjcf: robot.xml\ncontact_bodies: {thighs: '.*_thigh'}\n", xml)))
    assert "\n" not in str(err.value)


def test_the_reality_gap_loop_runs_on_a_robot_from_outside_the_package(hound_dir, tmp_path, monkeypatch, capsys,
                                                                        short_episodes):
    """`bench reality-gap --robot spec.yaml`: a lab's own robot, its own variant and its own model go through the
    whole loop (baselines, logs in the robot log format, adaptation, PPO on the model, evaluation in the variant);
    and `bench finetune --robot spec.yaml` fine-tunes on its model."""
    import flashnerd.cli.bench.finetune as finetune
    import flashnerd.cli.bench.reality_gap as reality_gap

    short_episodes(reality_gap, finetune)
    monkeypatch.setattr(reality_gap, "HELD_OUT_MINUTES", 0.1)
    monkeypatch.chdir(tmp_path)
    spec = str(hound_dir / "hound.yaml")
    assert main(["record", "--robot", spec, "--num_worlds", "4", "--steps", "40", "--traj_len", "20", "--out",
                 "hound.h5"]) == 0
    assert main(["fit", "--data", "hound.h5", "--out", "hound.safetensors", "--max_steps", "2", "--batch_size", "8",
                 "--ar_batch_size", "4", "--contact_head_steps", "0"]) == 0
    variant = tmp_path / "tired_hound.yaml"
    variant.write_text("robot: hound\npayload: {body: base, mass: 2.0, pos: [0.05, 0.0, 0.03]}\n"
                       "actuators: {'.*': {kp_scale: 0.7, effort_scale: 0.8}}\n")
    capsys.readouterr()
    argv = ["bench", "reality-gap", "--robot_variant", str(variant), "--real_minutes", "0.1", "--rounds", "1",
            "--iterations", "1", "--num_envs", "4", "--eval_episodes", "2", "--robot_worlds", "2", "--fit_budget",
            "1", "--traj_len", "20", "--contact_head_steps", "0", "--baseline_iterations", "1", "--out_dir", "rg"]
    for extra, message in (([], "is for robot 'hound'"),  # the task's robot is ANYmal-C
                           (["--robot", spec], "no flashnerd model is shipped for robot 'hound'")):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert main([*argv, "--robot", spec, "--dynamics_checkpoint", "hound.safetensors"]) == 0
    summary = json.loads((tmp_path / "rg" / "reality_gap.json").read_text())
    assert summary["settings"]["robot"] == spec and set(summary["baselines"]) == {"nominal", "oracle"}
    assert set(summary["fine_tuned"]) == {"nominal", "oracle"}  # round 0 fine-tuned the safe policy: its controls
    assert summary["model_hash"] == get_robot(spec).model_hash()
    (budget,) = summary["budgets"]
    logged = load_dataset(budget["logged"]["dataset"], get_robot(spec)).attrs  # read with the hound's layout
    assert logged["robot"] == "hound" and logged["variants"] == ["tired_hound_robot"]
    assert read_checkpoint(budget["adapted"])["robot"] == "hound"
    assert np.isfinite(budget["eval_variant"]["mean_return"]) and budget["eval_variant"]["episodes"] == 2
    tune = ["bench", "finetune", "--task", TASK, "--robot", spec, "--dynamics", "mujoco,flashnerd",
            "--pretrain_iterations", "1", "--iterations", "1", "--seeds", "1", "--num_envs", "4", "--eval_episodes",
            "1", "--out_dir", "ft"]
    assert main(tune) == 2 and not (tmp_path / "ft").exists()  # refused before pretraining: no model of the hound
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no flashnerd model is shipped for robot 'hound'" in err, err
    assert main([*tune, "--dynamics_checkpoint", "flashnerd=hound.safetensors"]) == 0
    tuned = json.loads((tmp_path / "ft" / "finetune.json").read_text())
    assert tuned["robot"] == spec and set(tuned["backends"]) == {"mujoco", "flashnerd"}  # the hound's model loaded
