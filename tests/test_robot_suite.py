"""The suite robots (CartPole, Franka, G1): models load and behave, data round-trips through the representation, and
`flashnerd bench suite` runs end to end with tiny settings."""

from __future__ import annotations

import json
import math

import pytest
import torch

from flashnerd.contacts import contact_features
from flashnerd.data.dataset import load_dataset
from flashnerd.data.record import record
from flashnerd.dynamics import make_dynamics
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.robots import get_robot
from flashnerd.sim.scene import build_scene, default_qpos
from flashnerd.training.suite import SuiteConfig, run_suite
from flashnerd.viz.suite import write_outputs

SUITE_ROBOTS = ("cartpole", "franka", "g1")


def _hold_default(name: str, seconds: float, num_worlds: int = 2):
    """Run the mujoco backend under the default targets; returns the (steps, N, nq) qpos trace."""
    robot = get_robot(name)
    dyn = make_dynamics("mujoco", robot, num_worlds, nthread=1)
    ctrl = torch.tensor(robot.default_joint_pos, dtype=torch.float32).repeat(num_worlds, 1)
    trace = []
    for _ in range(int(seconds / robot.control_dt)):
        dyn.step(ctrl)
        trace.append(dyn.state().qpos.clone())
    dyn.close()
    return robot, torch.stack(trace)


def test_franka_holds_its_home_pose():
    robot, trace = _hold_default("franka", 3.0)
    assert torch.isfinite(trace).all()
    home = torch.tensor(robot.default_joint_pos)
    assert (trace[-1] - home).abs().max() < 0.05  # PD sag under gravity, no compensation


def test_g1_stands_under_default_targets():
    robot, trace = _hold_default("g1", 3.0)
    height = trace[:, :, 2]  # (T, N) pelvis height
    assert torch.isfinite(trace).all()
    assert height.min() > robot.init_base_height - 0.03 and height.max() < robot.init_base_height + 0.01


def test_microduck_stands_and_a_push_makes_it_fall_without_nan():
    robot, trace = _hold_default("microduck", 3.0)
    assert torch.isfinite(trace).all()
    assert (trace[:, :, 2] - robot.init_base_height).abs().max() < 0.01  # trunk height stays put
    dyn = make_dynamics("mujoco", robot, 1, nthread=1)
    qvel = torch.zeros(1, dyn.nv)
    qvel[0, 0], qvel[0, 4] = 1.0, 5.0  # forward at 1 m/s, pitching forward at 5 rad/s
    dyn.reset(torch.tensor([0]), torch.as_tensor(dyn.default_qpos(), dtype=torch.float32)[None], qvel)
    ctrl = torch.tensor(robot.default_joint_pos)[None]
    for _ in range(100):  # 2 s
        dyn.step(ctrl)
    qpos = dyn.state().qpos[0]
    dyn.close()
    up_z = 1 - 2 * (qpos[4] ** 2 + qpos[5] ** 2)  # z component of the trunk's up axis
    assert torch.isfinite(qpos).all() and (qpos[2] < robot.init_base_height - 0.03 or up_z < 0.7)


def test_allegro_holds_its_rest_pose():
    robot, trace = _hold_default("allegro", 2.0)
    assert torch.isfinite(trace).all()
    assert (trace[-1] - torch.tensor(robot.default_joint_pos)).abs().max() < 0.05


def test_cartpole_pole_is_unactuated_and_swings():
    robot = get_robot("cartpole")
    dyn = make_dynamics("mujoco", robot, 1, nthread=1)
    qpos = torch.tensor([[0.0, 0.1]])  # slider, hinge: pole 0.1 rad off upright
    dyn.reset(torch.tensor([0]), qpos, torch.zeros(1, 2))
    angles = []
    for _ in range(100):  # 2 s holding the cart at 0
        dyn.step(torch.zeros(1, 1))
        angles.append(dyn.state().qpos[0, 1].item())
    dyn.close()
    assert max(angles) > math.pi / 2  # it falls past horizontal
    assert all(math.isfinite(a) for a in angles)


@pytest.mark.parametrize("name", SUITE_ROBOTS)
def test_recorded_data_round_trips_through_the_representation(name, tmp_path):
    robot = get_robot(name)
    out = record(robot, 4, 20, tmp_path / f"{name}.h5", traj_len=10, seed=3, nthread=1, progress=False)
    data = load_dataset(out["out"], robot)
    assert data.qpos.shape[:2] == (8, 11) and data.ctrl.shape == (8, 10, robot.num_joints)
    scene = build_scene(robot)
    rep = StateRepresentation.for_robot(robot, scene, contact_features(robot, scene).dim)
    assert data.attrs["state_layout"] == rep.layout()
    q0, v0, q1, v1 = data.qpos[:, :-1], data.qvel[:, :-1], data.qpos[:, 1:], data.qvel[:, 1:]
    q1_hat, v1_hat = rep.apply(q0.double(), v0.double(), rep.increment(q0.double(), v0.double(), q1.double(),
                                                                         v1.double()))
    if robot.floating_base:  # q and -q are the same rotation
        q1_hat[..., 3:7] *= torch.sign((q1_hat[..., 3:7] * q1[..., 3:7].double()).sum(-1, keepdim=True))
    assert torch.allclose(q1_hat, q1.double(), atol=1e-5) and torch.allclose(v1_hat, v1.double(), atol=1e-5)
    # the exploration targets stay inside the actuators' control range
    lo, hi = torch.tensor(scene.actuator_ctrlrange, dtype=torch.float32).T
    assert (data.ctrl >= lo - 1e-6).all() and (data.ctrl <= hi + 1e-6).all()
    # the stored targets are what the actuated joints were driven towards: the error input equals ctrl - q
    x = rep.inputs(q0, v0, data.ctrl, torch.zeros(*q0.shape[:2], rep.contact_dim))
    err = x[..., slice(*rep.layout()["target_error"])]
    assert torch.allclose(err, data.ctrl - rep.actuated_pos(q0))


def test_cartpole_pole_angle_enters_the_model_as_sin_cos():
    robot = get_robot("cartpole")
    scene = build_scene(robot)
    rep = StateRepresentation.for_robot(robot, scene)
    assert rep.actuated == [0] and rep.periodic == [1] and not rep.floating_base
    qpos = torch.tensor([[0.3, 0.7]])
    wrapped = qpos + torch.tensor([[0.0, 2 * math.pi]])  # the same configuration, one turn later
    qvel, ctrl = torch.tensor([[0.1, -2.0]]), torch.tensor([[0.5]])
    assert torch.allclose(rep.inputs(qpos, qvel, ctrl), rep.inputs(wrapped, qvel, ctrl), atol=1e-6)
    assert not torch.allclose(rep.state_features(qpos, qvel), rep.state_features(wrapped, qvel))  # features: raw


def test_default_pose_sets_actuated_joints_only():
    robot = get_robot("cartpole")
    scene = build_scene(robot)
    qpos = default_qpos(robot, scene)
    assert qpos.shape == (2,) and qpos[1] == 0.0  # the unactuated hinge keeps its reference angle


def test_suite_runs_end_to_end_and_reuses_what_it_fitted(tmp_path):
    cfg = SuiteConfig(robots=("cartpole",), models=("flashnerd", "nerd", "rwm"), data_dir=str(tmp_path / "data"),
                      checkpoint_dir=str(tmp_path / "ckpt"), fit_seconds=0.0, fit_steps=3, record_worlds=8,
                      record_steps=24, traj_len=12, eval_rollouts=4, horizons=(1, 5), batches=(16,), max_batch=32,
                      throughput_seconds=0.05, command="pytest", fit_overrides={"window": 8, "eval_every": 3})
    first = run_suite(cfg, progress=False)
    models = first["robots"]["cartpole"]["models"]
    assert set(models) == {"flashnerd", "nerd", "rwm"}
    for kind, m in models.items():
        assert m["fitted_now"] and m["steps"] == 3
        assert set(m["nrmse"]) == {"1", "5"} and all(math.isfinite(v) for v in m["nrmse"].values())
        assert set(m["steps_per_s"]) == {"16", "max"} and m["max_batch"] == 32
        assert (tmp_path / "ckpt" / "cartpole" / f"{kind}.safetensors").is_file()
    card = (tmp_path / "ckpt" / "cartpole" / "README.md").read_text()
    assert "pytest" in card and "`rwm`" in card
    # a second run reuses the shipped checkpoints and measures the same accuracy (deterministic rollouts)
    second = run_suite(cfg, progress=False)
    for kind, m in second["robots"]["cartpole"]["models"].items():
        assert not m["fitted_now"]
        assert m["nrmse"] == pytest.approx(models[kind]["nrmse"], rel=1e-5)
    paths = write_outputs(second, tmp_path / "out", "suite")
    assert json.loads((tmp_path / "out" / "suite.json").read_text())["robots"]["cartpole"]["input_dim"] == 7
    table = (tmp_path / "out" / "suite.md").read_text()
    assert "| cartpole | FlashNeRD |" in table and "| cartpole | RWM |" in table and "FlashNeRD vs NeRD" in table
    assert (tmp_path / "out" / "suite.png").read_bytes()[:4] == b"\x89PNG"
    assert set(paths) == {"json", "table", "plot"}


def test_suite_refuses_unknown_robot_and_model(tmp_path):
    with pytest.raises(ValueError, match="unknown robot 'walle'"):
        run_suite(SuiteConfig(robots=("walle",), data_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        run_suite(SuiteConfig(models=("gpt",), data_dir=str(tmp_path)))


@pytest.mark.parametrize("name", SUITE_ROBOTS)
def test_shipped_suite_checkpoints_load_and_reproduce_mujoco(name, tmp_path):
    """Each shipped model of the suite robots: small, carries its provenance, and on fresh trajectories (another seed,
    as long as the card's evaluation set, so that NRMSE is normalized alike) lands near its card's NRMSE at H=15 and
    below predicting that nothing moves (FlashNeRD: at most half of that)."""
    from flashnerd.dynamics.learned import default_checkpoint
    from flashnerd.models.checkpoint import read_checkpoint
    from flashnerd.training.evaluate import nrmse, rollout_errors

    robot = get_robot(name)
    record(robot, 32, 200, tmp_path / "fresh.h5", traj_len=200, seed=4321, nthread=1, progress=False)
    data = load_dataset(tmp_path / "fresh.h5", robot)
    for kind in ("flashnerd", "nerd", "rwm"):
        path = default_checkpoint(robot, kind)
        assert path.stat().st_size < 10 * 2**20
        ckpt = read_checkpoint(path, robot)
        assert "optimizer" not in ckpt and ckpt["train_seconds"] > 0 and ckpt["data"]["transitions"] > 0
        card = ckpt["metrics"]["nrmse"]["15"]
        dyn = make_dynamics(kind, robot, data.num_trajectories)
        measured = rollout_errors(dyn, data, horizons=(15,))[15]["nrmse"]
        assert measured <= 1.5 * card + 0.02, (kind, measured, card)
        rep = dyn.rep
        feats = rep.state_features(data.qpos, data.qvel).reshape(-1, rep.state_dim)
        hold = nrmse(rep.state_features(data.qpos[:, 0], data.qvel[:, 0]),
                     rep.state_features(data.qpos[:, 15], data.qvel[:, 15]), feats.std(0).clamp_min(1e-6)).item()
        assert measured < (0.5 if kind == "flashnerd" else 1.0) * hold, (kind, measured, hold)
