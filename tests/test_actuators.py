"""Actuator identification: the PD gains and torque limits that explain a robot's measured torques, fitted into the
checkpoint and read by the learned backend for the torque it reports."""

from __future__ import annotations

import dataclasses
import re

import h5py
import pytest
import torch
from conftest import record_nominal_and_worn

from flashnerd.contacts import contact_features
from flashnerd.data.dataset import load_dataset
from flashnerd.data.record import record
from flashnerd.dynamics import make_dynamics
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.models.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from flashnerd.robots import get_robot
from flashnerd.robots.variant import load_variant
from flashnerd.sim.scene import build_scene
from flashnerd.training.actuators import _fit_joint, identify_actuators, nominal_actuators, torque_features
from flashnerd.training.fit import FitConfig, Fitter

SMALL = dict(batch_size=8, ar_batch_size=4, window=8, eval_every=2, ar_history=4, ar_steps=2, contact_head_steps=0)
KP_RTOL = 0.07
PHASE = 3 / 4  # ANYmal-C steps 4 substeps per control step: its torque is read at the last


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Exploration data of the nominal ANYmal-C and of its worn variant (kp 0.75x, torque limits 0.7x)."""
    root = tmp_path_factory.mktemp("actuators")
    record_nominal_and_worn(root, nominal_worlds=8, worn_worlds=8, steps=60)
    return root


@pytest.fixture(scope="module")
def worn_model(logs):
    """A one-step fit on the worn robot's data (its actuators are identified at the end of the fit) and its result."""
    out = logs / "worn.safetensors"
    result = Fitter(logs / "worn.h5", dataclasses.replace(FitConfig(), max_steps=1, **SMALL)).fit(out, progress=False)
    return out, result


def _identify(path):
    robot = get_robot("anymal_c")
    scene = build_scene(robot, "flat")
    rep = StateRepresentation.for_robot(robot, scene, contact_features(robot, scene).dim)
    train, val = load_dataset(path).split(0.25, seed=0)
    return identify_actuators(train, val, rep, scene, PHASE), nominal_actuators(scene)


def test_the_worn_robots_gains_and_limits_are_found_in_its_torques(logs):
    (found, card), nominal = _identify(logs / "worn.h5")
    # the variant's kp, 150, to the few percent the interpolated substep state allows (knees read lowest): the gains
    # are those that best predict the measured torque from what the backend knows, the states at control steps
    assert torch.allclose(found["kp"], 0.75 * nominal["kp"], rtol=KP_RTOL)
    assert torch.allclose(found["kd"], nominal["kd"], rtol=0.2)  # kv_scale 1.0: the nominal damping gain
    # no drive lag, and no torque-speed line but (where a joint's fixed clamp fits worse) one far beyond its speeds
    assert not found["lag"].any() and all(s is None or s > 50.0 for s in card["no_load_speed"])
    fixed = torch.isinf(found["no_load_speed"])  # (nu,) joints whose clamp is a constant
    low, high = found["effort_low"][fixed], found["effort_high"][fixed]
    clamped = torch.cat([low[low > -80], high[high < 80]])  # sides where the data showed a clamp
    assert clamped.numel() > 0 and torch.allclose(clamped.abs(), torch.tensor(0.7 * 80.0))  # 56 N m, exactly
    assert card["torque_nrmse_identified"] < 0.25 * card["torque_nrmse_nominal"]


def test_the_nominal_robots_gains_are_found_again(logs):
    (found, card), nominal = _identify(logs / "sim.h5")
    assert torch.allclose(found["kp"], nominal["kp"], rtol=KP_RTOL)
    assert card["torque_nrmse_identified"] <= card["torque_nrmse_nominal"] + 1e-3
    assert not found["lag"].any()  # MuJoCo's drive answers at once


@pytest.mark.parametrize("drive, lag, speed", [
    # 20 ms = 4 physics steps: the last substep of a step still holds the previous step's target
    ("{kp_scale: 0.8, effort_scale: 0.7, delay_s: 0.02, no_load_speed: 10.0}", 1, 10.0),
    ("{delay_s: 0.04}", 2, None),  # 8 physics steps: two control steps late, no torque-speed line
    ("{delay_s: 0.01, no_load_speed: 6.0}", 0, 6.0),  # 2 physics steps: in effect by the last substep
])
def test_a_lagging_saturating_drive_is_identified(tmp_path, drive, lag, speed):
    """Delay and torque-speed line (sim/actuation.py) are found from 8 x 60 steps of exploration: the lag in whole
    control steps the last substep reads, the no-load speed to 10%, the gains and stall limits with them."""
    (tmp_path / "drive.yaml").write_text(f'robot: anymal_c\nactuators: {{".*": {drive}}}\n')
    robot = get_robot("anymal_c").with_variant(load_variant(tmp_path / "drive.yaml"))
    record(robot, num_worlds=8, steps=60, out=tmp_path / "drive.h5", traj_len=20, seed=3, progress=False)
    (found, card), nominal = _identify(tmp_path / "drive.h5")
    assert card["identified"] == list(range(12)) and found["lag"].tolist() == [lag] * 12
    kp = (0.8 if "kp_scale" in drive else 1.0) * nominal["kp"]  # (nu,)
    # the gains to a few percent; a knee's less closely where a slow line clamps most of its samples (the law reads
    # the substep state interpolated between control steps, and the knees move fastest)
    assert float((found["kp"] / kp).median()) == pytest.approx(1.0, abs=0.03)
    assert torch.allclose(found["kp"], kp, rtol=0.15)
    if speed is None:  # no line, or one far beyond any speed the joints reached (12 rad/s here)
        assert all(s is None or s > 50.0 for s in card["no_load_speed"])
    else:
        assert torch.allclose(found["no_load_speed"], torch.tensor(speed), rtol=0.1)
        stall = torch.cat([found["effort_low"], found["effort_high"]]).abs().median()
        assert float(stall) == pytest.approx((0.7 if "effort_scale" in drive else 1.0) * 80.0, rel=0.05)
    assert card["torque_nrmse_identified"] < 0.2 * card["torque_nrmse_nominal"]


def test_the_learned_backend_reports_the_lagged_line_limited_torque(worn_model, tmp_path):
    """With lags of 2, 1 and 0 steps and a no-load speed in the checkpoint the reported torque reads the target sent
    that many steps earlier and the shrunken limits; a reset world's earlier targets are its default pose (the
    analytical backends' history) and the other worlds keep theirs. The steps run under torch.inference_mode, as
    rsl_rl's rollouts do, and the resets outside it."""
    ckpt = read_checkpoint(worn_model[0])
    entry = ckpt["actuators"]
    entry["lag"] = torch.tensor([2.0] * 4 + [1.0] * 4 + [0.0] * 4)
    entry["no_load_speed"] = torch.full((12,), 0.5)  # slow enough that the line binds on the first steps
    save_checkpoint(tmp_path / "drive.safetensors", ckpt)
    dyn = make_dynamics("flashnerd", get_robot("anymal_c"), 3, checkpoint=str(tmp_path / "drive.safetensors"))
    rest = dyn.rep.actuated_pos(dyn.state().qpos).clone()  # (3, nu) the default pose
    lag = entry["lag"].long()  # (nu,)
    sent = [rest, rest]  # (3, nu) per step, oldest first: the history a fresh backend starts from

    def step_and_check(ctrl: torch.Tensor, worlds: torch.Tensor) -> None:
        before_q, before_v = dyn.state().qpos.clone(), dyn.state().qvel.clone()
        with torch.inference_mode():
            dyn.step(ctrl)
        sent.append(ctrl)
        q = torch.lerp(dyn.rep.actuated_pos(before_q), dyn.rep.actuated_pos(dyn.state().qpos), PHASE)  # (3, nu)
        v = torch.lerp(dyn.rep.actuated_vel(before_v), dyn.rep.actuated_vel(dyn.state().qvel), PHASE)  # (3, nu)
        target = torch.stack(sent[::-1])[lag, :, torch.arange(12)].t()  # (3, nu): sent[-1 - lag] per joint
        share = (1 - v.abs() / entry["no_load_speed"]).clamp_min(0)  # (3, nu)
        expected = torch.clamp(entry["kp"] * (target - q) - entry["kd"] * v, min=entry["effort_low"] * share)
        expected = torch.minimum(expected, entry["effort_high"] * share)  # (3, nu)
        assert torch.allclose(dyn.state().joint_torque[worlds], expected[worlds], atol=1e-4)
        assert (share < 1).any()  # the line took part

    every = torch.arange(3)
    for k in range(4):
        step_and_check(rest + 0.2 * (k + 1) * torch.tensor([1.0, -1.0, 0.5])[:, None], every)  # a new target each step
    dyn.reset(torch.tensor([1]), dyn.state().qpos[1:2] + 0.0, torch.zeros(1, dyn.nv))
    for history in sent[-2:]:
        history[1] = rest[1]  # world 1 forgot its targets; worlds 0 and 2 did not
    step_and_check(rest - 0.1, every)
    step_and_check(rest + 0.3, every)
    dyn.reset_history(torch.tensor([2]))  # the coupled backend restarts an episode this way, keeping the state
    for history in sent[-2:]:
        history[2] = rest[2]
    step_and_check(rest + 0.1, every)


def test_the_differentiable_backend_reports_the_same_lagged_torque_with_its_gradient(worn_model, tmp_path):
    """The functional (autograd) step keeps its own lag history: the same torques as the in-place step, and the
    backward pass from a lagged joint's torque to the targets sent earlier runs (the history is replaced, not written
    over what earlier steps saved)."""
    ckpt = read_checkpoint(worn_model[0])
    ckpt["actuators"]["lag"] = torch.tensor([2.0] * 4 + [1.0] * 4 + [0.0] * 4)
    save_checkpoint(tmp_path / "drive.safetensors", ckpt)
    kwargs = dict(checkpoint=str(tmp_path / "drive.safetensors"))
    plain = make_dynamics("flashnerd", get_robot("anymal_c"), 2, **kwargs)
    grad = make_dynamics("flashnerd", get_robot("anymal_c"), 2, differentiable=True, **kwargs)
    rest = plain.rep.actuated_pos(plain.state().qpos).clone()  # (2, nu)
    ctrls = [(rest + 0.1 * (k + 1)).requires_grad_(True) for k in range(3)]
    for ctrl in ctrls:
        with torch.no_grad():
            plain.step(ctrl)
        grad.step(ctrl)
        assert torch.allclose(grad.state().joint_torque, plain.state().joint_torque, atol=1e-4)
    grads = torch.autograd.grad(grad.state().joint_torque[0, 4], ctrls[:2])  # a lag-1 joint, last step
    assert all(torch.isfinite(g).all() for g in grads) and grads[1][0, 4] != 0


def test_a_fit_writes_them_and_the_learned_backend_reports_their_torque(logs, worn_model, tmp_path):
    out, result = worn_model
    entry = read_checkpoint(out)["actuators"]
    assert result["actuators"]["torque_nrmse_identified"] == entry["card"]["torque_nrmse_identified"]
    robot = get_robot("anymal_c")
    dyn = make_dynamics("flashnerd", robot, 3, checkpoint=str(out))
    before_q, before_v = dyn.state().qpos.clone(), dyn.state().qvel.clone()
    ctrl = dyn.rep.actuated_pos(before_q) + 0.3  # (3, nu) a target error the PD law answers
    dyn.step(ctrl)
    q = torch.lerp(dyn.rep.actuated_pos(before_q), dyn.rep.actuated_pos(dyn.state().qpos), PHASE)  # (3, nu)
    v = torch.lerp(dyn.rep.actuated_vel(before_v), dyn.rep.actuated_vel(dyn.state().qvel), PHASE)  # (3, nu)
    expected = torch.clamp(entry["kp"] * (ctrl - q) - entry["kd"] * v, entry["effort_low"], entry["effort_high"])
    assert torch.allclose(dyn.state().joint_torque, expected, atol=1e-4)

    # data without measured torque: a refit from that model keeps its actuators
    with h5py.File(logs / "worn.h5") as src, h5py.File(tmp_path / "no_torque.h5", "w") as dst:
        for key in ("qpos", "qvel", "ctrl"):
            src.copy(key, dst)
        dst.attrs.update(src.attrs)
    refit = Fitter(tmp_path / "no_torque.h5", dataclasses.replace(FitConfig(), max_steps=1, **SMALL))
    refit.init_from(out)
    again = refit.fit(tmp_path / "refit.safetensors", progress=False)
    assert "no measured torque" in again["actuators"] and "kept" in again["actuators"]
    kept = read_checkpoint(tmp_path / "refit.safetensors")["actuators"]
    assert all(torch.equal(kept[k], entry[k]) for k in ("kp", "kd", "effort_low", "effort_high"))


def test_a_joint_without_torque_keeps_its_law_and_a_repeated_reading_is_no_clamp(logs):
    """One joint's torque missing (NaN) leaves the others identified and that joint on its starting law; a torque
    sensor that repeats its lowest reading is not taken for a clamp, since the fitted law asks for no less there."""
    robot = get_robot("anymal_c")
    scene = build_scene(robot, "flat")
    rep = StateRepresentation.for_robot(robot, scene, contact_features(robot, scene).dim)
    train, val = load_dataset(logs / "sim.h5").split(0.25, seed=0)
    train.torque = train.torque.clone()
    train.torque[..., 3] = float("nan")
    prior = {k: v + 1.0 for k, v in nominal_actuators(scene).items()}  # a starting checkpoint's (other) law
    found, card = identify_actuators(train, val, rep, scene, PHASE, prior)
    # a joint whose starting law predicts its held-out torque as well keeps it (a knee may: its least-squares law
    # carries the interpolated substep state's bias)
    assert 3 not in card["identified"] and 0 in card["identified"] and len(card["identified"]) >= 8
    kept = [j for j in range(12) if j not in card["identified"]]
    assert all(found[k][j] == prior[k][j] for k in found for j in kept)

    error, vel, torque, ok = torque_features(train, rep, scene, PHASE)  # (K, nu) each
    side, e, v = torque[ok[:, 2], 2], error[ok[:, 2], 2], vel[ok[:, 2], 2]  # a knee that never reached -80 N m
    assert float(side.min()) > -70.0
    lowest = side <= side.topk(8, largest=False).values[-1]  # its 8 lowest readings
    repeated = torch.where(lowest, side[lowest].mean(), side)  # read as one value (their mean): a sensor's plateau
    assert _fit_joint(repeated, e, v, -80.0, 80.0)[2] == -80.0  # no clamp: the nominal limit stays
    clamp = float(side[lowest].max())  # the same readings held at the highest of them: what a clamp does
    assert _fit_joint(torch.clamp(side, min=clamp), e, v, -80.0, 80.0)[2] == pytest.approx(clamp)


def test_data_of_two_robots_identify_nothing(logs, worn_model, tmp_path):
    cfg = dataclasses.replace(FitConfig(), max_steps=1, **SMALL)
    fitter = Fitter([logs / "sim.h5", logs / "worn.h5"], cfg)
    fitter.init_from(worn_model[0])
    result = fitter.fit(tmp_path / "both.safetensors", progress=False)
    assert "mixes robots: nominal, anymal_c_worn" in result["actuators"] and "kept" in result["actuators"]


@pytest.mark.parametrize("edit, message", [
    (lambda a: a.update(kp=a["kp"][:3]), "for (3,) actuators, the robot has 12"),
    (lambda a: a["kd"].__setitem__(0, float("nan")), "non-finite gains or crossed torque limits"),
    (lambda a: a.update(effort_low=a["effort_high"] + 1), "non-finite gains or crossed torque limits"),
    (lambda a: a.update(effort_low=torch.full_like(a["kp"], float("inf")), effort_high=torch.full_like(
        a["kp"], float("inf"))), "non-finite gains or crossed torque limits"),
    (lambda a: a.pop("kd"), "lacks one of kp, kd"),
    (lambda a: a.update(lag=torch.full_like(a["kp"], 0.5)), "lag that is not a whole number of control steps"),
    (lambda a: a.update(lag=torch.full_like(a["kp"], 3.0)), "lag that is not a whole number of control steps"),
    (lambda a: a.update(no_load_speed=torch.zeros_like(a["kp"])), "no-load speed that is not positive"),
    (lambda a: a.update(no_load_speed=torch.full_like(a["kp"], float("nan"))), "no-load speed that is not positive"),
    (lambda a: a.update(no_load_speed=torch.full_like(a["kp"], 8.0), effort_high=torch.full_like(
        a["kp"], float("inf"))), "one on an unlimited actuator"),
    (lambda a: a.update(lag=[1.0] * 12), "'lag' is not an array"),
])
def test_a_damaged_actuators_entry_is_a_one_line_error(worn_model, tmp_path, edit, message):
    ckpt = read_checkpoint(worn_model[0])
    edit(ckpt["actuators"])
    save_checkpoint(tmp_path / "bad.safetensors", ckpt)
    with pytest.raises(CheckpointError, match=re.escape(message)) as err:
        make_dynamics("flashnerd", get_robot("anymal_c"), 2, checkpoint=str(tmp_path / "bad.safetensors"))
    assert len(str(err.value).splitlines()) == 1
