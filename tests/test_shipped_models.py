"""The shipped ANYmal-C models track the analytical simulator as well as their cards say."""

from __future__ import annotations

import pytest
import torch

from flashnerd.data.dataset import load_dataset
from flashnerd.data.record import record
from flashnerd.dynamics import make_dynamics
from flashnerd.dynamics.learned import default_checkpoint
from flashnerd.models.checkpoint import read_checkpoint
from flashnerd.training.evaluate import nrmse, rollout_errors


@pytest.fixture(scope="module")
def fresh_data(tmp_path_factory, ):
    from flashnerd.robots import get_robot

    path = tmp_path_factory.mktemp("fresh") / "fresh.h5"
    record(get_robot("anymal_c"), num_worlds=48, steps=15, out=path, traj_len=15, seed=1234, progress=False)
    data = load_dataset(path)
    data.attrs["path"] = str(path)
    return data


@pytest.mark.parametrize("kind", ["flashnerd", "nerd"])
def test_shipped_model_reproduces_mujoco_over_15_steps(anymal, fresh_data, kind):
    path = default_checkpoint(anymal, kind)
    ckpt = read_checkpoint(path, anymal)
    card_nrmse_15 = ckpt["metrics"]["nrmse"]["15"]
    dyn = make_dynamics(kind, anymal, fresh_data.num_trajectories)
    measured = rollout_errors(dyn, fresh_data, horizons=(15,))[15]["nrmse"]
    # Fresh trajectories (another seed) must land near the card's figure ...
    assert measured <= 1.5 * card_nrmse_15 + 0.02, (measured, card_nrmse_15)
    # ... and far below the error of predicting that nothing moves.
    rep = dyn.rep
    truth0 = rep.state_features(fresh_data.qpos[:, 0], fresh_data.qvel[:, 0])
    truth15 = rep.state_features(fresh_data.qpos[:, 15], fresh_data.qvel[:, 15])
    feats = rep.state_features(fresh_data.qpos, fresh_data.qvel).reshape(-1, rep.state_dim)
    hold = nrmse(truth0, truth15, feats.std(0).clamp_min(1e-6)).item()
    assert measured < 0.5 * hold, (measured, hold)


def test_shipped_rough_terrain_model_reproduces_mujoco_on_the_rough_field(anymal, tmp_path):
    """The rough task's default model (fitted on the rough field, contact rows against the heightfield) on fresh
    rough-field trajectories: near its card's NRMSE@15, and better than the flat model, whose rows see the same
    heightfield but which never saw stairs or slopes."""
    path = default_checkpoint(anymal, "flashnerd", "rough")
    assert path.name == "flashnerd_rough.safetensors"
    ckpt = read_checkpoint(path, anymal)
    assert ckpt["representation"]["contact"] == "rows" and path.stat().st_size < 10 * 2**20
    data_path = tmp_path / "rough.h5"
    record(anymal, num_worlds=48, steps=15, out=data_path, traj_len=15, seed=4321, progress=False, terrain="rough")
    data = load_dataset(data_path)
    measured = {}
    for name, checkpoint in (("rough", None), ("flat", default_checkpoint(anymal, "flashnerd"))):
        dyn = make_dynamics("flashnerd", anymal, data.num_trajectories, terrain="rough", checkpoint=checkpoint)
        measured[name] = rollout_errors(dyn, data, horizons=(15,))[15]["nrmse"]
    card = ckpt["metrics"]["nrmse"]["15"]
    assert measured["rough"] <= 1.5 * card + 0.02, (measured, card)
    assert measured["rough"] < measured["flat"], measured


def test_shipped_checkpoints_are_small_and_carry_their_provenance(anymal):
    for kind in ("flashnerd", "nerd"):
        path = default_checkpoint(anymal, kind)
        assert path.stat().st_size < 10 * 2**20
        ckpt = read_checkpoint(path)
        assert "optimizer" not in ckpt and ckpt["model_hash"] == anymal.model_hash()
        assert set(ckpt["metrics"]["nrmse"]) >= {"1", "15", "100", "200"}
        assert ckpt["data"]["transitions"] > 0 and ckpt["train_seconds"] > 0


def test_learned_torque_estimate_matches_what_mujoco_reports(anymal, fresh_data):
    """One-step predictions from recorded states: the learned backend's PD torque (at the analytical backend's last
    substep) has the same energy as MuJoCo's actuator torque; the start-of-step PD torque would overstate it."""
    import h5py

    n = fresh_data.num_trajectories
    dyn = make_dynamics("flashnerd", anymal, n)
    dyn.reset(torch.arange(n), fresh_data.qpos[:, 5], fresh_data.qvel[:, 5])
    dyn.step(fresh_data.ctrl[:, 5])
    with h5py.File(fresh_data.attrs["path"]) as f:
        true_torque = torch.from_numpy(f["torque"][:, 5])  # (n, nu) last substep of step 5
    ratio = (dyn.state().joint_torque ** 2).sum() / (true_torque ** 2).sum()
    assert 0.8 < ratio < 1.25, ratio.item()
    q, qd = fresh_data.qpos[:, 5, 7:], fresh_data.qvel[:, 5, 6:]
    start = anymal.stiffness * (fresh_data.ctrl[:, 5] - q) - anymal.damping * qd
    start_ratio = (start.clamp(-80, 80) ** 2).sum() / (true_torque ** 2).sum()
    assert start_ratio > ratio  # the estimate this replaced


def test_the_default_checkpoint_is_the_one_fitted_on_the_terrain_when_shipped(anymal, tmp_path, monkeypatch):
    from flashnerd.dynamics import learned

    monkeypatch.setattr(learned, "CHECKPOINT_DIR", tmp_path)
    (tmp_path / "anymal_c").mkdir()
    for name in ("flashnerd", "flashnerd_rough", "flashnerd_flat"):
        (tmp_path / "anymal_c" / f"{name}.safetensors").touch()
    assert default_checkpoint(anymal, "flashnerd", "rough").name == "flashnerd_rough.safetensors"
    assert default_checkpoint(anymal, "flashnerd").name == "flashnerd.safetensors"
    assert default_checkpoint(anymal, "flashnerd", "flat").name == "flashnerd.safetensors"
    assert default_checkpoint(anymal, "flashnerd", "blocks").name == "flashnerd.safetensors"  # none for it: the flat
    assert default_checkpoint(anymal, "nerd", "rough").name == "nerd.safetensors"
