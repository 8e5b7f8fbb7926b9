"""Domain randomization from a variant's `randomize` ranges: every world steps exactly as a scene compiled with its
drawn values, draws stay in their ranges and change only at a world's reset, follow the seed, and the two variants
a reality-gap study needs (the fixed robot, the ranges alone) are variant files of their own."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import TASK

from flashnerd.dynamics import make_dynamics
from flashnerd.envs.memory import world_axis_bytes
from flashnerd.robots.variant import VariantError, load_variant, parse_variant

WORN = {"payload": {"body": "base", "mass": 8.0, "pos": [0.0, 0.0, 0.05]}, "mass_scale": {".*THIGH": 1.1},
        "joints": {".*_(HAA|HFE|KFE)": {"damping": 3.0, "armature": 0.03, "frictionloss": 1.0}},
        "actuators": {".*": {"kp_scale": 0.75, "kv_scale": 1.0, "effort_scale": 0.7}},
        "friction_scale": {".*FOOT": 0.6}}
# every randomizable path that draws model fields, each range away from the file's own value
RANGES = {"payload.mass": [0.0, 10.0], "mass_scale": [0.9, 1.3], "friction_scale": [0.4, 1.0],
          "joints.damping": [0.0, 4.0], "joints.armature": [0.0, 0.05], "joints.frictionloss": [0.0, 1.5],
          "actuators.kp_scale": [0.5, 1.0], "actuators.kv_scale": [0.5, 2.0], "actuators.effort_scale": [0.6, 1.0]}
# the paths that draw each world's actuation instead (sim/actuation.py): delays of 0 to 8 physics steps (two control
# steps), and torque-speed lines that bind in the random-target runs below
ACTUATION = {"actuators.delay_s": [0.0, 0.04], "actuators.no_load_speed": [4.0, 12.0]}


def _randomized(ranges=RANGES, base=WORN, **extra):
    spec = copy.deepcopy(base)
    for key, value in extra.items():
        spec[key] = value
    return parse_variant({"robot": "anymal_c", **spec, "randomize": ranges}, "worn_dr")


def _fixed_at(variant, draw: np.ndarray):
    """The variant without ranges whose drawn keys hold `draw` (P,): the scene a world with that draw must equal."""
    spec = copy.deepcopy(variant.fixed().spec)
    for path, x in zip(variant.randomized, draw):
        section, _, key = path.partition(".")
        if path == "payload.mass":
            spec["payload"]["mass"] = float(x)
        elif section in ("mass_scale", "friction_scale"):
            spec[section] = {p: float(x) for p in spec[section]}
        else:  # a path without its section draws for every joint or actuator
            for p in spec.setdefault(section, {".*": {}}):
                spec[section][p][key] = float(x)
    return parse_variant(spec, "fixed")


def _run(dyn, ctrl_seq, n):
    q0 = torch.as_tensor(dyn.default_qpos(), dtype=torch.float32)
    dyn.reset(torch.arange(n), q0.repeat(n, 1), torch.zeros(n, dyn.nv_r))
    for ctrl in ctrl_seq:
        dyn.step(ctrl)
    return dyn.state().qpos.clone(), dyn.state().joint_torque.clone()


LINE = {"actuators": {".*": {**WORN["actuators"][".*"], "no_load_speed": 12.0}}}
ALL_BODIES = {"mass_scale": {".*": 1.1}}  # matches every robot body; the payload keeps its own mass


EVERY_PATH = {**RANGES, **ACTUATION}


@pytest.mark.parametrize("backend, tol, extra, ranges", [
    ("mujoco", 0.0, {}, RANGES), ("mujoco", 0.0, LINE, RANGES), ("mujoco", 0.0, ALL_BODIES, RANGES),
    ("mujoco", 0.0, {}, EVERY_PATH), ("mujoco", 0.0, {"base": {}}, ACTUATION),
    ("mjwarp", 1e-4, {}, RANGES), ("mjwarp", 1e-4, LINE, RANGES), ("mjwarp", 1e-4, {}, EVERY_PATH)])
def test_each_world_steps_as_the_scene_compiled_with_its_draw(anymal, backend, tol, extra, ranges):
    """Every path drawn at once (also under a torque-speed line, whose force law follows the drawn gains and
    limits, with a mass scale over every body, with each world's own delay and line, and those two alone over the
    nominal robot): world i after 20 steps of random targets equals a one-world scene compiled with world i's
    values."""
    variant = _randomized(ranges, **extra)
    n = 3
    torch.manual_seed(5)
    dyn = make_dynamics(backend, anymal.with_variant(variant), n)
    g = torch.Generator().manual_seed(0)
    default = torch.tensor(anymal.default_joint_pos, dtype=torch.float32)
    ctrl_seq = [default + 0.5 * torch.randn(n, anymal.num_joints, generator=g) for _ in range(20)]
    qpos, torque = _run(dyn, ctrl_seq, n)  # its reset of every world drew the values the worlds ran with
    for i in range(n):
        ref = make_dynamics(backend, anymal.with_variant(_fixed_at(variant, dyn.draws[i])), 1)
        q_ref, t_ref = _run(ref, [c[i:i + 1] for c in ctrl_seq], 1)
        assert (qpos[i] - q_ref[0]).abs().max() <= tol, (i, (qpos[i] - q_ref[0]).abs().max())
        assert (torque[i] - t_ref[0]).abs().max() <= 100 * tol
    assert (qpos[0] - qpos[1]).abs().max() > 0.05  # the worlds really differ
    if backend == "mujoco" and ranges is ACTUATION:  # no model field drawn: the worlds share one model
        assert world_axis_bytes(dyn, n) < dyn.scene.nbuffer


def test_learned_backends_take_the_fixed_robot(anymal):
    """A model has no masses to draw: a learned backend given a randomized variant uses the file's fixed values."""
    variant = _randomized()
    dyn = make_dynamics("flashnerd", anymal.with_variant(variant), 2)
    fixed = make_dynamics("mujoco", anymal.with_variant(variant.fixed()), 1).scene
    assert np.allclose(dyn.scene.actuator_gainprm[:, 0], fixed.actuator_gainprm[:, 0])  # kp 0.75 x nominal
    assert np.allclose(dyn.scene.actuator_forcerange, fixed.actuator_forcerange)


def test_draws_are_in_range_redrawn_at_reset_only_and_follow_the_seed(anymal):
    variant = _randomized()
    robot = anymal.with_variant(variant)
    n = 64
    torch.manual_seed(1)
    dyn = make_dynamics("mujoco", robot, n)
    lo, hi = (np.array([r[k] for r in RANGES.values()]) for k in (0, 1))
    assert np.all(dyn.draws >= lo) and np.all(dyn.draws <= hi)
    assert np.all(dyn.draws.max(0) - dyn.draws.min(0) > 0.5 * (hi - lo))  # spread over the range
    before = dyn.draws.copy()
    masses = np.array([m.body_mass[m.body("variant_payload").id] for m in dyn._models])
    assert np.array_equal(masses, before[:, 0])  # each world's model holds its own draw
    dyn.step(torch.tensor(anymal.default_joint_pos, dtype=torch.float32).repeat(n, 1))
    assert np.array_equal(dyn.draws, before)  # a step draws nothing
    ids = torch.tensor([3, 10])
    dyn.reset(ids, dyn.state().qpos[ids].clone(), torch.zeros(2, dyn.nv_r))
    changed = np.flatnonzero(np.any(dyn.draws != before, axis=1))
    assert changed.tolist() == [3, 10]
    torch.manual_seed(1)
    again = make_dynamics("mujoco", robot, n)
    torch.manual_seed(2)
    other = make_dynamics("mujoco", robot, n)
    assert np.array_equal(again.draws, before) and not np.allclose(other.draws, before)
    assert world_axis_bytes(dyn, n) > n * dyn.scene.nbuffer  # the per-world models count in the memory estimate
    for d in (dyn, again, other):
        d.close()


def test_fixed_and_ranges_only_are_variant_files_of_their_own(anymal, tmp_path):
    variant = _randomized()
    fixed, ranges = variant.fixed(), variant.ranges_only()
    assert "randomize" not in fixed.spec and fixed.spec["payload"]["mass"] == 8.0
    assert ranges.randomized == variant.randomized
    assert set(ranges.spec) == {"robot", "payload", "mass_scale", "friction_scale", "joints", "actuators",
                                "randomize"}
    for v in (fixed, ranges):
        v.write(tmp_path / f"{v.name}.yaml")
        assert load_variant(tmp_path / f"{v.name}.yaml").spec == v.spec
    # the ranges alone keep nothing the file fixed: without draws a world would be the nominal robot
    only_payload = parse_variant({"robot": "anymal_c", **WORN, "randomize": {"payload.mass": [0.0, 10.0]}}, "p")
    assert set(only_payload.ranges_only().spec) == {"robot", "payload", "randomize"}
    torch.manual_seed(0)
    dyn = make_dynamics("mujoco", anymal.with_variant(only_payload.ranges_only()), 2)
    nominal = make_dynamics("mujoco", anymal, 1)
    m, m0 = dyn._models[0], nominal.scene
    assert np.allclose(m.actuator_forcerange[:, 1], m0.actuator_forcerange[:, 1])  # no worn actuators
    assert np.allclose(m.dof_damping[6:], m0.dof_damping[6:])


def test_scaling_the_force_range_of_an_actuator_without_one_is_refused(cartpole):
    from flashnerd.sim.randomize import randomization_for
    from flashnerd.sim.scene import build_scene

    spec = {"robot": "cartpole", "randomize": {"actuators.effort_scale": [0.5, 1.0]}}
    robot = cartpole.with_variant(parse_variant(spec, "x"))
    model = build_scene(robot)
    assert randomization_for(robot, model) is not None
    model.actuator_forcelimited[:] = 0  # as an MJCF without forcerange compiles
    with pytest.raises(VariantError, match="scales the force range of actuator .* which has none"):
        randomization_for(robot, model)


def test_the_task_trains_on_a_randomized_variant(tmp_path):
    """`train --robot_variant` with ranges runs on mujoco (each world its own model) and writes a policy."""
    from flashnerd.cli.main import main

    variant = _randomized()
    path = tmp_path / "dr.yaml"
    variant.write(path)
    assert main(["train", "--task", TASK, "--num_envs", "8", "--max_iterations", "1", "--robot_variant", str(path),
                 "--log_root", str(tmp_path / "logs"), "--eval_episodes", "1"]) == 0
    assert list((tmp_path / "logs").rglob("model_*.pt"))


def test_the_variant_command_checks_a_file_and_writes_its_two_halves(tmp_path, capsys):
    import json

    from flashnerd.cli.main import main

    fixed, ranges = tmp_path / "robot.yaml", tmp_path / "ranges.yaml"
    assert main(["variant", "variants/anymal_c_worn_dr.yaml", "--fixed", str(fixed), "--ranges_only", str(ranges)]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    worn = load_variant("variants/anymal_c_worn_dr.yaml")
    assert printed["randomize"] == {k: list(v) for k, v in worn.randomized.items()}
    assert load_variant(fixed).spec == worn.fixed().spec and load_variant(ranges).spec == worn.ranges_only().spec
    for argv, message in ((["variants/anymal_c_worn.yaml", "--ranges_only", str(tmp_path / "x.yaml")],
                           "has no randomize ranges"),
                          ([str(_bad_file(tmp_path))], "matches none of the robot's names")):
        assert main(["variant", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "ranges.yaml", "robot.yaml"]


def test_the_variant_report_lists_exactly_what_the_file_changes(tmp_path):
    """`flashnerd variant`'s changes: every stated value against the nominal compiled robot, read independently here
    from MuJoCo's model, and nothing else (kd stays with a payload: the damping ratio is pinned); a delay shows the
    whole physics steps it takes effect after; each range names the elements its draws are written to."""
    import mujoco

    from flashnerd.robots import get_robot
    from flashnerd.sim.scene import build_scene, variant_robot
    from flashnerd.sim.variant_report import variant_report

    path = tmp_path / "checker.yaml"
    path.write_text("robot: anymal_c\npayload: {body: base, mass: 4.0, pos: [0.1, 0.0, 0.0]}\n"
                    "mass_scale: {'L[FH]_SHANK': 1.25}\njoints: {'.*_KFE': {frictionloss: 0.5}}\n"
                    "actuators: {'RH_.*': {effort_scale: 0.5, delay_s: 0.013}}\nfriction_scale: {'.*FOOT': 0.4}\n"
                    "randomize: {joints.damping: [0.5, 3.0]}\n")
    nominal = build_scene(get_robot("anymal_c"))
    report = variant_report(variant_robot("anymal_c", str(path)))
    rows = {(r["quantity"], r["element"]): (r["nominal"], r["variant"]) for r in report["changes"]}
    expected = {("mass (kg)", "variant_payload"): (None, 4.0)}
    for leg in ("LF", "LH"):
        mass = nominal.body(f"{leg}_SHANK").mass[0]
        expected[("mass (kg)", f"{leg}_SHANK")] = (mass, 1.25 * mass)
    for leg in ("LF", "RF", "LH", "RH"):
        expected[("friction loss (N m)", f"{leg}_KFE")] = (nominal.joint(f"{leg}_KFE").frictionloss[0], 0.5)
        foot = [g for g in range(nominal.ngeom) if nominal.geom(g).name.upper() == f"{leg}_FOOT"][0]
        expected[("ground friction", nominal.geom(foot).name)] = (1.0, 0.4)  # the floor's 1.0 decided before
    for joint in ("HAA", "HFE", "KFE"):
        limit = nominal.actuator(f"RH_{joint}").forcerange
        expected[("effort low (N m)", f"RH_{joint}")] = (limit[0], 0.5 * limit[0])
        expected[("effort high (N m)", f"RH_{joint}")] = (limit[1], 0.5 * limit[1])
        expected[("delay (s)", f"RH_{joint}")] = (0.0, 0.015)  # 0.013 s: from the third 5 ms physics step
    assert rows.keys() == expected.keys()
    for key, (before, after) in expected.items():
        assert list(rows[key]) == [v if v is None else pytest.approx(v, rel=1e-9) for v in (before, after)], key
    payload = next(r for r in report["changes"] if r["element"] == "variant_payload")
    assert payload["parent"] == "base" and payload["pos"] == [0.1, 0.0, 0.0]
    added = 4.0 + 0.25 * (nominal.body("LF_SHANK").mass[0] + nominal.body("LH_SHANK").mass[0])
    assert report["total_mass_kg"]["variant"] == pytest.approx(report["total_mass_kg"]["nominal"] + added)
    assert report["draws"] == {"joints.damping": {"range": [0.5, 3.0], "elements": [
        nominal.joint(j).name for j in range(nominal.njnt) if nominal.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE
        and nominal.joint(j).name.endswith("_KFE")]}}


def _bad_file(folder):
    path = folder / "bad.yaml"
    path.write_text("robot: anymal_c\nmass_scale: {'.*WING': 1.1}\nrandomize: {mass_scale: [0.9, 1.1]}\n")
    return path
