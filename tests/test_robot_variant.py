"""Robot variants as data: each key changes the compiled model exactly as stated, everything else stays nominal, the
actuation follows (a scaled torque limit clips where it says), and bad variant files are one-line errors."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch
import yaml
from conftest import TASK

from flashnerd.cli.main import main
from flashnerd.dynamics import make_dynamics
from flashnerd.robots.variant import VariantError, load_variant, parse_variant
from flashnerd.sim.scene import build_scene
from flashnerd.sim.variant import PAYLOAD_BODY


def _variant(**spec):
    return parse_variant({"robot": "anymal_c", **spec}, "test")


def _compiled(anymal, **spec) -> tuple[mujoco.MjModel, mujoco.MjModel]:
    return build_scene(anymal), build_scene(anymal.with_variant(_variant(**spec)))


def test_payload_is_a_point_mass_at_the_stated_place(anymal):
    nominal, m = _compiled(anymal, payload={"body": "base", "mass": 8.0, "pos": [0.1, 0.0, 0.05]})
    assert m.nq == nominal.nq and m.nv == nominal.nv  # no new degree of freedom
    assert np.isclose(m.body_mass.sum(), nominal.body_mass.sum() + 8.0)
    b = m.body(PAYLOAD_BODY)
    assert m.body_parentid[b.id] == m.body("base").id and np.allclose(m.body_pos[b.id], [0.1, 0.0, 0.05])
    d0, d1 = mujoco.MjData(nominal), mujoco.MjData(m)
    mujoco.mj_forward(nominal, d0)
    mujoco.mj_forward(m, d1)
    base0 = d0.subtree_com[nominal.body("base").id] * (M0 := nominal.body_subtreemass[nominal.body("base").id])
    expected = (base0 + 8.0 * d1.xpos[b.id]) / (M0 + 8.0)  # the subtree's centre of mass moves by the point mass
    assert np.allclose(d1.subtree_com[m.body("base").id], expected, atol=1e-9)


def test_mass_scale_scales_mass_and_inertia_of_matching_bodies_only(anymal):
    nominal, m = _compiled(anymal, mass_scale={".*THIGH": 1.1})
    for i in range(nominal.nbody):
        factor = 1.1 if nominal.body(i).name.endswith("THIGH") else 1.0
        assert np.isclose(m.body_mass[i], factor * nominal.body_mass[i])
        assert np.allclose(m.body_inertia[i], factor * nominal.body_inertia[i])


def test_joint_values_replace_the_nominal_ones_on_matching_joints(anymal):
    nominal, m = _compiled(anymal, joints={".*_KFE": {"damping": 3.0, "armature": 0.03, "frictionloss": 1.0}})
    for j in range(1, nominal.njnt):  # joint 0 is the free joint of the base
        dof = nominal.jnt_dofadr[j]
        knee = nominal.joint(j).name.endswith("_KFE")
        assert m.dof_damping[dof] == (3.0 if knee else nominal.dof_damping[dof])
        assert m.dof_armature[dof] == pytest.approx(0.03 if knee else nominal.dof_armature[dof])
        assert m.dof_frictionloss[dof] == (1.0 if knee else nominal.dof_frictionloss[dof])


def test_actuator_scales_change_gains_and_limits(anymal):
    nominal, m = _compiled(anymal, actuators={"LF_.*": {"kp_scale": 0.75, "kv_scale": 0.5, "effort_scale": 0.7}})
    for a in range(nominal.nu):
        s = nominal.actuator(a).name.startswith("LF_")
        assert m.actuator_gainprm[a, 0] == pytest.approx(nominal.actuator_gainprm[a, 0] * (0.75 if s else 1))
        assert m.actuator_biasprm[a, 1] == pytest.approx(nominal.actuator_biasprm[a, 1] * (0.75 if s else 1))
        assert m.actuator_biasprm[a, 2] == pytest.approx(nominal.actuator_biasprm[a, 2] * (0.5 if s else 1))
        assert np.allclose(m.actuator_forcerange[a], nominal.actuator_forcerange[a] * (0.7 if s else 1))


def test_friction_scale_scales_the_friction_the_contacts_had(anymal):
    """MuJoCo takes the larger friction of two geoms of equal priority: a foot of 0.8 on the floor's 1.0 slides at
    1.0. Scaled by 0.6 the foot must slide at 0.6, so its geom gets 0.6 x max(own, ground) and a higher priority."""
    nominal, m = _compiled(anymal, friction_scale={".*FOOT": 0.6})
    feet = {nominal.body(n).id for n in ("LF_FOOT", "RF_FOOT", "LH_FOOT", "RH_FOOT")}
    for g in range(nominal.ngeom):
        foot = nominal.geom_bodyid[g] in feet
        expected = 0.6 * max(nominal.geom_friction[g, 0], 1.0) if foot else nominal.geom_friction[g, 0]
        assert m.geom_friction[g, 0] == pytest.approx(expected)
        assert m.geom_priority[g] == (1 if foot else nominal.geom_priority[g])
        assert np.allclose(m.geom_friction[g, 1:], nominal.geom_friction[g, 1:])


def test_scaled_foot_friction_is_the_friction_of_the_contact(anymal):
    """In a simulated contact of a foot with the floor, the contact's friction is the scaled one."""
    import mujoco as mj

    robot = anymal.with_variant(_variant(friction_scale={".*FOOT": 0.6}))
    m = build_scene(robot)
    d = mj.MjData(m)
    d.qpos[2] = 0.5
    for _ in range(400):  # drop the robot onto the floor
        mj.mj_step(m, d)
    feet = {m.body(n).id for n in ("LF_FOOT", "RF_FOOT", "LH_FOOT", "RH_FOOT")}
    contacts = [d.contact[i] for i in range(d.ncon)
                if feet & {m.geom_bodyid[d.contact[i].geom1], m.geom_bodyid[d.contact[i].geom2]}]
    assert contacts and all(c.friction[0] == pytest.approx(0.6) for c in contacts)


def test_a_scaled_torque_limit_clips_the_applied_torque_where_it_says(anymal):
    """A target far from the pose asks for more than any limit: the applied torque sits at 0.5 x 80 N m."""
    robot = anymal.with_variant(_variant(actuators={".*": {"effort_scale": 0.5}}))
    dyn = make_dynamics("mujoco", robot, 1)
    ctrl = torch.tensor(anymal.default_joint_pos).unsqueeze(0) + 3.0  # (1, nu)
    dyn.step(ctrl)
    torque = dyn.state().joint_torque.abs()
    assert torch.allclose(torque, torch.full_like(torque, 40.0), atol=1e-4), torque
    dyn.close()


SHIPPED_VARIANTS = [("anymal_c_worn", '"payload"'), ("anymal_c_slow_motors", '"no_load_speed"'),
                    ("anymal_c_worn_dr", '"randomize"'), ("anymal_c_laggy_dr", '"delay_s"')]


def test_every_shipped_variant_is_checked():
    assert sorted(p.stem for p in Path("variants").glob("*.yaml")) == sorted(name for name, _ in SHIPPED_VARIANTS)


@pytest.mark.parametrize("name, key", SHIPPED_VARIANTS)
def test_the_shipped_variants_are_well_formed_and_recorded_in_datasets(anymal, tmp_path, name, key):
    from flashnerd.data.dataset import load_dataset

    out = tmp_path / f"{name}.h5"
    assert main(["record", "--num_worlds", "2", "--steps", "8", "--traj_len", "8", "--out", str(out),
                 "--robot_variant", f"variants/{name}.yaml"]) == 0
    attrs = load_dataset(out).attrs
    assert attrs["variants"] == [name] and key in attrs["variant"]


@pytest.mark.parametrize("spec, message", [
    ({"payload": {"body": "base", "mass": -1.0}}, "payload.mass must be > 0"),
    ({"mass_scale": {".*THIGH": 0.0}}, "must be > 0"),
    ({"joints": {".*": {"stiffness": 1.0}}}, "unknown key 'stiffness'"),
    ({"randomize": {"payload.mass": [0.0, 1.0]}}, "randomize 'payload.mass' needs a 'payload' entry"),
    ({"mass_scale": {".*THIGH": 1.1}, "randomize": {"mass_scale": [1.2, 0.9]}}, "low 1.2 above high 0.9"),
    ({"randomize": {"actuators.effort_scale": [0.0, 1.0]}}, "must be > 0"),
    ({"randomize": {"joints.damping": [-1.0, 1.0]}}, "must be >= 0"),
    ({"randomize": {"joints.damping": 1.0}}, "must be a range \\[low, high\\]"),
    ({"randomize": {"joints.damping": [0.0, 1.0, 2.0]}}, "must be a range"),
    ({"randomize": {"actuators.delay_s": [0.0, 2.0]}}, "must be >= 0 and <= 1"),
    ({"randomize": {"actuators.no_load_speed": [0.0, 5.0]}}, "must be > 0"),
    ({"randomize": {"gravity": [9.0, 10.0]}}, "unknown path 'gravity'"),
    ({"randomize": {}}, "randomize must be a non-empty mapping"),
    ({"actuators": {".*": {"delay_s": -0.01}}}, "delay_s must be >= 0"),
    ({"actuators": {".*": {"no_load_speed": 0.0}}}, "no_load_speed must be > 0"),
    ({"frobnicate": 1}, "unknown key 'frobnicate'"),
    ({"mass_scale": {"(": 1.0}}, "is not a valid regex"),
    ({"friction_scale": {".*FOOT": float("nan")}}, "must be a finite number"),
])
def test_malformed_variant_content_is_refused(spec, message):
    with pytest.raises(VariantError, match=message):
        _variant(**spec)


@pytest.mark.parametrize("content, message", [
    ("robot: anymal_c\nmass_scale: {'.*WING': 1.1}\n", "matches none of the robot's names"),
    ("robot: anymal_c\npayload: {body: tail, mass: 1.0}\n", "payload.body 'tail' is not a body of the robot"),
    ("robot: anymal_c\npayload: {body: 'LF_.*', mass: 1.0}\n", "payload.body 'LF_.*' is not a body of the robot (a "
                                                              "body's name, not a regex)"),
    ("robot: anymal_c\npayload: {body: base}\n", "payload has no mass; give it in kg"),
    ("robot: anymal_c\nfriction_scale: {'LF_FOOOT': 0.5}\n", "matches no geom and no body of the robot (base, LF_HIP"),
    ("robot: cartpole\nmass_scale: {'.*': 1.1}\n", "is for robot 'cartpole', not 'anymal_c'"),
    ("robot: anymal_c\n  - not: [valid\n", "is not valid YAML"),
    ("- a list\n", "must be a YAML mapping"),
    ("!!python/object/apply:os.system ['touch {tmp}/ran']\n", "tags are not allowed"),
    ("robot: anymal_c\nmass_scale: {'.*THIGH': 1.1}\nmass_scale: {'.*SHANK': 1.1}\n",
     "found the key 'mass_scale' a second time at line 3"),  # YAML would silently keep the second one
    ("robot: anymal_c\npayload: {body: base, mass: 1:30}\n", "must be a finite number, got '1:30'"),  # not 90
    ("robot: anymal_c\npayload: {body: base, mass: " + "9" * 400 + "}\n", "must be a finite number, got 999"),
    ("robot: anymal_c\nmass_scale: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("robot: anymal_c\npayload: {body: base, mass: " + "9" * 5000 + "}\n", "is not a whole number of at most 4300"),
    ("robot: anymal_c\npayload: {body: base, mass: !!float heavy}\n", "'heavy' is not a number"),
    # PyYAML's own constructors of explicit standard tags raised KeyError, AttributeError and TypeError here
    ("robot: anymal_c\npayload: {body: base, mass: !!bool maybe}\n", "'maybe' is not true or false"),
    ("robot: anymal_c\npayload: {body: base, mass: !!timestamp soon}\n", "a value this reader cannot take"),
    ("robot: anymal_c\nmass_scale: !!map [a]\n", "expected a mapping node, but found sequence"),
    ("robot: anymal_c\npayload: {body: base, mass: 0x" + "f" * 5000 + "}\n", "is not a whole number of at most"),
])
def test_bad_variant_files_are_one_line_errors_of_every_command(content, message, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(content.replace("{tmp}", str(tmp_path)))
    logs = tmp_path / "logs"
    for argv in (["train", "--task", TASK, "--num_envs", "2", "--robot_variant", str(bad), "--log_root", str(logs)],
                 ["record", "--num_worlds", "2", "--steps", "4", "--traj_len", "4", "--robot_variant", str(bad),
                  "--out", str(tmp_path / "r.h5")],
                 ["plan", "--platforms", "0", "--robot_variant", str(bad)],
                 ["bench", "ppo", "--task", TASK, "--dynamics", "mujoco", "--num_envs", "2", "--robot_variant",
                  str(bad), "--out_dir", str(tmp_path / "bench")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # nothing written, no code ran


def test_numbers_read_as_written_and_a_self_repeating_file_is_refused_at_once(tmp_path):
    """YAML 1.1 reads 010 as 8 and 5e-3 as a string; a variant's numbers read as written. A "billion laughs" file
    (aliases nested nine deep) is refused in one short line without expanding it."""
    import time

    good = tmp_path / "good.yaml"
    good.write_text("robot: anymal_c\npayload: {body: base, mass: 010, pos: [0, 0, 5e-3]}\n")
    variant = load_variant(good)
    assert variant.spec["payload"]["mass"] == 10.0 and variant.spec["payload"]["pos"] == [0.0, 0.0, 0.005]
    levels = ["&a [" + ", ".join(["lol"] * 9) + "]"]
    levels += [f"&{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]  # 9**9 lols unrolled
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("robot: anymal_c\npayload: {body: base, mass: 1.0, pos: [" + ", ".join(levels) + "]}\n")
    start = time.perf_counter()
    with pytest.raises(VariantError) as err:
        load_variant(bomb)
    assert time.perf_counter() - start < 5.0 and len(str(err.value)) < 400 and "payload.pos must be" in str(err.value)


def test_mappings_that_merge_each_other_repeatedly_read_at_once(tmp_path):
    """Merge keys copied the pairs they merge in PyYAML before 6.0.4: eight mappings that each merge the one before
    ten times gathered ten million keys (a few lines filling the memory); now each is read once."""
    import time

    lines = ["robot: anymal_c", "joints:", "  a: &a {damping: 1.0}"]
    lines += [f"  {c}: &{c} {{<<: [{', '.join(['*' + p] * 10)}]}}" for p, c in zip("abcdefg", "bcdefgh")]
    bomb = tmp_path / "merges.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    variant = load_variant(bomb)
    assert time.perf_counter() - start < 5.0 and variant.spec["joints"]["h"] == {"damping": 1.0}


def test_merge_keys_work_and_what_is_written_reads_back_the_same(tmp_path):
    """`<<: *defaults` merges as in YAML (an explicit key overrides a merged one); a name YAML 1.2 would read as a
    number (`1e3`) is written quoted, so `write` then `load_variant` gives the same content."""
    merged = tmp_path / "merged.yaml"
    merged.write_text("robot: anymal_c\nactuators:\n  'LF_.*': &soft {kp_scale: 0.8, kv_scale: 0.9}\n"
                      "  'RF_.*': {<<: *soft, kv_scale: 0.5}\n")
    assert load_variant(merged).spec["actuators"]["RF_.*"] == {"kp_scale": 0.8, "kv_scale": 0.5}
    odd = parse_variant({"robot": "anymal_c", "mass_scale": {"1e3": 1.1, "0o17": 1.2}}, "odd")
    odd.write(tmp_path / "odd.yaml")
    assert load_variant(tmp_path / "odd.yaml").spec == odd.spec


def test_overlapping_friction_patterns_multiply_in_any_order(anymal):
    """Two patterns matching LF_FOOT scale its contact friction by both factors, whichever comes first, as mass and
    actuator scales do."""
    nominal = build_scene(anymal)
    g = next(g for g in range(nominal.ngeom) if nominal.body(int(nominal.geom_bodyid[g])).name == "LF_FOOT")
    expected = 2.0 * 0.5 * max(nominal.geom_friction[g, 0], 1.0)
    for order in ({"LF_FOOT": 2.0, ".*FOOT": 0.5}, {".*FOOT": 0.5, "LF_FOOT": 2.0}):
        _, m = _compiled(anymal, friction_scale=order)
        assert m.geom_friction[g, 0] == pytest.approx(expected)


def _user_robot(folder: Path, name: str, edits: dict[str, str]):
    """The test hound (tests/assets/hound) as a user's robot `name` in `folder`, its MJCF edited (old -> new)."""
    from flashnerd.robots import get_robot

    hound = Path(__file__).parent / "assets" / "hound"
    xml = (hound / "hound.xml").read_text()
    for old, new in edits.items():
        assert old in xml, old
        xml = xml.replace(old, new)
    (folder / "meshes").mkdir(exist_ok=True)
    for mesh in (hound / "meshes").iterdir():
        (folder / "meshes" / mesh.name).write_bytes(mesh.read_bytes())
    (folder / f"{name}.xml").write_text(xml)
    (folder / f"{name}.yaml").write_text(f"mjcf: {name}.xml\nname: {name}\n")
    return get_robot(str(folder / f"{name}.yaml"))


def test_effort_scale_of_an_actuator_without_a_force_range_is_a_one_line_error(tmp_path):
    """Scaling a force range the actuator lacks would compile to an invalid range (MuJoCo's own multi-part error)."""
    from flashnerd.sim.scene import variant_robot

    _user_robot(tmp_path, "hound_unlimited", {' forcerange="-25 25"': ""})
    (tmp_path / "v.yaml").write_text("robot: hound_unlimited\nactuators: {'FL_.*': {effort_scale: 0.5}}\n")
    with pytest.raises(VariantError, match="which has none; give it a forcerange") as err:
        variant_robot(str(tmp_path / "hound_unlimited.yaml"), str(tmp_path / "v.yaml"))
    assert "\n" not in str(err.value)


def _ground_contacts(model: mujoco.MjModel, qpos: np.ndarray) -> dict[int, tuple]:
    """Robot geom -> (friction (5,), dim, solref, solimp) of its contact with the floor, as MuJoCo sets them, with
    the robot pushed into the floor at `qpos`."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_forward(model, data)
    floor = model.geom("floor").id
    return {int(c.geom[0] + c.geom[1] - floor): (c.friction.copy(), int(c.dim), c.solref.copy(), c.solimp.copy())
            for c in data.contact[:data.ncon] if floor in c.geom}


def test_friction_scale_scales_the_contacts_own_friction_whatever_the_geoms_priority_and_condim(tmp_path):
    """As in Menagerie's Go2: feet of priority 1 (their own friction 0.8 decides their contacts), other collision
    geoms frictionless on their own (condim 1, the floor's condim 3 wins) with their own solref and solmix, and a base
    of priority -1 (the floor decides). Scaled by 0.5, every contact with the floor is the nominal one with half its
    sliding friction and nothing else changes (scaling the ground's 1.0 instead, a foot slid at 0.5, not 0.4, and
    promoting a leg's own condim 1 left it frictionless)."""
    robot = _user_robot(tmp_path, "pup", {
        'condim="3" friction="0.9 0.005 0.0001"/>': 'condim="1" friction="0.6 0.001 0.00001" solref="0.01 1" '
                                                    'solmix="3"/>',
        'friction="1.0 0.02 0.01" condim="3"/>': 'friction="0.8 0.02 0.01" condim="3" priority="1"/>',
        '<geom class="collision" type="box"': '<geom class="collision" priority="-1" type="box"'})
    variant = parse_variant({"robot": "pup", "friction_scale": {".*": 0.5}}, "slippery")
    nominal, scaled = build_scene(robot), build_scene(robot.with_variant(variant))
    qpos = nominal.qpos0.copy()
    qpos[2] = 0.05  # base, legs and feet all in the floor
    before, after = _ground_contacts(nominal, qpos), _ground_contacts(scaled, qpos)
    assert len(before) == 13 and before.keys() == after.keys()  # the base, 8 leg capsules, 4 feet
    for g, (friction, dim, solref, solimp) in before.items():
        assert np.allclose(after[g][0], friction * [0.5, 0.5, 1, 1, 1]), (g, after[g][0], friction)
        assert after[g][1] == dim == 3 and np.allclose(after[g][2], solref) and np.allclose(after[g][3], solimp)
    assert sorted({round(f[0], 6) for f, *_ in after.values()}) == [0.4, 0.5]  # feet 0.8 x 0.5, the rest 1.0 x 0.5


@pytest.mark.filterwarnings("ignore:compiler attribute 'settotalmass' is deprecated")
def test_mass_and_damping_keys_change_only_what_they_name_whatever_the_compiler_derives(tmp_path):
    """A position actuator's `dampratio` compiles to a velocity gain from the joint's inertia: a variant keeps the
    nominal robot's gain (a controller's gain does not grow with a payload or an armature; kp_scale scales the
    position gain alone, kv_scale the velocity gain). Under inertiafromgeom="true" a body's mass is its geoms', and
    mass_scale scales that; settotalmass would scale a payload away, and is a one-line error."""
    damped = _user_robot(tmp_path, "damped", {'kv="1"': 'dampratio="1"'})
    kv = build_scene(damped).actuator_biasprm[:, 2]
    assert (kv < 0).all() and np.ptp(kv) > 0  # gains from each joint's inertia
    for spec, factor in (({"actuators": {".*": {"kp_scale": 4.0}}}, 1.0), ({"joints": {".*": {"armature": 0.1}}}, 1.0),
                         ({"payload": {"body": "FL_calf", "mass": 2.0}}, 1.0), ({"mass_scale": {".*": 3.0}}, 1.0),
                         ({"actuators": {".*": {"kv_scale": 0.5, "kp_scale": 2.0}}}, 0.5)):
        varied = build_scene(damped.with_variant(parse_variant({"robot": "damped", **spec}, "v")))
        assert np.allclose(varied.actuator_biasprm[:, 2], factor * kv), spec
    geoms = _user_robot(tmp_path, "geoms", {'<compiler ': '<compiler inertiafromgeom="true" '})
    nominal = build_scene(geoms)
    heavy = build_scene(geoms.with_variant(parse_variant({"robot": "geoms", "mass_scale": {"FL_thigh": 2.0}}, "v")))
    thigh = nominal.body("FL_thigh").id
    assert np.isclose(heavy.body_mass[thigh], 2.0 * nominal.body_mass[thigh]) and nominal.body_mass[thigh] != 1.0
    assert np.allclose(heavy.body_inertia[thigh], 2.0 * nominal.body_inertia[thigh])
    total = _user_robot(tmp_path, "total", {'<compiler ': '<compiler settotalmass="12" '})
    laden = parse_variant({"robot": "total", "payload": {"body": "base", "mass": 1.0}}, "v")
    with pytest.raises(VariantError, match="sets <compiler settotalmass>") as err:
        build_scene(total.with_variant(laden))
    assert "\n" not in str(err.value)


def test_the_digest_tells_apart_orders_that_step_differently_and_nothing_else():
    """Where two entries match one actuator the later one's delay wins, so their order is content; the order of
    top-level keys, of an entry's fields and of mass_scale's factors (they multiply) is not."""
    later_wins = [{"actuators": {".*": {"delay_s": 0.0, "kp_scale": 0.9}, "LF_.*": {"delay_s": 0.01}}},
                  {"actuators": {"LF_.*": {"delay_s": 0.01}, ".*": {"kp_scale": 0.9, "delay_s": 0.0}}}]
    first, second = (_variant(**spec).digest() for spec in later_wins)
    assert first != second
    assert _variant(**later_wins[0]).digest() == parse_variant({**later_wins[0], "robot": "anymal_c"}, "x").digest()
    same = [{"mass_scale": {"base": 1.1, ".*THIGH": 0.9}, "payload": {"mass": 2.0, "body": "base"}},
            {"payload": {"body": "base", "mass": 2.0}, "mass_scale": {".*THIGH": 0.9, "base": 1.1}}]
    assert len({_variant(**spec).digest() for spec in same}) == 1


def test_the_variant_command_never_writes_over_its_input_or_one_output_over_the_other(tmp_path, capsys):
    variant = tmp_path / "v.yaml"
    variant.write_text("robot: anymal_c\nmass_scale: {'.*THIGH': 1.1}\nrandomize: {mass_scale: [1.0, 1.2]}\n")
    before = variant.read_text()
    for flags in (["--fixed", str(variant)], ["--fixed", str(tmp_path / "o.yaml"), "--ranges_only",
                                               str(tmp_path / "o.yaml")]):
        assert main(["variant", str(variant), *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert "write each to a file of its own" in err and len(err.splitlines()) == 1, err
    assert variant.read_text() == before and not (tmp_path / "o.yaml").exists()
    assert main(["variant", str(variant), "--fixed", str(tmp_path / "new" / "fixed.yaml")]) == 0  # a new folder
    assert load_variant(tmp_path / "new" / "fixed.yaml").spec["mass_scale"] == {".*THIGH": 1.1}


def test_a_variant_survives_the_yaml_round_trip(anymal, tmp_path):
    spec = {"robot": "anymal_c", "payload": {"body": "base", "mass": 2.0, "pos": [0.0, 0.0, 0.1]}}
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(spec))
    from flashnerd.robots.variant import load_variant

    v = load_variant(path)
    assert v.name == "v" and v.spec == spec and len(v.digest()) == 16


# --- actuation: delay and the torque-speed line (sim/actuation.py) --------------------------------------------------

def _responses(robot, targets, backend="mujoco"):
    dyn = make_dynamics(backend, robot, targets[0].shape[0])
    out = []
    for t in targets:
        dyn.step(t)
        out.append(torch.cat([dyn.state().qpos, dyn.state().joint_torque], dim=1).clone())  # (N, nq + nu)
    dyn.close()
    return torch.stack(out)  # (T, N, nq + nu)


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
def test_a_delay_of_one_control_period_replays_the_nominal_response_one_step_later(anymal, backend):
    g = torch.Generator().manual_seed(0)
    hold = torch.tensor(anymal.default_joint_pos).expand(2, -1)  # (2, nu)
    targets = [hold + 0.3 * torch.randn(2, anymal.num_joints, generator=g) for _ in range(12)]
    delayed = _responses(anymal.with_variant(_variant(actuators={".*": {"delay_s": anymal.control_dt}})), targets,
                         backend)
    shifted = _responses(anymal, [hold] + targets[:-1], backend)  # the nominal robot, told everything a step late
    nominal = _responses(anymal, targets, backend)
    assert torch.allclose(delayed, shifted, atol=1e-4 if backend == "mjwarp" else 1e-5)  # float32 outputs
    assert (delayed - nominal).abs().max() > 0.1  # the delay is not a no-op


def test_a_delay_of_some_physics_steps_shifts_each_substep_control_by_that_many(cartpole):
    """Against MuJoCo's own rollout of the scene under the per-substep controls shifted by 2 physics steps."""
    from mujoco import rollout

    robot = cartpole.with_variant(parse_variant({"robot": "cartpole", "actuators": {".*": {"delay_s": 0.01}}}, "d"))
    targets = [torch.tensor([[0.4 * np.sin(k)]]) for k in range(10)]  # (1, 1) each
    ours = _responses(robot, targets)[:, 0, :2].double().numpy()  # (T, nq)
    dec, m = cartpole.decimation, build_scene(cartpole)
    per_substep = np.repeat(np.concatenate([[0.0], np.array(targets).reshape(-1)]), dec)  # default target first
    control = per_substep[dec - 2:dec - 2 + dec * len(targets)].reshape(1, -1, 1)  # (1, T*dec, nu) two steps late
    state0 = np.zeros((1, mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
    state0[0, 1:1 + m.nq] = m.qpos0
    states, _ = rollout.rollout(m, mujoco.MjData(m), state0, control)
    assert np.allclose(ours, states[0, dec - 1::dec, 1:1 + m.nq], atol=1e-6)  # float32 outputs


def test_a_delay_between_physics_steps_takes_effect_at_the_next_one(cartpole):
    """The physics holds each substep's control, so a target that arrives 7 ms late on a 5 ms step is first applied
    in the substep that starts at 10 ms: the response of a 10 ms delay; and a delay of 1 ns is one substep, not
    none."""
    targets = [torch.tensor([[0.4 * np.sin(k)]]) for k in range(10)]  # (1, 1) each

    def response(delay_s: float) -> torch.Tensor:
        spec = {"robot": "cartpole", "actuators": {".*": {"delay_s": delay_s}}}
        return _responses(cartpole.with_variant(parse_variant(spec, "d")), targets)

    assert torch.equal(response(0.007), response(0.01))
    assert torch.equal(response(1e-9), response(0.005))
    assert not torch.equal(response(0.005), response(0.01))


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
def test_a_drawn_delay_reaches_back_as_far_as_its_range_allows(cartpole, backend):
    """A range whose every draw is its longest delay (low = high, 3.5 control steps on cartpole: the target history
    sized for the range, not for the file's own delay) steps exactly as that delay fixed in the file."""
    targets = [torch.tensor([[0.4 * np.sin(k)], [0.3 * np.cos(k)]]) for k in range(12)]  # (2, 1) each
    longest = 3.5 * cartpole.control_dt
    drawn = {"robot": "cartpole", "actuators": {".*": {"delay_s": 0.0}},
             "randomize": {"actuators.delay_s": [longest, longest]}}
    fixed = {"robot": "cartpole", "actuators": {".*": {"delay_s": longest}}}
    ours, want = (_responses(cartpole.with_variant(parse_variant(v, "d")), targets, backend) for v in (drawn, fixed))
    assert torch.equal(ours, want)
    assert not torch.equal(ours, _responses(cartpole, targets, backend))


def test_a_reset_world_starts_from_held_default_targets(anymal):
    robot = anymal.with_variant(_variant(actuators={".*": {"delay_s": 0.03}}))
    hold = torch.tensor(anymal.default_joint_pos).unsqueeze(0)
    fresh, used = make_dynamics("mujoco", robot, 1), make_dynamics("mujoco", robot, 1)
    for _ in range(3):
        used.step(hold + 0.5)
    start = fresh.state()
    used.reset(torch.tensor([0]), start.qpos.clone(), start.qvel.clone())
    for t in (hold + 0.2, hold - 0.2, hold):
        fresh.step(t)
        used.step(t)
        assert torch.allclose(fresh.state().qpos, used.state().qpos, atol=1e-9)


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
def test_the_torque_limit_falls_linearly_to_zero_at_the_no_load_speed(cartpole, backend):
    """One physics step per control step: the force on the cart is min(asked, 100 N x (1 - |v| / 0.5)) in closed
    form, whichever way the cart moves; the nominal actuator gives its full 100 N at every speed."""
    import dataclasses

    one_step = dataclasses.replace(cartpole, decimation=1)
    line = parse_variant({"robot": "cartpole", "actuators": {".*": {"no_load_speed": 0.5}}}, "line")
    speeds = torch.tensor([0.0, 0.1, 0.25, 0.45, 0.5, 0.7, -0.25, -0.6])
    for robot, limited in ((one_step.with_variant(line), True), (one_step, False)):
        dyn = make_dynamics(backend, robot, len(speeds))
        qpos = torch.zeros(len(speeds), 2)
        dyn.reset(torch.arange(len(speeds)), qpos, torch.stack([speeds, torch.zeros_like(speeds)], dim=1))
        dyn.step(torch.full((len(speeds), 1), 1.5))  # 1.5 m ahead: kp 100 asks for more than the 100 N limit
        asked = (100.0 * 1.5 - 15.0 * speeds).clamp(-100.0, 100.0)  # kp (target - x) - kv v, clamped
        room = (1.0 - speeds.abs() / 0.5).clamp(min=0.0) if limited else torch.ones_like(speeds)
        expected = torch.minimum(asked, 100.0 * room)
        assert torch.allclose(dyn.state().joint_torque[:, 0], expected, atol=1e-3), (robot.variant, backend)
        dyn.close()


def test_a_training_run_keeps_the_variant_it_trained_on(tmp_path):
    """params/robot_variant.yaml is a checked copy of the variant: the same content (digest) when the file the config
    names is later edited or gone."""
    source = tmp_path / "worn.yaml"
    source.write_text((Path(__file__).parents[1] / "variants" / "anymal_c_worn.yaml").read_text())
    digest = load_variant(source).digest()
    assert main(["train", "--task", TASK, "--num_envs", "4", "--max_iterations", "1", "--eval_episodes", "0",
                 "--robot_variant", str(source), "--log_root", str(tmp_path / "logs")]) == 0
    source.unlink()
    kept = next((tmp_path / "logs").glob("*/*/params/robot_variant.yaml"))
    assert load_variant(kept).digest() == digest
