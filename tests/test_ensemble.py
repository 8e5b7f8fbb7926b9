"""Ensembles in the model: one module equals K separate models, disagreement, the learned backend's member modes,
and the uncertainty terms of training on a model."""

from __future__ import annotations

import copy
import dataclasses
import json

import gymnasium as gym
import pytest
import torch

from flashnerd.cli.main import main
from flashnerd.data.record import record
from flashnerd.dynamics import make_dynamics
from flashnerd.envs.registry import task_cfgs
from flashnerd.models import Ensemble, build_model, disagreement
from flashnerd.models.checkpoint import model_from_checkpoint, read_checkpoint, save_checkpoint
from flashnerd.robots import get_robot
from flashnerd.training.fit import FitConfig, Fitter

IN, OUT, K = 7, 5, 3
TINY = {"flashnerd": dict(n_layer=2, n_head=2, n_embd=16, span=3, readout_hidden=16),
        "nerd": dict(n_layer=2, n_head=2, n_embd=16, window=4, head_hidden=8),
        "rwm": dict(n_layer=2, hidden=16, head_hidden=8)}
TASK = "FlashNeRD-Velocity-Flat-Anymal-C-v0"


def _members(kind: str, shared: int = 0) -> tuple[Ensemble, list[torch.nn.Module]]:
    """An ensemble of K members (sharing their embedding and first `shared` blocks) and K separate models with the
    same weights: each member's own, and the shared ones."""
    torch.manual_seed(3)
    ens = build_model(kind, IN, OUT, ensemble=K, ensemble_shared=shared, **TINY[kind])
    torch.manual_seed(3)
    singles = [build_model(kind, IN, OUT, **TINY[kind]) for _ in range(K)]
    with torch.no_grad():  # larger weights than the init, so a wrong slice or cache shows up
        for n, p in ens.members.named_parameters():
            p.add_(0.3 * torch.randn_like(p))
            for k, m in enumerate(singles):
                dict(m.named_parameters())[n].copy_(p if f"m.{n}" in ens._shared else p[k])
    return ens.eval(), [m.eval() for m in singles]


def _train_as_members(ens: Ensemble, singles: list) -> None:
    """Forward and loss on member-grouped rows (rows [k*b, (k+1)*b) are member k's): the ensemble's forward equals
    its separate models', and both losses are back-propagated for the caller to compare gradients."""
    b, T = 3, 4
    x, y = torch.randn(K * b, T, IN), torch.randn(K * b, T, OUT)
    rows = [slice(k * b, (k + 1) * b) for k in range(K)]
    with torch.no_grad():
        torch.testing.assert_close(ens(x), torch.cat([m(x[r]) for m, r in zip(singles, rows)]), atol=1e-5, rtol=0)
    ens.loss(x, y).backward()
    sum(m.loss(x[r], y[r]) for m, r in zip(singles, rows)).backward()


@pytest.mark.parametrize("kind", ["flashnerd", "nerd", "rwm"])
@pytest.mark.parametrize("batched_call", [False, True])
def test_an_ensemble_streams_as_its_separate_members(kind, batched_call):
    """Every member's prediction over 9 steps (ring buffers wrap; one world reset midway) equals its own model's."""
    ens, singles = _members(kind)
    ens.batched_call = batched_call  # the member loop (CPU default) and the one vmap'd call (GPU default)
    _stream_as_members(ens, singles, reset_world=2)


def _stream_as_members(ens: Ensemble, singles: list, reset_world: int, switch_at: int | None = None) -> torch.Tensor:
    """Step the ensemble and its separate models 9 times on 4 worlds (ring buffers wrap; one world reset at step 5;
    from `switch_at` on the ensemble's other streaming path) and compare every member's prediction with its model's;
    returns the last (K, B, OUT)."""
    B = 4
    cache, caches = ens.init_cache(B), [m.init_cache(B) for m in singles]
    with torch.no_grad():
        for t in range(9):
            if t == switch_at:
                ens.batched_call = not ens.batched_call
            if t == 5:
                ids = torch.tensor([reset_world])
                ens.reset_cache(cache, ids)
                for m, c in zip(singles, caches):
                    m.reset_cache(c, ids)
            x = torch.randn(B, IN)
            out = ens.step(x, cache)  # (K, B, OUT)
            ref = torch.stack([m.step(x, c) for m, c in zip(singles, caches)])
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    return out


@pytest.mark.parametrize("kind", ["flashnerd", "nerd", "rwm"])
def test_ensemble_training_hooks_are_the_members_own(kind):
    """Forward, loss, gradients and per-member clipping on member-grouped rows equal those of separate models."""
    ens, singles = _members(kind)
    _train_as_members(ens, singles)
    norms = ens.clip_grad_norm_(0.05)
    for k, m in enumerate(singles):
        assert norms[k] == pytest.approx(float(m.clip_grad_norm_(0.05)), rel=1e-4)
        for n, p in ens.members.named_parameters():
            q = dict(m.named_parameters())[n]
            if q.grad is not None:
                torch.testing.assert_close(p.grad[k], q.grad, atol=1e-6, rtol=1e-4)


def test_disagreement_is_zero_for_identical_members_and_the_spread_otherwise():
    torch.manual_seed(0)
    one = build_model("flashnerd", IN, OUT, **TINY["flashnerd"]).eval()
    same = Ensemble([copy.deepcopy(one) for _ in range(K)]).eval()
    x = torch.randn(4, IN)
    with torch.no_grad():
        pred = same.step(x, same.init_cache(4))  # (K, 4, OUT)
        torch.testing.assert_close(pred[0], one.step(x, one.init_cache(4)))
    assert torch.equal(disagreement(pred), torch.zeros(4))
    spread = torch.stack([torch.zeros(2, OUT), torch.full((2, OUT), 2.0)])  # two members, 0 and 2: std 1
    torch.testing.assert_close(disagreement(spread), torch.ones(2))


@pytest.fixture(scope="module")
def tiny_ensemble(tmp_path_factory):
    """A 3-member FlashNeRD fitted 4 steps on tiny data, and the same file with three identical members."""
    root = tmp_path_factory.mktemp("ensemble")
    data = root / "tiny.h5"
    record(get_robot("anymal_c"), num_worlds=6, steps=40, out=data, traj_len=20, seed=1, progress=False)
    out = root / "ens.safetensors"
    cfg = dataclasses.replace(FitConfig(), max_steps=4, batch_size=8, ar_batch_size=4, window=8, eval_every=2,
                              ensemble=K)
    result = Fitter(data, cfg).fit(out, progress=False)
    ckpt = read_checkpoint(out)
    same = {n: t[:1].expand_as(t).clone() for n, t in ckpt["state_dict"].items()}  # member 0, K times
    save_checkpoint(root / "same.safetensors", {**ckpt, "state_dict": same})
    single = {**ckpt, "ensemble": 1,
              "state_dict": {n.removeprefix("members."): t[0].clone() for n, t in ckpt["state_dict"].items()}}
    save_checkpoint(root / "single.safetensors", single)
    return root, data, out, result


def test_fit_ensemble_writes_one_checkpoint_the_backend_steps(tiny_ensemble):
    root, _, out, result = tiny_ensemble
    assert result["ensemble"] == K and read_checkpoint(out)["ensemble"] == K
    model, _, _ = model_from_checkpoint(read_checkpoint(out))
    assert isinstance(model, Ensemble) and model.num_members == K
    weights = next(iter(read_checkpoint(out)["state_dict"].values()))
    assert weights.shape[0] == K and not torch.equal(weights[0], weights[1])  # members start apart
    dyn = make_dynamics("flashnerd", get_robot("anymal_c"), 4, checkpoint=str(out))
    dyn.step(torch.as_tensor(dyn.default_qpos()[7:], dtype=torch.float32).repeat(4, 1))
    assert dyn.state().disagreement.shape == (4,) and bool((dyn.state().disagreement > 0).all())
    assert make_dynamics("mujoco", get_robot("anymal_c"), 2).state().disagreement is None


def test_identical_members_step_as_the_single_model_with_zero_disagreement(tiny_ensemble):
    root, *_ = tiny_ensemble
    robot = get_robot("anymal_c")
    runs = {}
    for name, members in (("same", "mean"), ("same", "step"), ("single", "mean")):
        dyn = make_dynamics("flashnerd", robot, 3, checkpoint=str(root / f"{name}.safetensors"),
                            **({"members": members} if name == "same" else {}))
        ctrl = torch.as_tensor(dyn.default_qpos()[7:], dtype=torch.float32).repeat(3, 1)
        for t in range(6):
            dyn.step(ctrl + 0.2 * torch.sin(torch.tensor(float(t))))
            if name == "same":
                assert torch.equal(dyn.state().disagreement, torch.zeros(3))
        runs[name, members] = dyn.state().qpos.clone()
    torch.testing.assert_close(runs["same", "mean"], runs["single", "mean"], atol=1e-5, rtol=0)
    torch.testing.assert_close(runs["same", "step"], runs["single", "mean"], atol=1e-5, rtol=0)


def test_member_modes_move_worlds_by_one_member_each(tiny_ensemble):
    """'episode': every world follows its drawn member's own prediction; resets redraw only the reset worlds."""
    _, _, out, _ = tiny_ensemble
    robot = get_robot("anymal_c")
    torch.manual_seed(5)
    dyn = make_dynamics("flashnerd", robot, 16, checkpoint=str(out), members="episode")
    start = dyn.state().qpos.clone()
    ctrl = torch.as_tensor(dyn.default_qpos()[7:], dtype=torch.float32).repeat(16, 1)
    drawn = dyn._member.clone()
    assert len(set(drawn.tolist())) > 1  # 16 worlds draw more than one of the 3 members
    refs = []
    for k in range(K):  # every world moved by member k alone: what the mode must pick per world
        torch.manual_seed(5)
        ref = make_dynamics("flashnerd", robot, 16, checkpoint=str(out), members="episode")
        ref._member.fill_(k)
        ref.step(ctrl)
        refs.append(ref.state().qpos.clone())
    dyn.step(ctrl)
    expected = torch.stack(refs)[drawn, torch.arange(16)]  # (16, nq)
    torch.testing.assert_close(dyn.state().qpos, expected, atol=1e-5, rtol=0)
    assert not torch.allclose(refs[0], refs[1], atol=1e-6)
    ids = torch.arange(8)
    for _ in range(4):
        dyn.reset(ids, start[ids], torch.zeros(8, dyn.nv))
    assert torch.equal(dyn._member[8:], drawn[8:])


def test_member_sampling_needs_an_ensemble(tiny_ensemble):
    root, *_ = tiny_ensemble
    with pytest.raises(ValueError, match="holds one model; fit an ensemble"):
        make_dynamics("flashnerd", get_robot("anymal_c"), 2, checkpoint=str(root / "single.safetensors"),
                      members="step")
    with pytest.raises(ValueError, match="unknown members mode"):
        make_dynamics("flashnerd", get_robot("anymal_c"), 2, checkpoint=str(root / "same.safetensors"),
                      members="vote")


def _env(checkpoint, **options):
    cfg, _ = task_cfgs(TASK, num_envs=8, seed=4, dynamics="flashnerd", dynamics_checkpoint=str(checkpoint))
    return gym.make(TASK, cfg=dataclasses.replace(cfg, **options)).unwrapped


def test_uncertainty_termination_fires_exactly_above_the_threshold_and_the_penalty_is_paid(tiny_ensemble):
    _, _, out, _ = tiny_ensemble
    actions = torch.full((8, 12), 0.3)
    probe = _env(out)
    probe.step(actions)
    spread = probe.state.disagreement.clone()  # (8,) after one step, the same in every env of this seed
    threshold = float(spread.median())
    env = _env(out, uncertainty_threshold=threshold, uncertainty_penalty=2.0)
    _, reward, terminated, _, extras = env.step(actions)
    torch.testing.assert_close(env.state.disagreement[~terminated], spread[~terminated])  # reset worlds restart
    assert torch.equal(env._term_buffers["model_uncertainty"], spread > threshold)
    assert 0 < int((spread > threshold).sum()) < 8
    torch.testing.assert_close(env.reward_terms["model_uncertainty"], -2.0 * spread * env.step_dt)
    assert int(extras["log"]["Episode_Termination/model_uncertainty"]) == int((spread > threshold).sum())
    assert float(extras["log"]["Metrics/model_disagreement"]) == pytest.approx(float(spread.mean()), rel=1e-5)


def test_uncertainty_options_without_an_ensemble_are_one_line_errors(tiny_ensemble, capsys):
    root, *_ = tiny_ensemble
    with pytest.raises(ValueError, match="need a learned ensemble; backend 'flashnerd'"):
        _env(root / "single.safetensors", uncertainty_penalty=1.0)
    argv = ["train", "--task", TASK, "--num_envs", "4", "--max_iterations", "1", "--uncertainty_penalty", "1"]
    assert main(argv) == 2 and "backend 'mujoco' reports no model disagreement" in capsys.readouterr().err
    assert main([*argv[:-1], "-1"]) == 2 and "must be a finite number >= 0" in capsys.readouterr().err


def test_bench_model_times_an_ensemble_against_one_model(capsys):
    assert main(["bench", "model", "--batch", "4", "--models", "flashnerd", "--ensemble", "2",
                 "--min_seconds", "0.05"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ensemble"]["members"] == 2 and out["ensemble"]["cost_over_one_model"]["flashnerd"]["4"] > 0
    assert main(["bench", "model", "--ensemble", "0"]) == 2 and "--ensemble must be" in capsys.readouterr().err


def test_the_disagreement_penalty_has_action_gradients_on_a_differentiable_ensemble(tiny_ensemble):
    """SHAC through an ensemble: the disagreement (and a penalty on it) carries gradients with respect to the
    controls, equal in value to the fast path's; identical members give zero disagreement and a finite (zero)
    gradient, not the square root's NaN."""
    root, _, out, _ = tiny_ensemble
    robot = get_robot("anymal_c")
    for path, spread in ((out, True), (root / "same.safetensors", False)):
        fast = make_dynamics("flashnerd", robot, 3, checkpoint=str(path))
        slow = make_dynamics("flashnerd", robot, 3, checkpoint=str(path), differentiable=True)
        ctrl = torch.as_tensor(fast.default_qpos()[7:], dtype=torch.float32).repeat(3, 1) + 0.1
        ctrl.requires_grad_(True)
        fast.step(ctrl.detach())
        slow.step(ctrl)
        slow.step(ctrl.detach())  # the second step's spread depends on the first control through the state
        fast.step(ctrl.detach())
        value = slow.state().disagreement
        torch.testing.assert_close(value.detach(), fast.state().disagreement)
        (grad,) = torch.autograd.grad(value.sum(), ctrl)
        assert torch.isfinite(grad).all()
        assert bool(grad.abs().sum() > 0) == spread and bool((value > 0).all()) == spread
        slow.detach()
        assert not slow.state().disagreement.requires_grad


@pytest.mark.parametrize("batched_call", [False, True])
def test_members_sharing_their_first_blocks_stream_as_separate_models_with_those_weights(batched_call):
    """The shared layers run once per step (the CPU default) or inside the one vmap'd call; either way every member
    predicts what its own model does, over 9 steps with a reset, and the members still disagree."""
    ens, singles = _members("flashnerd", 1)
    assert {n for n in ens._shared} == {n for n in ens._stacked_params() if n.startswith(("m.embed", "m.blocks.0."))}
    assert ens.members.blocks[0].in_proj.weight.dim() == 2 and ens.members.blocks[1].in_proj.weight.dim() == 3
    ens.batched_call = batched_call
    ens.members.cpu_chunk = 3  # the shared path steps 4 worlds in two chunks, as the model's own CPU step would
    # the other path from step 7 on: each member's cache must hold its whole history whichever path wrote it
    out = _stream_as_members(ens, singles, reset_world=1, switch_at=7)
    assert bool((disagreement(out) > 0).all())


def test_shared_blocks_learn_from_every_members_windows():
    """Training on member-grouped rows: forward equals the separate models', a shared weight's gradient is the sum
    of theirs, a member's own weight's gradient is its model's."""
    ens, singles = _members("flashnerd", 2)  # every block shared: members differ in ln_f, readout and skip
    _train_as_members(ens, singles)
    for n, p in ens.members.named_parameters():
        grads = [dict(m.named_parameters())[n].grad for m in singles]
        if f"m.{n}" in ens._shared:
            torch.testing.assert_close(p.grad, sum(grads), atol=1e-6, rtol=1e-4)
        else:
            for k, g in enumerate(grads):
                torch.testing.assert_close(p.grad[k], g, atol=1e-6, rtol=1e-4)


def test_a_sharing_ensemble_is_fitted_saved_and_stepped_by_the_backend(tiny_ensemble, tmp_path, capsys):
    _, data, _, _ = tiny_ensemble
    out = tmp_path / "shared.safetensors"
    cfg = dataclasses.replace(FitConfig(), max_steps=2, batch_size=8, ar_batch_size=4, window=8, eval_every=2,
                              ensemble=K, ensemble_shared=2, contact_head_steps=0)
    Fitter(data, cfg).fit(out, progress=False)
    ckpt = read_checkpoint(out)
    model, _, _ = model_from_checkpoint(ckpt)
    assert ckpt["ensemble_shared"] == 2 and model.shared_layers == 2
    assert ckpt["state_dict"]["members.blocks.1.in_proj.weight"].dim() == 2  # held once
    assert ckpt["state_dict"]["members.readout.0.weight"].shape[0] == K
    dyn = make_dynamics("flashnerd", get_robot("anymal_c"), 4, checkpoint=str(out))
    dyn.step(torch.as_tensor(dyn.default_qpos()[7:], dtype=torch.float32).repeat(4, 1))
    assert bool((dyn.state().disagreement > 0).all())
    for bad, message in ((dict(ensemble=1), "needs --model flashnerd and --ensemble K"),
                         (dict(model="nerd"), "needs --model flashnerd and --ensemble K")):
        with pytest.raises(ValueError, match=message):
            Fitter(data, dataclasses.replace(cfg, **bad))
    assert main(["bench", "model", "--batch", "4", "--models", "flashnerd", "--ensemble", "2", "--ensemble_shared",
                 "3", "--min_seconds", "0.05"]) == 0  # the cpu size has 4 blocks
    timed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["ensemble"]
    assert timed["shared_blocks"] == 3 and timed["cost_over_one_model"]["flashnerd"]["4"] > 0
    assert main(["bench", "model", "--models", "flashnerd", "--ensemble", "2", "--ensemble_shared", "5"]) == 2
    assert "--ensemble_shared must be 0 to the model's 4 blocks" in capsys.readouterr().err


def test_evaluate_model_reports_how_an_ensembles_disagreement_ranks_its_rollouts(tiny_ensemble, capsys):
    from flashnerd.training.evaluate import rank_correlation

    x = torch.tensor([0.3, 0.1, 0.9, 0.5])
    assert rank_correlation(x, x.exp()) == pytest.approx(1.0) and rank_correlation(x, -x) == pytest.approx(-1.0)
    assert rank_correlation(x, torch.ones(4)) is None and rank_correlation(x[:2], x[:2]) is None
    root, data, out, _ = tiny_ensemble
    assert main(["evaluate-model", "--checkpoint", str(out), "--data", str(data), "--horizons", "1,15"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result["disagreement"]) == {"1", "15"} and result["disagreement"]["1"] > 0
    assert -1 <= result["disagreement_error_rank_corr"]["15"] <= 1
    # the percentiles are those of every step's disagreement along the same rollouts, stepped here by hand
    from flashnerd.data.dataset import load_dataset

    robot = get_robot("anymal_c")
    held = load_dataset(data, robot)
    dyn = make_dynamics("flashnerd", robot, held.num_trajectories, checkpoint=str(out))
    dyn.reset(torch.arange(held.num_trajectories), held.qpos[:, 0], held.qvel[:, 0])
    seen = []
    for t in range(15):
        dyn.step(held.ctrl[:, t])
        seen.append(dyn.state().disagreement.clone())
    for h in (1, 15):  # each horizon's over its own first h steps
        expected = torch.quantile(torch.stack(seen[:h]).flatten(), torch.tensor([0.5, 0.9, 0.99]))
        got = result["disagreement_quantiles"][str(h)]
        assert [got["p50"], got["p90"], got["p99"]] == pytest.approx(expected.tolist(), rel=1e-5)
    assert got["p50"] <= got["p90"] <= got["p99"]
    assert main(["evaluate-model", "--checkpoint", str(root / "single.safetensors"), "--data", str(data),
                 "--horizons", "1"]) == 0
    assert "disagreement" not in json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # one model
