"""Contact heads: labels read from datasets, class weighting, held-out accuracy against a constant predictor and the
probe estimate, the backend's contact summary equal to the head on the training-time frame, and crafted heads refused.
"""

from __future__ import annotations

import dataclasses
import json

import h5py
import pytest
import torch

from flashnerd.cli.main import main
from flashnerd.data.dataset import TrajectoryData, load_dataset
from flashnerd.data.record import record
from flashnerd.dynamics.learned import LearnedConfig, LearnedDynamics
from flashnerd.models.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from flashnerd.models.contact_head import (
    CONTACT_LABEL_N,
    ContactHead,
    ContactHeadConfig,
    balanced_pos_weight,
    classification_metrics,
)
from flashnerd.robots import get_robot
from flashnerd.training.contact_head import contact_frames, group_metrics, probe_touching
from flashnerd.training.fit import FitConfig, Fitter


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """(checkpoint with a head, training data, held-out data of another seed) for ANYmal-C exploration."""
    root = tmp_path_factory.mktemp("contact_head")
    robot = get_robot("anymal_c")
    train, held_out = root / "train.h5", root / "held_out.h5"
    record(robot, num_worlds=64, steps=200, out=train, traj_len=100, seed=3, progress=False)
    record(robot, num_worlds=32, steps=100, out=held_out, traj_len=100, seed=4, progress=False)
    cfg = dataclasses.replace(FitConfig(), max_steps=2, eval_every=1, contact_head_steps=600)
    out = root / "model.safetensors"
    result = Fitter(train, cfg).fit(out, progress=False)
    return out, train, held_out, result


def test_record_labels_are_the_recorded_forces_above_the_threshold(fitted):
    _, train, _, _ = fitted
    data = load_dataset(train)
    with h5py.File(train) as f:
        force = torch.from_numpy(f["contact_force"][()])
    assert torch.equal(data.contact_force, force)
    assert torch.equal(data.touching, (force > CONTACT_LABEL_N).float())
    assert data.touching.shape == (*data.ctrl.shape[:2], len(get_robot("anymal_c").all_contact_bodies))
    part, _ = data.split(0.25, seed=1)
    rows = [int(torch.nonzero((data.qpos == q).all(-1).all(-1))[0]) for q in part.qpos[:3]]
    assert torch.equal(part.touching[:3], data.touching[rows])  # labels follow their trajectories


def test_labels_of_other_bodies_or_shapes_are_left_out(fitted, tmp_path):
    import shutil

    _, train, _, _ = fitted
    for name, edit in (("renamed", lambda f: f.attrs.__setitem__("contact_bodies", json.dumps(["a", "b"]))),
                       ("narrow", lambda f: (f.__delitem__("contact_force"),
                                             f.create_dataset("contact_force", data=f["ctrl"][()][..., :3])))):
        path = tmp_path / f"{name}.h5"
        shutil.copy(train, path)
        with h5py.File(path, "a") as f:
            edit(f)
        data = load_dataset(path)
        assert data.touching is None and data.contact_force is None
        assert data.num_trajectories == load_dataset(train).num_trajectories  # the dynamics data still serve


def test_balanced_weight_is_negatives_over_positives_capped():
    touching = torch.zeros(1000, 3)
    touching[:10, 0] = 1.0  # 1 %: weight 99
    touching[:500, 1] = 1.0  # 50 %: weight 1
    touching[:1, 2] = 1.0  # 0.1 %: 999, capped
    assert torch.allclose(balanced_pos_weight(touching), torch.tensor([99.0, 1.0, 100.0]))
    assert torch.equal(balanced_pos_weight(torch.zeros(10, 2)), torch.ones(2))  # never touching: nothing to weight


def test_class_weighting_keeps_rare_contacts():
    """A contact in 2 % of the samples: weighted, the head finds nearly all of them."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(20000, 6, generator=gen)
    touching = (x[:, :1] + 0.3 * x[:, 1:2] > 2.1).float()  # (N, 1) about 2 %
    torch.manual_seed(0)
    head = ContactHead(ContactHeadConfig(input_dim=6, num_bodies=1, hidden=32))
    head.pos_weight.copy_(balanced_pos_weight(touching))
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    for _ in range(300):
        rows = torch.randint(0, 20000, (2048,), generator=gen)
        loss = head.loss(x[rows], touching[rows], None)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        predicted = head(x)[0] > 0
    m = classification_metrics(predicted[:, 0], touching[:, 0])
    assert 0.01 < m["positive_share"] < 0.04 and m["recall"] >= 0.9 and m["balanced_accuracy"] >= 0.9


def test_metrics_of_constant_predictors_are_chance():
    touching = (torch.arange(100) % 7 == 0).float()
    for constant in (torch.zeros(100), torch.ones(100)):
        assert classification_metrics(constant, touching)["balanced_accuracy"] == 0.5
    perfect = classification_metrics(touching, touching)
    assert perfect["balanced_accuracy"] == perfect["f1"] == perfect["precision"] == perfect["recall"] == 1.0


def test_head_beats_a_constant_predictor_and_the_probes_on_held_out_data(fitted):
    """On trajectories of another recording seed the head tells every contact group apart (a constant predictor's
    balanced accuracy is 0.5), thighs and base included, which the probe estimate never sees touching."""
    ckpt_path, _, held_out, result = fitted
    robot = get_robot("anymal_c")
    assert set(result["contact_head"]) == set(robot.contact_bodies)
    dyn = LearnedDynamics(robot, 1, config=LearnedConfig(checkpoint=ckpt_path))
    data = load_dataset(held_out)
    touching = data.touching.reshape(-1, data.touching.shape[-1])
    with torch.no_grad():
        predicted = dyn.contact_head(contact_frames(data, dyn.rep, dyn.probes, dyn.x_norm))[0] > 0
    head = group_metrics(robot, predicted, touching)
    probes = group_metrics(robot, probe_touching(data, robot, dyn.probes), touching)
    for group in ("base", "thighs", "shanks", "feet"):
        assert head[group]["positive_share"] > 0.005, group  # the exploration data hold contacts of every group
        assert head[group]["balanced_accuracy"] >= 0.8, (group, head[group])
        assert head[group]["recall"] >= 0.75, (group, head[group])
    for group in ("base", "thighs"):  # no probe on a thigh, and the base's probes sit under its belly
        assert probes[group]["recall"] < 0.2 and head[group]["balanced_accuracy"] > probes[group]["balanced_accuracy"]
    card = read_checkpoint(ckpt_path)["contact_head"]["card"]
    assert card["steps"] == 600 and card["held_out"]["head"]["feet"]["balanced_accuracy"] >= 0.8


def test_backend_contact_forces_are_the_head_on_the_training_time_frame(fitted):
    """A learned backend's contact summary after a step equals the head applied to the frame `contact_frames` builds
    for training from the same start state, control and (here: predicted) end state."""
    ckpt_path, _, held_out, _ = fitted
    robot = get_robot("anymal_c")
    data = load_dataset(held_out)
    n = 8
    dyn = LearnedDynamics(robot, n, config=LearnedConfig(checkpoint=ckpt_path))
    dyn.reset(torch.arange(n), data.qpos[:n, 10], data.qvel[:n, 10])
    ctrl = data.ctrl[:n, 10]
    dyn.step(ctrl)
    s = dyn.state()
    traj = TrajectoryData(torch.stack([data.qpos[:n, 10], s.qpos], 1), torch.stack([data.qvel[:n, 10], s.qvel], 1),
                          ctrl[:, None], data.attrs)
    with torch.no_grad():
        expected = dyn.contact_head.contact_force(contact_frames(traj, dyn.rep, dyn.probes, dyn.x_norm))
    assert torch.allclose(s.contact_force, expected, atol=1e-5)
    assert bool((s.contact_force > 0).any())  # standing robots: feet touch
    assert bool((s.contact_force[s.contact_force > 0] > CONTACT_LABEL_N).all())  # a contact passes a 1 N threshold


def test_fit_contact_head_adds_a_head_and_keeps_the_model(fitted, tmp_path, capsys):
    ckpt_path, train, _, _ = fitted
    bare = tmp_path / "bare.safetensors"
    ckpt = read_checkpoint(ckpt_path)
    save_checkpoint(bare, {k: v for k, v in ckpt.items() if k != "contact_head"})
    out = tmp_path / "with_head.safetensors"
    assert main(["fit-contact-head", "--checkpoint", str(bare), "--data", str(train), "--out", str(out),
                 "--steps", "50"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    new = read_checkpoint(out)
    assert printed["steps"] == 50 and new["contact_head"]["card"]["data"] == [str(train)]
    assert all(torch.equal(new["state_dict"][k], v) for k, v in ckpt["state_dict"].items())
    assert new["history"] == ckpt["history"] and new["step"] == ckpt["step"]
    assert main(["fit-contact-head", "--checkpoint", str(bare), "--data", str(train), "--out", str(out),
                 "--steps", "0"]) == 2
    assert "--steps must be a positive integer" in capsys.readouterr().err


def _with_head(src, dst, **changes) -> None:
    ckpt = read_checkpoint(src)
    ckpt["contact_head"] = {**ckpt["contact_head"], **changes}
    save_checkpoint(dst, ckpt)


@pytest.mark.parametrize("change, message", [
    ({"bodies": ["base"]}, "contact head predicts bodies"),
    ({"config": {"input_dim": 5, "num_bodies": 13, "hidden": 128, "layers": 2}}, "does not read the model's input"),
    ({"config": {"input_dim": 5, "num_bodies": 13, "hidden": True}}, "is not a contact head config"),
    ({"config": {"input_dim": None, "num_bodies": 13}}, "is not a contact head config"),
    ({"config": {"input_dim": 10**9, "num_bodies": 13}}, "is not a contact head config"),
    ({"state_dict": {}}, "weights do not match its config"),
    ({"state_dict": {"out.bias": torch.full((26,), float("nan"))}}, "non-finite values"),
    ({"bodies": "base"}, "lacks a config, weights or body names"),
    ({"config": {"input_dim": 1, "num_bodies": 13, "hidden": 1, "layers": 10**4}}, "at most 16 layers"),
])
def test_crafted_contact_heads_are_one_line_errors(fitted, tmp_path, change, message):
    ckpt_path = fitted[0]
    bad = tmp_path / "bad.safetensors"
    _with_head(ckpt_path, bad, **change)
    with pytest.raises(CheckpointError, match=message) as err:
        LearnedDynamics(get_robot("anymal_c"), 1, config=LearnedConfig(checkpoint=bad))
    assert len(str(err.value).splitlines()) == 1


def test_a_robot_log_carries_the_contacts_as_labels(fitted, tmp_path):
    """A dataset written as a robot log (contact flags per contact body) and imported again has the same labels."""
    from flashnerd.data.logs import dataset_to_log, import_logs

    _, train, _, _ = fitted
    log = tmp_path / "robot.parquet"
    dataset_to_log(train, log)
    import_logs([log], get_robot("anymal_c"), tmp_path / "imported.h5", traj_len=100)
    imported, recorded = load_dataset(tmp_path / "imported.h5"), load_dataset(train)
    assert imported.contact_force is None and imported.touching.shape == recorded.touching.shape
    assert torch.equal(imported.touching, recorded.touching)


def test_negative_or_misshaped_labels_are_left_out(fitted, tmp_path):
    import shutil

    _, train, _, _ = fitted
    for name, edit in (("negative", lambda f: f["contact_force"].__setitem__((0, 0, 0), -5.0)),
                       ("wide", lambda f: (f.__delitem__("contact_force"),
                                           f.create_dataset("contact_force", shape=(10**6, 100, 13), dtype="f8")))):
        path = tmp_path / f"{name}.h5"
        shutil.copy(train, path)
        with h5py.File(path, "a") as f:
            edit(f)
        data = load_dataset(path)  # the wide array (declared 10 GB, never written) is not read
        assert data.touching is None and data.num_trajectories > 0


def test_init_refuses_a_crafted_head_and_steps_0_carries_none(fitted, tmp_path):
    from flashnerd.training.fit import Fitter

    ckpt_path, train, _, _ = fitted
    bad = tmp_path / "bad.safetensors"
    _with_head(ckpt_path, bad, bodies=["base"])
    cfg = dataclasses.replace(FitConfig(), max_steps=1, eval_every=1, contact_head_steps=0)
    fitter = Fitter(train, cfg)
    with pytest.raises(CheckpointError, match="contact head predicts bodies"):
        fitter.init_from(bad)
    fitter = Fitter(train, cfg)
    fitter.init_from(ckpt_path)
    out = tmp_path / "no_head.safetensors"
    assert fitter.fit(out, progress=False)["contact_head"] == "none (--contact_head_steps 0)"
    assert "contact_head" not in read_checkpoint(out)


def test_init_refits_the_starting_head(fitted, tmp_path):
    """--init starts the head from the checkpoint's: after 5 AdamW steps (each moves a weight by at most the learning
    rate, 1e-3) every weight is within 5e-3 of the starting head's."""
    ckpt_path, train, _, _ = fitted
    cfg = dataclasses.replace(FitConfig(), max_steps=1, eval_every=1, contact_head_steps=5)
    fitter = Fitter(train, cfg)
    fitter.init_from(ckpt_path)
    out = tmp_path / "refit.safetensors"
    fitter.fit(out, progress=False)
    start, refit = (read_checkpoint(p)["contact_head"]["state_dict"] for p in (ckpt_path, out))
    moved = max(float((refit[k] - start[k]).abs().max()) for k in start if k != "pos_weight")
    assert 0 < moved <= 5.5e-3
    assert read_checkpoint(out)["contact_head"]["card"]["steps"] == 5


def test_evaluate_model_reports_head_and_probes(fitted, capsys):
    ckpt_path, _, held_out, _ = fitted
    assert main(["evaluate-model", "--checkpoint", str(ckpt_path), "--data", str(held_out), "--num_rollouts", "32",
                 "--horizons", "1,15"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    head, probes = result["contacts"]["head"], result["contacts"]["probes"]
    assert set(head) == set(get_robot("anymal_c").contact_bodies)
    assert head["thighs"]["balanced_accuracy"] > probes["thighs"]["balanced_accuracy"] == 0.5
