"""State representation, quaternion increments, torch kinematics and probe features against MuJoCo."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashnerd.contacts import ProbeFeatures
from flashnerd.dynamics.learned import _cast_floats
from flashnerd.dynamics.representation import StateRepresentation, quat_to_rotvec, rotvec_to_quat
from flashnerd.models.normalizer import Normalizer
from flashnerd.robots.kinematics import TorchKinematics
from flashnerd.sim.scene import build_scene
from flashnerd.training.evaluate import nrmse
from flashnerd.utils.math import quat_apply, quat_from_euler_xyz, quat_mul


def _random_states(n: int, nj: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    qpos = torch.randn(n, 7 + nj, generator=g, dtype=torch.float64)
    qpos[:, 3:7] /= torch.linalg.norm(qpos[:, 3:7], dim=1, keepdim=True)
    return qpos, torch.randn(n, 6 + nj, generator=g, dtype=torch.float64)


def test_increment_and_apply_round_trip():
    rep = StateRepresentation(12)
    q0, v0 = _random_states(64, 12, seed=0)
    q1, v1 = _random_states(64, 12, seed=1)
    delta = rep.increment(q0, v0, q1, v1)
    assert delta.shape == (64, rep.target_dim)
    q1_hat, v1_hat = rep.apply(q0, v0, delta)
    sign = torch.sign((q1_hat[:, 3:7] * q1[:, 3:7]).sum(1, keepdim=True))  # q and -q are the same rotation
    q1_hat[:, 3:7] *= sign
    assert torch.allclose(q1_hat, q1, atol=1e-9) and torch.allclose(v1_hat, v1, atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-3.0, 3.0, allow_nan=False), min_size=3, max_size=3))
def test_rotvec_quaternion_round_trip(v):
    vec = torch.tensor(v, dtype=torch.float64)
    if torch.linalg.norm(vec) > math.pi - 1e-6:  # beyond pi the shorter rotation is the other way round
        vec = vec / torch.linalg.norm(vec) * (math.pi - 1e-3)
    q = rotvec_to_quat(vec)
    assert torch.isclose(torch.linalg.norm(q), torch.tensor(1.0, dtype=torch.float64))
    assert torch.allclose(quat_to_rotvec(q), vec, atol=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.floats(-3.1, 3.1), st.floats(-1.5, 1.5), st.floats(-3.1, 3.1))
def test_frame_transforms_are_inverse(roll, pitch, yaw):
    q = quat_from_euler_xyz(torch.tensor(roll), torch.tensor(pitch), torch.tensor(yaw)).double()
    v = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    back = quat_apply(torch.cat((q[:1], -q[1:])), quat_apply(q, v))
    assert torch.allclose(back, v, atol=1e-9)
    assert torch.allclose(quat_mul(q, torch.cat((q[:1], -q[1:]))), torch.tensor([1.0, 0, 0, 0]).double(), atol=1e-9)


def test_torch_kinematics_matches_mujoco(anymal):
    m = build_scene(anymal)
    d = mujoco.MjData(m)
    kin = TorchKinematics(m)
    rng = np.random.default_rng(0)
    qpos = np.zeros((16, m.nq))
    for i in range(16):
        qpos[i, 0:3] = rng.normal(size=3)
        quat = rng.normal(size=4)
        qpos[i, 3:7] = quat / np.linalg.norm(quat)
        qpos[i, 7:] = rng.uniform(-1.5, 1.5, size=12)
    pos, quat = kin.forward(torch.tensor(qpos, dtype=torch.float32))
    for i in range(16):
        d.qpos[:] = qpos[i]
        mujoco.mj_kinematics(m, d)
        assert np.allclose(pos[i].numpy(), d.xpos, atol=1e-5)
        same = np.abs(np.sum(quat[i].numpy() * d.xquat, axis=1))  # q ~ -q
        assert np.allclose(same, 1.0, atol=1e-5)


@pytest.mark.parametrize("name", ["anymal_c", "cartpole", "franka", "g1", "allegro", "microduck"])
def test_torch_kinematics_matches_mujoco_on_every_robot_both_paths(name):
    from flashnerd.robots import get_robot

    m = build_scene(get_robot(name))
    d = mujoco.MjData(m)
    kin = TorchKinematics(m)
    rng = np.random.default_rng(1)
    qpos = np.tile(m.qpos0, (8, 1)) + rng.uniform(-1.0, 1.0, size=(8, m.nq))
    for j in range(m.njnt):  # free joints need unit quaternions
        if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            a = m.jnt_qposadr[j]
            qpos[:, a + 3:a + 7] /= np.linalg.norm(qpos[:, a + 3:a + 7], axis=1, keepdims=True)
    q = torch.tensor(qpos, dtype=torch.float32)
    pos, quat = kin.forward(q)
    slow_pos, slow_quat = kin._forward_bodies(q)  # the body-by-body path agrees with the batched levels
    torch.testing.assert_close(pos, slow_pos, atol=1e-5, rtol=0)
    for i in range(8):
        d.qpos[:] = qpos[i]
        mujoco.mj_kinematics(m, d)
        assert np.allclose(pos[i].numpy(), d.xpos, atol=2e-5), name
        assert np.allclose(np.abs(np.sum(quat[i].numpy() * d.xquat, axis=1)), 1.0, atol=1e-5), name


REF_JOINTS_XML = """
<mujoco>
  <compiler angle="degree"/>
  <worldbody>
    <body name="base" pos="0 0 0.5">
      <freejoint/>
      <geom type="box" size="0.2 0.1 0.05"/>
      <body name="thigh" pos="0.2 0 0">
        <joint name="hip" type="hinge" axis="0 1 0" ref="60" pos="0 0 0.02"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02"/>
        <body name="shin" pos="0 0 -0.2" euler="0 30 0">
          <joint name="knee" type="hinge" axis="0 -1 0" ref="-45"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02"/>
          <body name="piston" pos="0 0 -0.2">
            <joint name="slider" type="slide" axis="0 0 1" ref="0.05"/>
            <geom type="sphere" size="0.03"/>
          </body>
        </body>
      </body>
      <body name="wrist" pos="-0.2 0 0">
        <joint name="yaw" type="hinge" axis="0 0 1" ref="20"/>
        <joint name="roll" type="hinge" axis="1 0 0" ref="-10"/>
        <geom type="sphere" size="0.03" pos="0 0.1 0"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("two_joint_body", [False, True])
def test_torch_kinematics_turns_joints_by_their_displacement_from_ref(two_joint_body):
    """A joint with `ref` (qpos0 != 0) moves its body by qpos - qpos0, as mj_kinematics does, on the batched levels
    and on the body-by-body path (a body with two joints takes that one)."""
    xml = REF_JOINTS_XML if two_joint_body else REF_JOINTS_XML.replace(
        '<joint name="roll" type="hinge" axis="1 0 0" ref="-10"/>', "")
    m = mujoco.MjModel.from_xml_string(xml)
    assert np.abs(m.qpos0[7:]).min() > 0.01  # every hinge and slide has a ref
    kin = TorchKinematics(m)
    assert (kin.levels is None) == two_joint_body
    d = mujoco.MjData(m)
    rng = np.random.default_rng(3)
    qpos = np.tile(m.qpos0, (6, 1)) + rng.uniform(-0.8, 0.8, size=(6, m.nq))
    qpos[0] = m.qpos0  # the reference pose itself
    qpos[:, 3:7] /= np.linalg.norm(qpos[:, 3:7], axis=1, keepdims=True)
    pos, quat = kin.forward(torch.tensor(qpos, dtype=torch.float32))
    _cast_floats(kin, torch.float64, set())  # as a learned backend's to_dtype casts it (finite-difference checks)
    pos64, _ = kin.forward(torch.tensor(qpos, dtype=torch.float64))
    for i in range(6):
        d.qpos[:] = qpos[i]
        mujoco.mj_kinematics(m, d)
        assert np.allclose(pos[i].numpy(), d.xpos, atol=2e-5)
        assert np.allclose(np.abs(np.sum(quat[i].numpy() * d.xquat, axis=1)), 1.0, atol=1e-5)
        assert np.allclose(pos64[i].numpy(), d.xpos, atol=1e-9)


def test_probe_distances_match_mujoco_geometry(anymal):
    m = build_scene(anymal)
    d = mujoco.MjData(m)
    probes = ProbeFeatures(anymal, m)
    qpos = torch.tensor(m.qpos0, dtype=torch.float32)[None].clone()
    qpos[0, 2] = 0.5
    qpos[0, 7:] = torch.tensor(anymal.default_joint_pos)
    d.qpos[:] = qpos[0].double().numpy()
    mujoco.mj_kinematics(m, d)
    dist = probes.signed_distance(qpos)[0]
    for i, leg in enumerate(("LF", "RF", "LH", "RH")):
        assert abs(dist[i].item() - (d.geom_xpos[m.geom(f"{leg}_foot").id, 2] - 0.03)) < 1e-5
    feats = probes(qpos).reshape(probes.num_probes, 8)
    far = dist > probes.cutoff
    assert (feats[far] == 0).all() and (feats[~far, 7] == 1).all()
    assert torch.allclose(feats[~far, 3:6], torch.tensor([0.0, 0.0, 1.0]).expand(int((~far).sum()), 3), atol=1e-6)


def test_nrmse_hand_computed():
    truth = torch.tensor([[0.0, 1.0], [2.0, 3.0]])
    pred = torch.tensor([[1.0, 1.0], [2.0, 5.0]])
    # dim 0: RMSE sqrt((1 + 0) / 2); dim 1: sqrt((0 + 4) / 2); stds 2 and 4
    expected = (math.sqrt(0.5) / 2.0 + math.sqrt(2.0) / 4.0) / 2.0
    assert math.isclose(nrmse(pred, truth, torch.tensor([2.0, 4.0])).item(), expected, rel_tol=1e-6)


def test_normalizer_round_trip_and_state_dict():
    x = torch.randn(1000, 5) * torch.tensor([1.0, 10.0, 0.1, 0.0, 3.0]) + 7.0
    norm = Normalizer(5).fit(x)
    z = norm.normalize(x)
    assert torch.allclose(z[:, [0, 1, 2, 4]].mean(0), torch.zeros(4), atol=1e-4)
    assert norm.std[3] == 1.0, "a constant dimension keeps std 1"
    assert torch.allclose(norm.denormalize(z), x, atol=1e-4)
    other = Normalizer(5)
    other.load_state_dict(norm.state_dict())
    assert torch.equal(other.mean, norm.mean) and torch.equal(other.std, norm.std)


_finite = st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=100, deadline=None)
@given(st.lists(_finite, min_size=4, max_size=4).filter(lambda q: sum(x * x for x in q) > 0.1),
       st.lists(_finite, min_size=6, max_size=6), st.lists(_finite, min_size=3, max_size=3))
def test_increment_apply_round_trip_for_any_state(quat, base_vel, step):
    """apply(state, increment(state, next)) == next for arbitrary orientations, velocities and steps."""
    rep = StateRepresentation(2)
    q0 = torch.tensor([[0.1, -0.2, 0.5, *quat, 0.3, -0.4]], dtype=torch.float64)
    q0[:, 3:7] /= torch.linalg.norm(q0[:, 3:7])
    v0 = torch.tensor([[*base_vel, 0.5, -0.5]], dtype=torch.float64)
    turn = rotvec_to_quat(torch.tensor(step, dtype=torch.float64) * 0.5)  # a rotation of up to 1.7 rad
    q1 = q0.clone()
    q1[:, 0:3] += torch.tensor(step, dtype=torch.float64) * 0.1
    q1[:, 3:7] = quat_mul(q0[0, 3:7], turn)[None]
    v1 = v0 + 0.1
    q1_hat, v1_hat = rep.apply(q0, v0, rep.increment(q0, v0, q1, v1))
    sign = torch.sign((q1_hat[:, 3:7] * q1[:, 3:7]).sum(1, keepdim=True))
    q1_hat[:, 3:7] *= sign
    assert torch.allclose(q1_hat, q1, atol=1e-9) and torch.allclose(v1_hat, v1, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.floats(-math.pi, math.pi), st.floats(-5.0, 5.0), st.floats(-5.0, 5.0))
def test_state_features_ignore_heading_and_horizontal_position(yaw, dx, dy):
    """Turning the whole robot about the vertical axis and moving it on the ground leaves the features unchanged."""
    rep = StateRepresentation(12)
    qpos, qvel = _random_states(8, 12, seed=3)
    turn = quat_from_euler_xyz(torch.tensor(0.0), torch.tensor(0.0), torch.tensor(yaw)).double()  # (4,)
    moved_q, moved_v = qpos.clone(), qvel.clone()
    moved_q[:, 0:3] = quat_apply(turn.expand(8, 4), qpos[:, 0:3]) + torch.tensor([dx, dy, 0.0], dtype=torch.float64)
    moved_q[:, 3:7] = quat_mul(turn.expand(8, 4), qpos[:, 3:7])
    moved_v[:, 0:3] = quat_apply(turn.expand(8, 4), qvel[:, 0:3])  # world-frame linear velocity turns too
    assert torch.allclose(rep.state_features(moved_q, moved_v), rep.state_features(qpos, qvel), atol=1e-9)
