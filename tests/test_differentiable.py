"""Gradients through the learned models: the functional streaming step equals the in-place one, and derivatives of a
rollout's return through the learned backend match central finite differences in float64."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flashnerd.models import MODEL_KINDS, build_model

IN, OUT = 7, 5


def _model(kind: str, ensemble: int = 1):
    torch.manual_seed(0)
    sizes = {"flashnerd": dict(n_layer=2, n_head=2, n_embd=16, span=3, readout_hidden=16),
             "nerd": dict(n_layer=2, n_head=2, n_embd=16, window=4),
             "rwm": dict(hidden=16, n_layer=2)}[kind]
    model = build_model(kind, IN, OUT, ensemble=ensemble, **sizes)
    with torch.no_grad():  # away from the zero-init biases, so that every path matters
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


@pytest.mark.parametrize("ensemble", [1, 3])
@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_functional_step_equals_in_place_step_and_leaves_its_cache_alone(kind, ensemble):
    model = _model(kind, ensemble)
    x = torch.randn(4, 9, IN)  # more frames than any cache holds: ring buffers wrap, windows slide
    cache, fcache = model.init_cache(4), model.init_cache(4)
    for t in range(x.shape[1]):
        with torch.no_grad():
            fast = model.step(x[:, t], cache)
        before = [c.clone() for c in _tensors(fcache)]
        slow, fcache_next = model.step_functional(x[:, t], fcache)
        assert all(torch.equal(a, b) for a, b in zip(before, _tensors(fcache)))  # the input cache is unchanged
        fcache = fcache_next
        torch.testing.assert_close(slow, fast, atol=1e-5, rtol=1e-5)
        if t == 4:  # a reset world forgets its history in both forms
            ids = torch.tensor([1])
            model.reset_cache(cache, ids)
            model.reset_cache(fcache, ids)


def _tensors(cache) -> list[torch.Tensor]:
    inner = getattr(cache, "inner", cache)
    return [v for v in vars(inner).values() if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_gradients_flow_through_a_functional_rollout(kind):
    model = _model(kind)
    x = torch.randn(2, 4, IN, requires_grad=True)  # within every model's history (NeRD: a window of 4)
    cache, out = model.init_cache(2), []
    for t in range(4):
        y, cache = model.step_functional(x[:, t], cache)
        out.append(y)
    out[-1].sum().backward()
    # the last prediction depends on earlier frames through the cache (all three models carry history)
    assert x.grad[:, 0].abs().sum() > 0 and x.grad[:, -1].abs().sum() > 0


# --- through the learned backend ----------------------------------------------------------------------------------


def _rollout_return(dyn, qpos0, qvel0, actions, default_pos, command):
    """Sum over H steps of a velocity-tracking return (ANYmal-C's tracking, base-motion and torque terms) of the
    backend's predicted states; actions (H, N, nu) -> (N,)."""
    from flashnerd.utils.math import quat_apply_inverse

    dyn.reset(torch.arange(qpos0.shape[0]), qpos0, qvel0)
    total = 0.0
    for a in actions:
        dyn.step(default_pos + 0.5 * a)
        s = dyn.state()
        lin_b = quat_apply_inverse(s.root_quat_w, s.root_lin_vel_w)  # (N, 3)
        ang_b = s.root_ang_vel_b  # (N, 3)
        track = torch.exp(-((command[:, :2] - lin_b[:, :2]) ** 2).sum(1) / 0.25)  # (N,)
        turn = torch.exp(-(command[:, 2] - ang_b[:, 2]) ** 2 / 0.25)  # (N,)
        total = total + track + 0.5 * turn - 2.0 * lin_b[:, 2] ** 2 - 0.05 * (ang_b[:, :2] ** 2).sum(1) \
            - 2.5e-5 * (s.joint_torque ** 2).sum(1)
    dyn.detach()
    return total


def test_return_gradient_through_a_16_step_flashnerd_rollout_matches_central_differences(anymal):
    """d(return)/d(actions) by autograd through the shipped ANYmal-C model (float64) against central differences
    along random directions and single coordinates: the functional step, the state representation, the contact
    features of predicted states and the PD torque are all on the path."""
    from flashnerd.dynamics import make_dynamics

    N, H = 3, 16
    dyn = make_dynamics("flashnerd", anymal, N, differentiable=True).to_dtype(torch.float64)
    g = torch.Generator().manual_seed(0)
    qpos0 = torch.as_tensor(dyn.default_qpos(), dtype=torch.float64).repeat(N, 1)  # (N, nq)
    qvel0 = 0.2 * torch.randn(N, dyn.nv, generator=g, dtype=torch.float64)  # (N, nv)
    default_pos = torch.tensor(anymal.default_joint_pos, dtype=torch.float64)  # (nu,)
    command = torch.tensor([[1.0, 0.0, 0.0], [0.0, -0.5, 0.3], [0.5, 0.5, -0.5]], dtype=torch.float64)
    actions = (0.3 * torch.randn(H, N, dyn.nu, generator=g, dtype=torch.float64)).requires_grad_()

    total = _rollout_return(dyn, qpos0, qvel0, actions, default_pos, command).sum()
    (grad,) = torch.autograd.grad(total, actions)
    assert torch.isfinite(grad).all() and grad[0].abs().sum() > 0  # the first action moves every later state

    def f(a: torch.Tensor) -> float:
        with torch.no_grad():
            return float(_rollout_return(dyn, qpos0, qvel0, a, default_pos, command).sum())

    eps = 1e-6
    directions = [torch.randn(actions.shape, generator=g, dtype=torch.float64) for _ in range(3)]
    for t, w, j in ((0, 0, 0), (7, 1, 4), (15, 2, 11)):  # single coordinates, early to late
        d = torch.zeros_like(actions)
        d[t, w, j] = 1.0
        directions.append(d)
    for d in directions:
        fd = (f(actions + eps * d) - f(actions - eps * d)) / (2 * eps)
        ad = float((grad * d).sum())
        assert abs(ad - fd) <= 1e-2 * max(abs(fd), 1e-3), (ad, fd)


# --- the differentiable env and SHAC ------------------------------------------------------------------------------


def _env(differentiable: bool, n: int = 4, **kwargs):
    import gymnasium as gym
    from conftest import TASK

    return gym.make(TASK, num_envs=n, dynamics="flashnerd", seed=5, differentiable=differentiable, **kwargs).unwrapped


def test_activation_checkpointing_gives_the_same_rollout_and_gradients():
    """Recomputing each model step's activations in the backward pass changes neither the states nor the gradient
    of a 12-step return with respect to every action; without `differentiable` it is refused in one line."""
    plain, recomputed = _env(True), _env(True, grad_checkpoint=True)
    g = torch.Generator().manual_seed(3)
    actions = (0.5 * torch.randn(12, 4, plain.num_actions, generator=g)).requires_grad_(True)  # (T, N, A)
    grads = []
    for env in (plain, recomputed):
        total = sum(env.step(actions[t])[1].sum() for t in range(12))
        grads.append(torch.autograd.grad(total, actions)[0])
        env.detach()
    torch.testing.assert_close(recomputed.state.qpos, plain.state.qpos, atol=0.0, rtol=0.0)
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="grad_checkpoint recomputes the activations of a differentiable rollout"):
        _env(False, grad_checkpoint=True)


def test_differentiable_env_steps_like_the_fast_one_and_its_rewards_have_action_gradients():
    """Same seed, same actions (episodes ending inside the run included): the differentiable env reports the fast
    env's observations and rewards, and its rewards carry gradients with respect to earlier actions until detach."""
    fast, slow = _env(False), _env(True)
    assert slow.differentiable and not fast.differentiable
    g = torch.Generator().manual_seed(1)
    first = None
    total = 0.0
    for t in range(40):
        a = 0.5 * torch.randn(4, fast.num_actions, generator=g)
        if t == 25:  # force resets on two worlds mid-run: their next states start without history or gradient
            for env in (fast, slow):
                env.episode_length_buf[:2] = env.max_episode_length - 1
        a_slow = a.clone().requires_grad_(t == 0)
        first = a_slow if t == 0 else first
        obs_f, rew_f, term_f, trunc_f, _ = fast.step(a)
        obs_s, rew_s, term_s, trunc_s, _ = slow.step(a_slow)
        torch.testing.assert_close(rew_s.detach(), rew_f, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(obs_s["policy"].detach(), obs_f["policy"], atol=1e-3, rtol=1e-3)
        assert torch.equal(trunc_s, trunc_f) and torch.equal(term_s, term_f)
        if t < 10:
            total = total + rew_s.sum()
    (grad,) = torch.autograd.grad(total, first)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    assert obs_s["policy"].requires_grad
    slow.detach()
    assert not slow.get_observations()["policy"].requires_grad and not slow.state.qpos.requires_grad


def test_shac_td_lambda_targets_match_the_lambda_return_written_out():
    """SHAC's recursive targets against the lambda-return as the weighted mean of n-step returns, with a
    termination inside the window (no bootstrap past it)."""
    from flashnerd.envs.shac import ShacCfg, ShacTrainer

    H, N, gamma, lam = 5, 2, 0.9, 0.8
    trainer = ShacTrainer.__new__(ShacTrainer)
    trainer.cfg = ShacCfg(horizon=H, gamma=gamma, lam=lam)
    g = torch.Generator().manual_seed(0)
    reward = torch.randn(H, N, generator=g)
    values = torch.randn(H + 1, N, generator=g)
    done = torch.zeros(H, N, dtype=torch.bool)
    done[2, 1] = True  # world 1 terminates at step 2
    trainer.target_critic = lambda obs: values.flatten()[:, None]
    data = dict(obs=torch.zeros(H + 1, N), reward=reward, done=done, time_out=torch.zeros_like(done))
    got = trainer._targets(data)

    def n_step(t: int, w: int, n: int) -> float:
        total = 0.0
        for k in range(n):
            total += gamma ** k * float(reward[t + k, w])
            if done[t + k, w]:
                return total  # terminated: nothing after
        return total + gamma ** n * float(values[t + n, w])

    for w in range(N):
        for t in range(H):
            m = H - t  # the longest return the window holds
            ref = (1 - lam) * sum(lam ** (n - 1) * n_step(t, w, n) for n in range(1, m)) \
                + lam ** (m - 1) * n_step(t, w, m)
            assert abs(float(got[t, w]) - ref) < 1e-5, (t, w, float(got[t, w]), ref)


def test_shac_trains_saves_an_rsl_rl_checkpoint_that_eval_loads_and_resumes(tmp_path, capsys):
    from conftest import TASK

    from flashnerd.cli.main import main
    from flashnerd.envs.rsl_rl import read_policy_checkpoint

    argv = ["train", "--task", TASK, "--algo", "shac", "--dynamics", "flashnerd", "--num_envs", "8",
            "--shac_horizon", "4", "--max_iterations", "2", "--seed", "3", "--log_root", str(tmp_path),
            "--run_name", "shac", "--eval_episodes", "0"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["algo"] == "shac"
    ckpt = Path(summary["checkpoint"])
    assert ckpt.name == "model_1.pt" and ckpt.is_file()
    run = ckpt.parent
    assert list(run.glob("events.out.tfevents.*")) and (run / "params" / "shac.yaml").is_file()
    loaded = read_policy_checkpoint(str(ckpt))
    assert loaded["algo"] == "shac" and loaded["iter"] == 1
    assert main(["eval", "--task", TASK, "--checkpoint", str(ckpt), "--episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["dynamics"] == "mujoco" and result["episodes"] == 2
    assert main([*argv[:-4], "--run_name", "more", "--eval_episodes", "0", "--max_iterations", "3", "--resume",
                 "--checkpoint", str(ckpt)]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert Path(resumed["checkpoint"]).name == "model_2.pt"
    weights = read_policy_checkpoint(resumed["checkpoint"])["actor_state_dict"]
    assert any(not torch.equal(weights[k], loaded["actor_state_dict"][k]) for k in weights)  # it learned
    truncated = tmp_path / "model_9.pt"  # a SHAC checkpoint without its optimizers: a one-line error on --resume
    torch.save({k: v for k, v in loaded.items() if k != "shac_actor_optimizer"}, truncated)
    assert main([*argv[:-4], "--run_name", "bad", "--eval_episodes", "0", "--max_iterations", "3", "--resume",
                 "--checkpoint", str(truncated)]) == 2
    err = capsys.readouterr().err.strip()
    assert "lacks shac_actor_optimizer" in err and len(err.splitlines()) == 1
    target = {k: torch.full_like(v, float("nan")) for k, v in loaded["shac_target_critic"].items()}
    torch.save({**loaded, "shac_target_critic": target}, truncated)  # the critic SHAC's targets come from
    assert main([*argv[:-4], "--run_name", "bad", "--eval_episodes", "0", "--max_iterations", "3", "--resume",
                 "--checkpoint", str(truncated)]) == 2
    err = capsys.readouterr().err.strip()
    assert "non-finite values in its target critic" in err.splitlines()[-1] and "Traceback" not in err, err


def test_shac_max_seconds_stops_and_saves_after_the_iteration_that_spends_them(tmp_path, capsys):
    from conftest import TASK

    from flashnerd.cli.main import main

    argv = ["train", "--task", TASK, "--algo", "shac", "--dynamics", "flashnerd", "--num_envs", "4",
            "--shac_horizon", "2", "--max_iterations", "4", "--seed", "3", "--log_root", str(tmp_path),
            "--eval_episodes", "0", "--max_seconds", "1e-6"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["iterations"] == 1 and summary["stopped_by"] == "max_seconds"
    assert Path(summary["checkpoint"]).name == "model_0.pt" and Path(summary["checkpoint"]).is_file()


def test_shac_starts_from_a_ppo_policy_with_fresh_optimizers(tmp_path):
    """`ShacTrainer.init_from`: the actor and critic of a PPO checkpoint, the target critic equal to the critic, the
    iteration count and optimizers fresh."""
    from conftest import TASK

    from flashnerd.envs.registry import task_cfgs
    from flashnerd.envs.rsl_rl import make_runner
    from flashnerd.envs.shac import ShacCfg, make_shac

    env_cfg, agent_cfg = task_cfgs(TASK, num_envs=4, dynamics="flashnerd")
    env, runner = make_runner(TASK, env_cfg, agent_cfg, None)
    with torch.no_grad():
        for p in [*runner.alg.actor.parameters(), *runner.alg.critic.parameters()]:
            p.add_(torch.randn_like(p))  # weights no fresh runner has
    ppo = tmp_path / "ppo.pt"
    runner.save(str(ppo))
    env.close()
    env, _, trainer = make_shac(TASK, env_cfg, agent_cfg, ShacCfg(horizon=4))
    trainer.init_from(str(ppo))
    for mine, theirs in ((trainer.actor, runner.alg.actor), (trainer.critic, runner.alg.critic),
                         (trainer.target_critic, runner.alg.critic)):
        for a, b in zip(mine.state_dict().values(), theirs.state_dict().values(), strict=True):
            assert torch.equal(a, b)
    assert trainer.iteration == 0 and not trainer.actor_opt.state
    trainer.learn(1)
    assert trainer.iteration == 1
    hand_cfg, hand_agent = task_cfgs("FlashNeRD-Reorient-Cube-Yaw-Allegro-v0", num_envs=2)
    hand_env, hand_runner = make_runner("FlashNeRD-Reorient-Cube-Yaw-Allegro-v0", hand_cfg, hand_agent, None)
    hand_runner.save(str(tmp_path / "hand.pt"))
    hand_env.close()
    with pytest.raises(ValueError, match="does not fit this task's policy") as err:
        trainer.init_from(str(tmp_path / "hand.pt"))  # another task's policy: one line, not torch's traceback
    assert len(str(err.value).splitlines()) == 1
    env.close()


@pytest.mark.parametrize("argv, message", [
    (["--algo", "shac", "--dynamics", "mujoco"], "--algo shac differentiates through a learned model"),
    (["--shac_horizon", "8"], "add --algo shac"),
    (["--algo", "shac", "--dynamics", "flashnerd", "--shac_horizon", "0"], "--shac_horizon must be a positive integer"),
])
def test_shac_cli_errors_are_one_line(argv, message, tmp_path, capsys):
    from conftest import TASK

    from flashnerd.cli.main import main

    assert main(["train", "--task", TASK, "--num_envs", "2", "--log_root", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_detach_cuts_the_graph_the_trackers_hold():
    """The roll task's tracker integrates the pitch rate of the model's states (its progress is an observation);
    after `detach` no tensor of the env or of a tracker keeps the rollout's graph."""
    import gymnasium as gym

    env = gym.make("FlashNeRD-Roll-Flat-Microduck-v0", num_envs=2, dynamics="flashnerd", seed=0,
                   differentiable=True).unwrapped
    env.reset()
    action = (0.3 * torch.randn(2, env.num_actions, generator=torch.Generator().manual_seed(0))).requires_grad_(True)
    obs, reward, *_ = env.step(action)
    assert env.trackers["roll"].progress.requires_grad and obs["policy"].requires_grad
    env.detach()
    held = [(name, key) for name, holder in [("env", env), *env.trackers.items()]
            for key, value in vars(holder).items() if isinstance(value, torch.Tensor) and value.requires_grad]
    assert not held
