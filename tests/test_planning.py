"""DIAL-MPC: the spline, convergence on a problem with a known optimum, and batched rollouts on a backend."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flashnerd.dynamics import make_dynamics
from flashnerd.planning import DialMPC, DialMPCConfig, rollout_returns, spline_matrix
from flashnerd.utils.machine import describe_machine


def test_spline_interpolates_the_knots_reproduces_lines_and_stays_bounded():
    M = spline_matrix(num_knots=5, horizon=21)  # knots at steps 0, 5, 10, 15, 20
    assert M.shape == (21, 5)
    torch.testing.assert_close(M[[0, 5, 10, 15, 20]], torch.eye(5), atol=1e-5, rtol=0)
    line = torch.linspace(-1.0, 1.0, 5)
    torch.testing.assert_close(M @ line, torch.linspace(-1.0, 1.0, 21), atol=1e-5, rtol=0)
    wiggle = M @ torch.tensor([0.0, 1.0, -1.0, 1.0, 0.0])
    assert torch.all(wiggle[1:5] > 0) and wiggle.abs().max() < 2.0  # smooth, bounded between knots


def test_dial_mpc_finds_a_known_optimum_and_anneals():
    cfg = DialMPCConfig(num_samples=256, horizon=21, num_knots=5, first_iterations=12)
    target = spline_matrix(5, 21) @ torch.tensor([[0.5, -0.2], [-0.4, 0.3], [0.6, 0.0], [0.1, -0.5],
                                                            [-0.3, 0.4]])  # (H, A), reachable by the spline

    def evaluate(actions: torch.Tensor) -> torch.Tensor:  # (S, H, A) -> (S,)
        return -(actions - target).square().mean(dim=(1, 2))

    mpc = DialMPC(cfg, action_dim=2, evaluate=evaluate, seed=1)
    start_error = -evaluate(mpc.actions(mpc.mean)[None]).item()
    plan = mpc.optimize()
    error = (plan - target).square().mean().item()
    assert error < 0.05 * start_error, (error, start_error)  # measured: 0.022x
    assert mpc.knot_sigma[0] < mpc.knot_sigma[-1]  # less noise near the present
    first = mpc.step()  # a second call: warm start from the shifted plan, 2 iterations
    assert first.shape == (2,) and mpc.steps == 1


def test_rollout_returns_branch_every_sample_from_one_state(anymal):
    S, H = 6, 4
    dyn = make_dynamics("mujoco", anymal, S)
    qpos = torch.as_tensor(dyn.default_qpos(), dtype=torch.float32)
    qvel = torch.zeros(dyn.nv)
    default = torch.tensor(anymal.default_joint_pos)
    actions = torch.zeros(S, H, anymal.num_joints)
    actions[1] = actions[0]  # two identical sequences
    actions[2:] = torch.rand(S - 2, H, anymal.num_joints, generator=torch.Generator().manual_seed(0)) - 0.5
    height = lambda s, h: s.qpos[:, 2]  # noqa: E731
    to_ctrl = lambda a: default + 0.5 * a  # noqa: E731
    returns = rollout_returns(dyn, qpos, qvel, actions, height, to_ctrl)
    assert returns.shape == (S,) and returns[0] == returns[1]
    again = rollout_returns(dyn, qpos, qvel, actions, height, to_ctrl)  # starts over from the same state
    torch.testing.assert_close(again, returns, atol=1e-6, rtol=0)
    assert not torch.allclose(returns[2:], returns[:1].expand(S - 2), atol=1e-5)
    dyn.close()


def test_annealing_halves_the_sampling_noise_every_iteration():
    cfg = DialMPCConfig(num_samples=4096, horizon=11, num_knots=3, first_iterations=3, sigma=0.4)
    spreads = []

    def evaluate(actions: torch.Tensor) -> torch.Tensor:  # records the knot spread it was given
        spreads.append(actions[1:, -1].std().item())  # last step = last knot (the spline interpolates it)
        return torch.zeros(actions.shape[0])

    DialMPC(cfg, action_dim=1, evaluate=evaluate, seed=0).optimize()
    torch.testing.assert_close(torch.tensor(spreads), 0.4 * 0.5 ** torch.arange(3.0), rtol=0.05, atol=0)


def test_dial_mpc_drives_a_point_mass_to_its_goal():
    """Closed loop on a known system: a 1-D double integrator (dt 0.1 s, force in [-1, 1]) from rest at 0 to 1."""
    dt, goal = 0.1, 1.0
    cfg = DialMPCConfig(num_samples=256, horizon=15, num_knots=4, iterations=2, first_iterations=6, sigma=0.8)
    state = torch.zeros(2)  # position, velocity

    def evaluate(actions: torch.Tensor) -> torch.Tensor:  # (S, H, 1) -> (S,)
        x = state.expand(actions.shape[0], 2).clone()
        cost = torch.zeros(actions.shape[0])
        for h in range(actions.shape[1]):
            x[:, 1] += dt * actions[:, h, 0]
            x[:, 0] += dt * x[:, 1]
            cost += (x[:, 0] - goal).square() + 0.1 * x[:, 1].square()
        return -cost

    mpc = DialMPC(cfg, action_dim=1, evaluate=evaluate, seed=0)
    for _ in range(60):
        u = mpc.step()[0]
        state = torch.stack((state[0] + dt * (state[1] + dt * u), state[1] + dt * u))
    assert abs(state[0] - goal) < 0.05 and abs(state[1]) < 0.1, state


def test_climb_reward_and_success_on_hand_built_states(anymal):
    from flashnerd.planning.climb import ClimbPlanCfg, ClimbReward, lane_start
    from flashnerd.sim.scene import build_scene
    from flashnerd.sim.terrain import PLATFORM_EDGE, PLATFORM_HEIGHTS

    model = build_scene(anymal, "platforms")
    lane = 5
    reward = ClimbReward(ClimbPlanCfg(), anymal, model, lane)
    start, _ = lane_start(anymal, model, lane)
    on_top = start.clone()
    on_top[0] = PLATFORM_EDGE + 0.9
    on_top[2] += PLATFORM_HEIGHTS[lane]
    assert not reward.climbed(start) and reward.climbed(on_top)
    half_way = on_top.clone()
    half_way[0] = PLATFORM_EDGE + 0.1  # hind feet still on the ground
    assert not reward.climbed(half_way)
    slumped = on_top.clone()
    slumped[2] -= 0.15  # base too low over the platform
    qvel = torch.zeros(2, model.nv)
    qvel[:, 0] = 0.5
    r = reward(torch.stack((on_top, slumped)), qvel, t=0.0)
    assert r[0] > r[1]


def test_flashnerd_plan_runs_one_platform_end_to_end(tmp_path):
    from flashnerd.cli.main import main

    tiny = ["--platforms", "5", "--num_samples", "8", "--horizon", "6", "--iterations", "1", "--no-compile",
            "--episode_s", "0.08"]
    data, ckpt = tmp_path / "rollouts.h5", tmp_path / "rows.safetensors"
    assert main(["plan", "--dynamics", "mujoco", *tiny, "--record_rollouts", str(data),
                 "--out", str(tmp_path / "plan.json")]) == 0
    assert main(["fit", "--data", str(data), "--contacts", "rows", "--out", str(ckpt), "--max_steps", "2",
                 "--ar_weight", "0"]) == 0
    assert main(["plan", "--dynamics", "flashnerd", "--dynamics_checkpoint", f"flashnerd={ckpt}", *tiny,
                 "--out", str(tmp_path / "plan.json")]) == 0  # same settings: joins the file
    import json

    both = json.loads((tmp_path / "plan.json").read_text())["backends"]
    assert set(both) == {"mujoco", "flashnerd"}
    assert main(["plan", "--dynamics", "mujoco", *tiny[:-1], "0.12", "--out", str(tmp_path / "plan.json")]) == 2
    out = both["mujoco"]
    assert out["platforms"] == 1 and out["climbs"] == 0 and out["median_planning_ms"] > 0
    assert len(out["per_platform"][0]["base_path"]) == 4
    assert main(["plan", "--platforms", "7"]) == 2  # a lane that does not exist: one-line error


def test_plan_writes_after_every_platform_and_resumes_an_interrupted_run(tmp_path, monkeypatch, capsys):
    """An interrupted run keeps the platforms it finished in --out; --resume plans only the others, and the result
    equals an uninterrupted run's (the planner's seed is per platform)."""
    import json

    import flashnerd.cli.plan as plan_cli
    from flashnerd.cli.main import main

    tiny = ["--dynamics", "mujoco", "--platforms", "4,5", "--num_samples", "8", "--horizon", "4", "--iterations", "1",
            "--no-compile", "--episode_s", "0.06"]
    whole, cut = tmp_path / "whole.json", tmp_path / "cut.json"
    assert main(["plan", *tiny, "--out", str(whole)]) == 0
    real = plan_cli.climb_platform

    def dies_on_lane_5(cfg, robot, backend, lane, **kw):
        if lane == 5:
            raise KeyboardInterrupt
        return real(cfg, robot, backend, lane, **kw)

    monkeypatch.setattr(plan_cli, "climb_platform", dies_on_lane_5)
    assert main(["plan", *tiny, "--out", str(cut)]) == 130  # Ctrl-C
    partial = json.loads(cut.read_text())["backends"]["mujoco"]
    assert partial["platforms"] == 1 and partial["complete"] is False and partial["per_platform"][0]["lane"] == 4

    planned = []
    monkeypatch.setattr(plan_cli, "climb_platform", lambda *a, **kw: planned.append(a[3]) or real(*a, **kw))
    capsys.readouterr()
    assert main(["plan", *tiny, "--out", str(cut), "--resume"]) == 0
    assert planned == [5]  # lane 4 was kept
    err = capsys.readouterr().err  # a line per platform planned on stderr, none for a kept one
    assert "mujoco platform 5 (0.181 m):" in err and "platform 4" not in err
    done, ref = (json.loads(f.read_text())["backends"]["mujoco"] for f in (cut, whole))
    assert done["complete"] and [p["lane"] for p in done["per_platform"]] == [4, 5]
    assert [p["base_path"] for p in done["per_platform"]] == [p["base_path"] for p in ref["per_platform"]]
    before = cut.read_text()
    assert main(["plan", *tiny, "--platforms", "4", "--out", str(cut), "--resume"]) == 0  # all kept: nothing planned,
    assert cut.read_text() == before  # and the file, which holds more platforms than were asked for, is left alone
    assert main(["plan", *tiny, "--resume"]) == 2  # --resume needs --out: one-line error
    assert main(["plan", *tiny, "--seed", "3", "--out", str(cut)]) == 2  # another seed: refused before planning
    assert main(["plan", *tiny, "--reward_weights", "lane=1", "--out", str(cut)]) == 2  # other reward weights too
    assert main(["plan", *tiny, "--reward_weights", "lane=x"]) == 2 and main(["plan", "--reward_weights", "yaw=1"]) == 2
    assert planned == [5]


def test_reward_weights_from_the_command_line_change_the_reward(anymal):
    import argparse
    import dataclasses

    from flashnerd.cli.plan_args import planning_cfg
    from flashnerd.planning.climb import ClimbPlanCfg, ClimbReward, lane_start
    from flashnerd.sim.scene import build_scene

    args = argparse.Namespace(task="FlashNeRD-Climb-Platform-Anymal-C-v0", num_samples=None, horizon=None,
                              iterations=None, episode_s=None, compile=False, lookahead_in_stance=None,
                              stand_at_goal=None, reward_weights="lane=9")
    cfg = planning_cfg(args)
    base = dataclasses.replace(cfg, weights=ClimbPlanCfg().weights)
    assert cfg.weights == {**base.weights, "lane": 9.0}
    model = build_scene(anymal, "platforms")
    start, _ = lane_start(anymal, model, 1)
    off = start.clone()
    off[1] += 0.5  # half a metre off the lane centre
    qpos, qvel = torch.stack((start, off)), torch.zeros(2, model.nv)
    r4, r1 = (ClimbReward(c, anymal, model, 1)(qpos, qvel, 0.0) for c in (cfg, base))
    torch.testing.assert_close(r4[0], r1[0])  # on the lane centre the weight does not matter
    # off it: (9 - default) more times the squared offset
    torch.testing.assert_close(r1[1] - r4[1], torch.tensor((9.0 - base.weights["lane"]) * 0.5**2))


def test_planning_on_a_learned_model_records_its_samples_replayed_in_mujoco(tmp_path, anymal):
    """DAgger data: a learned planner's kept action sequences, rolled out in MuJoCo from the executed states."""
    from flashnerd.cli.main import main
    from flashnerd.data.dataset import load_dataset
    from flashnerd.dynamics import make_dynamics

    tiny = ["--platforms", "5", "--num_samples", "8", "--horizon", "6", "--iterations", "1", "--no-compile",
            "--episode_s", "0.06"]
    data = tmp_path / "dagger.h5"
    assert main(["plan", "--dynamics", "flashnerd", *tiny, "--record_rollouts", str(data),
                 "--record_per_call", "3"]) == 0
    rec = load_dataset(data, anymal)
    # the first decision anneals over first_iterations (6), then 1 per step: 8 planning calls, 3 kept each
    assert rec.qpos.shape[:2] == (8 * 3, 7) and rec.attrs["terrain"] == "platforms"
    sim = make_dynamics("mujoco", anymal, len(rec.qpos), terrain="platforms")
    sim.reset(torch.arange(len(rec.qpos)), rec.qpos[:, 0], rec.qvel[:, 0])
    for t in range(6):
        sim.step(rec.ctrl[:, t])
    assert (sim.state().qpos - rec.qpos[:, 6]).abs().max() < 2e-3  # ground truth, not the model's forecast
    sim.close()


def test_bench_plan_times_backends_in_turns_and_reports_ratios(capsys):
    from flashnerd.cli.main import main

    tiny = ["--platform", "5", "--num_samples", "8", "--horizon", "4", "--iterations", "1", "--no-compile"]
    assert main(["bench", "plan", "--dynamics", "mujoco,flashnerd", *tiny, "--decisions", "3", "--turns", "2",
                 "--warmup", "1"]) == 0
    import json

    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["backends"]) == {"mujoco", "flashnerd"} and out["ratio_to_mujoco"]["mujoco"] == 1.0
    fn = out["backends"]["flashnerd"]
    assert len(fn["warmup_ms"]) == 1 and 0 < fn["p10_ms"] <= fn["median_planning_ms"] <= fn["p90_ms"]
    assert out["ratio_to_mujoco"]["flashnerd"] == round(
        fn["median_planning_ms"] / out["backends"]["mujoco"]["median_planning_ms"], 3)
    assert main(["bench", "plan", *tiny, "--warmup", "-1"]) == 2  # one-line error
    assert main(["bench", "plan", "--dynamics", "ode", *tiny]) == 2


def test_lookahead_in_stance_only_changes_feet_standing_before_an_edge(anymal):
    """Without the stance lookahead a foot standing on the ground just before the platform is asked to stay there
    (not to float at the platform's height); far from the edge both rewards agree."""
    import dataclasses

    from flashnerd.planning.climb import ClimbPlanCfg, ClimbReward, lane_start
    from flashnerd.sim.scene import build_scene
    from flashnerd.sim.terrain import PLATFORM_EDGE

    model = build_scene(anymal, "platforms")
    cfg = ClimbPlanCfg()
    both = (ClimbReward(dataclasses.replace(cfg, lookahead_in_stance=True), anymal, model, 4),
            ClimbReward(dataclasses.replace(cfg, lookahead_in_stance=False), anymal, model, 4))
    start, _ = lane_start(anymal, model, 4)
    near = start.clone()
    near[0] = PLATFORM_EDGE - 0.55  # front feet 0.1 m before the edge, on the ground
    qpos, qvel = torch.stack((start, near)), torch.zeros(2, model.nv)
    t_stance = 0.5 / cfg.gait_frequency + 0.01  # the first diagonal pair just entered stance
    with_stance, swing_only = (r(qpos, qvel, t_stance) for r in both)
    torch.testing.assert_close(with_stance[0], swing_only[0])  # no surface ahead: same reward
    assert swing_only[1] > with_stance[1] + 0.01


def test_stand_at_goal_asks_for_four_feet_down_at_the_goal_only(anymal):
    import dataclasses

    from flashnerd.planning.climb import ClimbPlanCfg, ClimbReward, lane_start
    from flashnerd.sim.scene import build_scene
    from flashnerd.sim.terrain import PLATFORM_EDGE, PLATFORM_HEIGHTS

    model = build_scene(anymal, "platforms")
    cfg = ClimbPlanCfg()
    trot, stand = (ClimbReward(dataclasses.replace(cfg, stand_at_goal=False), anymal, model, 2),
                   ClimbReward(dataclasses.replace(cfg, stand_at_goal=True), anymal, model, 2))
    start, _ = lane_start(anymal, model, 2)
    at_goal = start.clone()
    at_goal[0] = PLATFORM_EDGE + cfg.goal_past_edge
    at_goal[2] += PLATFORM_HEIGHTS[2]  # standing on the platform's top
    qpos, qvel = torch.stack((start, at_goal)), torch.zeros(2, model.nv)
    t_swing = 0.25 / cfg.gait_frequency  # mid-swing of the first diagonal pair
    r_trot, r_stand = trot(qpos, qvel, t_swing), stand(qpos, qvel, t_swing)
    torch.testing.assert_close(r_trot[0], r_stand[0])  # far from the goal: the same trot
    assert r_stand[1] > r_trot[1] + 0.05  # at the goal the feet in swing phase may stay down


def test_gradient_refinement_climbs_the_return_and_never_keeps_a_worse_plan():
    """A quadratic return with a known optimum: a coarse sampling pass leaves the plan off the optimum, Adam steps
    through the (differentiable) return move it closer, and the kept plan is the best one scored, the sampled one
    included (planning runs under no_grad: refinement turns gradients on itself); without a refine rollout,
    grad_steps is refused."""
    target = spline_matrix(4, 9) @ torch.tensor([[0.5, -0.2], [-0.4, 0.3], [0.6, 0.0], [0.1, -0.5]])  # (H, A)

    def score(actions: torch.Tensor) -> torch.Tensor:  # (S, H, A) -> (S,)
        return -(actions - target).square().mean(dim=(1, 2))

    base = DialMPCConfig(num_samples=16, horizon=9, num_knots=4, first_iterations=1, sigma=0.3)
    with torch.no_grad():
        sampled = DialMPC(base, action_dim=2, evaluate=score, seed=3).optimize()
        mpc = DialMPC(dataclasses.replace(base, grad_steps=40, grad_lr=0.05), action_dim=2, evaluate=score, seed=3,
                      refine=score)
        refined = mpc.optimize()
    (r,) = mpc.refinements
    assert r["sampled"] == pytest.approx(score(sampled[None]).item())  # the same sampling pass, then refined
    assert r["refined"] == pytest.approx(score(refined[None]).item()) and r["refined"] > 0.2 * r["sampled"]
    greedy = dataclasses.replace(base, grad_steps=40, grad_lr=50.0)  # steps that overshoot: the sampled plan stays
    mpc = DialMPC(greedy, action_dim=2, evaluate=score, seed=3, refine=score)
    assert torch.equal(mpc.optimize(), sampled) and mpc.refinements[0]["kept_step"] == 0
    with pytest.raises(ValueError, match="needs a differentiable refine rollout"):
        DialMPC(dataclasses.replace(base, grad_steps=2), action_dim=2, evaluate=score)


def test_refined_planning_on_the_learned_model_scores_the_plan_as_the_batched_rollout_does(tmp_path, capsys):
    """Platform planning with gradient steps on FlashNeRD: the one-world differentiable rollout scores a plan as the
    batched no-grad rollout of the sampling backend does, its gradient reaches the actions (and not the model's
    weights), each decision keeps a plan at least as good on the model, and a backend without gradients is refused in
    one line before any planning."""
    import json

    from flashnerd.cli.main import main
    from flashnerd.planning.climb import ClimbPlanCfg, PlatformClimb
    from flashnerd.robots import get_robot

    cfg = ClimbPlanCfg(compile=False, episode_s=0.06, planner=DialMPCConfig(
        num_samples=8, horizon=6, num_knots=3, iterations=1, first_iterations=1, sigma=0.5, grad_steps=2))
    climb = PlatformClimb(cfg, get_robot("anymal_c"), "flashnerd", lane=5, seed=0)
    for _ in range(2):
        climb.decide()
    assert all(w.grad is None for w in climb.grad_dyn.network.parameters())  # refinement moved only the knots
    plan = climb.mpc.actions(climb.mpc.mean)  # (H, A) the shifted plan, as the next decision starts from it
    batch = plan[None].expand(cfg.planner.num_samples, -1, -1).contiguous()
    actions = plan[None].clone().requires_grad_(True)
    ret = climb._refine_return(actions)
    torch.testing.assert_close(ret.detach(), climb._evaluate(batch)[:1], atol=1e-4, rtol=1e-4)
    ret.sum().backward()
    assert actions.grad.abs().sum() > 0 and torch.isfinite(actions.grad).all()
    result = climb.result()
    assert result["refinement"]["decisions"] == 2
    assert all(r["refined"] >= r["sampled"] for r in climb.mpc.refinements)
    climb.close()
    tiny = ["--platforms", "5", "--num_samples", "8", "--horizon", "6", "--iterations", "1", "--no-compile",
            "--episode_s", "0.04", "--grad_steps", "1"]
    assert main(["plan", "--dynamics", "flashnerd", *tiny, "--out", str(tmp_path / "g.json")]) == 0
    saved = json.loads((tmp_path / "g.json").read_text())
    assert saved["grad_steps"] == 1 and saved["backends"]["flashnerd"]["per_platform"][0]["refinement"]
    assert saved["backends"]["flashnerd"]["per_platform"][0]["machine"] == describe_machine("cpu")
    capsys.readouterr()
    bench = ["bench", "plan", "--platform", "5", "--num_samples", "8", "--horizon", "6", "--no-compile", "--grad_steps",
             "1"]  # its default --dynamics holds mujoco
    for argv, message in ((["plan", "--dynamics", "flashnerd,mujoco", *tiny], "mujoco has no gradients"),
                          (bench, "mujoco has no gradients"),
                          (["plan", "--dynamics", "flashnerd", *tiny[:-1], "-1"], "--grad_steps must be >= 0"),
                          (["plan", *tiny[:-2], "--grad_lr", "0.1"], "add --grad_steps N")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err


def _plan_json(seed: int, climbed: dict[str, list[bool]], **settings) -> dict:
    """A `flashnerd plan --out` file in miniature: per backend, platforms with their climbs and planning times."""
    base = {"task": "FlashNeRD-Climb-Platform-Anymal-C-v0", "seed": seed, "num_samples": 8, "horizon": 6,
            "iterations": 1, "episode_s": 1.0, "lookahead_in_stance": False, "stand_at_goal": True,
            "weights": {"lane": 4.0}, "device": "cpu", "robot_variant": None, "threads": 2}
    backends = {b: {"checkpoint": None, "complete": True, "platforms": len(c), "per_platform": [
        {"lane": lane, "height": 0.06 + 0.025 * lane, "climbed": ok, "planning_ms": [10.0 * (seed + lane + 1)]}
        for lane, ok in enumerate(c)]} for b, c in climbed.items()}
    return {**base, **settings, "backends": backends}


def test_plan_table_counts_climbs_over_seeds_and_refuses_runs_that_differ_in_more_than_the_seed(tmp_path, capsys):
    """Climbs per seed, per platform counted over seeds and the median over every decision, from crafted plan files;
    a file from before refinement existed counts as grad_steps 0; other settings or threads, other platforms, a
    repeated seed, an incomplete backend, another checkpoint and malformed entries are one-line errors; the report
    renders the table."""
    import json
    from pathlib import Path

    from flashnerd.cli.main import main
    from flashnerd.viz.report import render_block

    runs = [_plan_json(1, {"flashnerd": [True, True], "mujoco": [True, False]}),
            _plan_json(2, {"flashnerd": [True, False]}, grad_steps=0, grad_lr=None),
            _plan_json(3, {"flashnerd": [False, True], "mujoco": [True, True]})]
    paths = []
    for run in runs:
        paths.append(tmp_path / f"s{run['seed']}.json")
        paths[-1].write_text(json.dumps(run))
    out = tmp_path / "results" / "climb_seeds_x.json"
    assert main(["plan-table", *map(str, paths), "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    flash, mj = table["backends"]["flashnerd"], table["backends"]["mujoco"]
    assert table["seeds"] == [1, 2, 3] and flash["seeds"] == [1, 2, 3] and mj["seeds"] == [1, 3]
    assert flash["climbs_per_seed"] == [2, 1, 1] and mj["climbs_per_seed"] == [1, 2]
    assert flash["per_platform"] == {"0": [2, 3], "1": [2, 3]} and mj["per_platform"] == {"0": [2, 2], "1": [1, 2]}
    # decisions of seed s on lane l took 10 (s + l + 1) ms: flashnerd's are 20, 30, 30, 40, 40, 50
    assert flash["median_planning_ms"] == 35.0 and flash["median_planning_ms_per_seed"] == [25.0, 35.0, 45.0]
    text = render_block("climb_seeds_x", out.parent)
    assert "| `flashnerd` | 1, 2, 3 | 4/6 (2, 1, 1) | 1.3 | 35 | 2/3 | 2/3 |" in text
    assert "| `mujoco` | 1, 3 | 3/4 (1, 2) | 1.5 |" in text and "Timed on" not in text and "machines" not in flash
    # platforms planned on two machines (a run continued in another session): the row names both
    for run, machine in zip(runs, ("CPU A", "CPU B", "CPU A")):
        for p in run["backends"]["flashnerd"]["per_platform"]:
            p["machine"] = machine
        (tmp_path / f"s{run['seed']}.json").write_text(json.dumps(run))
    assert main(["plan-table", *map(str, paths), "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert table["backends"]["flashnerd"]["machines"] == ["CPU A", "CPU B"]
    assert "machines" not in table["backends"]["mujoco"]
    assert "Timed on: CPU A and CPU B (`flashnerd`); a machine not recorded (`mujoco`)." in render_block(
        "climb_seeds_x", out.parent)
    del runs[2]["backends"]["flashnerd"]["per_platform"][0]["machine"]  # a platform from before machines were kept
    (tmp_path / "s3.json").write_text(json.dumps(runs[2]))
    assert main(["plan-table", *map(str, paths), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["backends"]["flashnerd"]["machines"] == ["CPU A", "CPU B",
                                                                                 "a machine not recorded"]

    def refused(run: dict, message: str) -> None:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(run))
        capsys.readouterr()
        assert main(["plan-table", str(paths[0]), str(bad), "--out", str(tmp_path / "t.json")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
        assert not (tmp_path / "t.json").exists()

    refused(_plan_json(4, {"flashnerd": [True, True]}, horizon=7), "other horizon")
    refused(_plan_json(4, {"flashnerd": [True, True]}, grad_steps=2, grad_lr=0.05), "other grad_steps, grad_lr")
    refused(_plan_json(4, {"flashnerd": [True, True]}, threads=4), "other threads")  # its times are not comparable
    refused(_plan_json(4, {"flashnerd": [True]}), "needs the same platforms on every seed")
    refused(_plan_json(1, {"flashnerd": [True, True]}), "repeats seed 1")
    incomplete = _plan_json(4, {"flashnerd": [True, True]})
    incomplete["backends"]["flashnerd"]["complete"] = False
    refused(incomplete, "backend 'flashnerd' is incomplete")
    other = _plan_json(4, {"flashnerd": [True, True]})
    other["backends"]["flashnerd"]["checkpoint"] = "other.safetensors"
    refused(other, "needs one model per backend")
    broken = _plan_json(4, {"flashnerd": [True, True]})
    broken["backends"]["flashnerd"]["per_platform"][1]["planning_ms"] = ["slow"]  # someone else's file, edited
    refused(broken, "backend 'flashnerd' is not a plan result")
    twice = _plan_json(4, {"flashnerd": [True, True]})
    twice["backends"]["flashnerd"]["per_platform"][1]["lane"] = 0  # one platform counted twice
    refused(twice, "backend 'flashnerd' is not a plan result")
    del broken["backends"]["flashnerd"]["per_platform"][1]["climbed"]
    refused(broken, "backend 'flashnerd' is not a plan result")
    Path(tmp_path / "bad.json").write_text("[1, 2]")
    assert main(["plan-table", str(tmp_path / "bad.json"), "--out", str(tmp_path / "t.json")]) == 2
    assert "is not a `flashnerd plan --out` JSON" in capsys.readouterr().err


def test_a_planning_checkpoint_is_the_same_model_by_content_wherever_it_lies(tmp_path, capsys):
    """Runs planned from two checkouts name the same shipped file by two absolute paths: --resume and plan-table take
    them as one model by content (recorded digest, else the file at the path now, else the path itself); a file of
    other content is another model, and a checkpoint field that is not text makes a file no plan result."""
    import json

    from flashnerd.cli.common import checkpoint_sha256
    from flashnerd.cli.main import main
    from flashnerd.cli.plan import _resumable, same_checkpoint

    here, there, other = tmp_path / "a" / "m.safetensors", tmp_path / "b" / "m.safetensors", tmp_path / "o.safetensors"
    for path, content in ((here, b"weights"), (there, b"weights"), (other, b"other weights")):
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(content)
    gone = str(tmp_path / "gone" / "m.safetensors")
    assert same_checkpoint({"checkpoint": str(here)}, {"checkpoint": str(there)})
    assert not same_checkpoint({"checkpoint": str(here)}, {"checkpoint": str(other)})
    assert same_checkpoint({"checkpoint": gone, "checkpoint_sha256": checkpoint_sha256(str(here))},
                           {"checkpoint": str(there)})  # the digest stands for a file no longer there
    assert not same_checkpoint({"checkpoint": gone}, {"checkpoint": str(there)})  # no digest, no file: by path
    assert same_checkpoint({"checkpoint": gone}, {"checkpoint": gone})
    assert same_checkpoint({"checkpoint": None}, {"checkpoint": None})
    assert not same_checkpoint({"checkpoint": None}, {"checkpoint": str(here)})
    digest = checkpoint_sha256(str(here))
    assert not same_checkpoint({"checkpoint": str(here), "checkpoint_sha256": digest},  # a model refitted in place
                               {"checkpoint": str(here), "checkpoint_sha256": checkpoint_sha256(str(other))})
    earlier = {"checkpoint": str(here), "per_platform": [{"lane": 4, "planning_ms": [1.0]}]}
    assert list(_resumable(earlier, str(there), digest)) == [4]
    assert _resumable(earlier, str(other), checkpoint_sha256(str(other))) == {}
    refitted = {**earlier, "checkpoint": str(other), "checkpoint_sha256": digest}  # written before the file changed
    assert _resumable(refitted, str(other), checkpoint_sha256(str(other))) == {}
    assert checkpoint_sha256(str(tmp_path)) is None and checkpoint_sha256(gone) is None  # a folder, a missing file

    def run_file(seed: int, checkpoint, digest: bool) -> str:
        run = _plan_json(seed, {"flashnerd": [True, True]})
        entry = run["backends"]["flashnerd"]
        entry["checkpoint"] = checkpoint
        if digest:
            entry["checkpoint_sha256"] = checkpoint_sha256(checkpoint)
        path = tmp_path / f"s{seed}_{len(list(tmp_path.glob('s*.json')))}.json"
        path.write_text(json.dumps(run))
        return str(path)

    out = tmp_path / "t.json"
    old, new = run_file(1, str(here), digest=False), run_file(2, str(there), digest=True)
    assert main(["plan-table", old, new, "--out", str(out)]) == 0
    row = json.loads(out.read_text())["backends"]["flashnerd"]
    assert row["seeds"] == [1, 2] and row["checkpoint_sha256"] == digest  # the digest is kept, the first run had none
    capsys.readouterr()
    assert main(["plan-table", old, run_file(3, str(other), digest=True), "--out", str(tmp_path / "u.json")]) == 2
    assert "needs one model per backend" in capsys.readouterr().err
    assert main(["plan-table", old, run_file(4, 7, digest=False), "--out", str(tmp_path / "u.json")]) == 2
    assert "backend 'flashnerd' is not a plan result" in capsys.readouterr().err
    assert not (tmp_path / "u.json").exists()


def test_plan_records_its_models_digest_and_resumes_with_a_copy_of_it(tmp_path, monkeypatch):
    """`plan --out` on a learned backend records the checkpoint's sha256; a run resumed with a copy of that file
    elsewhere (another checkout) keeps the platforms, one whose recorded model had other content plans them again."""
    import json
    import shutil

    import flashnerd.cli.plan as plan_cli
    from flashnerd.cli.main import main
    from flashnerd.dynamics.learned import default_checkpoint
    from flashnerd.robots import get_robot

    shipped = default_checkpoint(get_robot("anymal_c"), "flashnerd", "platforms")
    tiny = ["--dynamics", "flashnerd", "--platforms", "0", "--num_samples", "4", "--horizon", "2", "--iterations", "1",
            "--no-compile", "--episode_s", "0.04"]
    out = tmp_path / "run.json"
    assert main(["plan", *tiny, "--out", str(out)]) == 0
    entry = json.loads(out.read_text())["backends"]["flashnerd"]
    assert entry["checkpoint"] == str(shipped) and entry["checkpoint_sha256"] == plan_cli.checkpoint_sha256(shipped)
    copy = tmp_path / "elsewhere" / shipped.name
    copy.parent.mkdir()
    shutil.copy(shipped, copy)
    real, planned = plan_cli.climb_platform, []
    monkeypatch.setattr(plan_cli, "climb_platform", lambda *a, **kw: planned.append(a[3]) or real(*a, **kw))
    assert main(["plan", *tiny, "--dynamics_checkpoint", f"flashnerd={copy}", "--out", str(out), "--resume"]) == 0
    assert planned == []  # the same model by content: platform 0 kept
    run = json.loads(out.read_text())
    run["backends"]["flashnerd"]["checkpoint_sha256"] = "0" * 64  # as if the file had been refitted since
    out.write_text(json.dumps(run))
    assert main(["plan", *tiny, "--dynamics_checkpoint", f"flashnerd={copy}", "--out", str(out), "--resume"]) == 0
    assert planned == [0]


def test_plan_table_joins_an_earlier_tables_backends_and_refuses_one_it_cannot_join(tmp_path, capsys):
    """A backend run in a later session joins the published table: the earlier backends' rows are kept as they were,
    the new backend's are counted from its runs, and the table may be rewritten in place; a table of other settings
    or platforms, one that already has the backend, and malformed tables are one-line errors that write nothing."""
    import json

    from flashnerd.cli.main import main
    from flashnerd.viz.report import render_block

    def write(name: str, data: dict):
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return str(path)

    first = [write(f"s{s}.json", _plan_json(s, {"flashnerd": [True, s == 1], "mujoco": [True, True]})) for s in (1, 2)]
    table = tmp_path / "results" / "climb_seeds_x.json"
    assert main(["plan-table", *first, "--out", str(table)]) == 0
    before = json.loads(table.read_text())
    nerd = write("n2.json", _plan_json(2, {"nerd": [False, True]}))
    assert main(["plan-table", nerd, "--table", str(table), "--out", str(table)]) == 0
    joined = json.loads(table.read_text())
    assert joined["backends"]["flashnerd"] == before["backends"]["flashnerd"]
    assert joined["backends"]["mujoco"] == before["backends"]["mujoco"]
    assert joined["seeds"] == [1, 2] and joined["runs"] == [*first, nerd]
    assert joined["backends"]["nerd"]["seeds"] == [2] and joined["backends"]["nerd"]["per_platform"] == {
        "0": [0, 1], "1": [1, 1]}
    assert {k: joined[k] for k in before if k not in ("backends", "runs")} == {
        k: before[k] for k in before if k not in ("backends", "runs")}
    text = render_block("climb_seeds_x", table.parent)
    assert "| `flashnerd` | 1, 2 | 3/4 (2, 1) | 1.5 |" in text
    assert "| `nerd` | 2 | 1/2 (1) | 1.0 | 35 | 0/1 | 1/1 |" in text
    # a new seed of a new backend extends the table's seeds
    rwm = write("r3.json", _plan_json(3, {"rwm": [True, True]}))
    assert main(["plan-table", rwm, "--table", str(table), "--out", str(tmp_path / "t3.json")]) == 0
    assert json.loads((tmp_path / "t3.json").read_text())["seeds"] == [1, 2, 3]

    def refused(runs: list[str], earlier: str, message: str) -> None:
        capsys.readouterr()
        assert main(["plan-table", *runs, "--table", earlier, "--out", str(tmp_path / "t.json")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
        assert not (tmp_path / "t.json").exists()

    refused([write("h.json", _plan_json(3, {"rwm": [True, True]}, horizon=7))], str(table), "other horizon")
    refused([write("p.json", _plan_json(3, {"rwm": [True]}))], str(table), "run the same platforms")
    refused([write("f.json", _plan_json(3, {"flashnerd": [True, True]}))], str(table),
            "already has backend 'flashnerd'")
    # --replace: a backend measured over more seeds later replaces its row whole; the others are kept as they were
    nerd3 = write("n3.json", _plan_json(3, {"nerd": [True, True]}))
    assert main(["plan-table", nerd, nerd3, "--table", str(table), "--out", str(tmp_path / "r.json"), "--replace"]) == 0
    replaced = json.loads((tmp_path / "r.json").read_text())
    assert replaced["backends"]["nerd"]["seeds"] == [2, 3] and replaced["seeds"] == [1, 2, 3]
    assert replaced["backends"]["nerd"]["per_platform"] == {"0": [1, 2], "1": [2, 2]}
    assert replaced["backends"]["flashnerd"] == before["backends"]["flashnerd"]
    capsys.readouterr()
    assert main(["plan-table", nerd3, "--out", str(tmp_path / "x.json"), "--replace"]) == 2
    assert "add --table FILE" in capsys.readouterr().err
    malformed = json.loads(table.read_text())
    malformed["backends"]["nerd"]["climbs_per_seed"] = [1, 1]  # two seeds' counts for one seed
    refused([rwm], write("m1.json", malformed), "backend 'nerd' is not a table row")
    del malformed["backends"]["nerd"]
    malformed["backends"]["mujoco"]["per_platform"].pop("1")
    refused([rwm], write("m2.json", malformed), "backend 'mujoco' is not a table row")
    good = json.loads(table.read_text())
    for field, bad in (("seeds", [9]), ("climbs_per_seed", [3]),
                       ("median_planning_ms", float("nan"))):
        edited = json.loads(json.dumps(good))
        edited["backends"]["nerd"][field] = bad  # a seed the table lacks, 3 climbs of 2 platforms, a NaN time
        refused([rwm], write("m4.json", edited), "backend 'nerd' is not a table row")
    edited = json.loads(json.dumps(good))
    edited["backends"]["nerd"].update(seeds=[2, 2], climbs_per_seed=[1, 1], platforms_per_seed=[2, 2],
                                      median_planning_ms_per_seed=[35.0, 35.0])  # one seed twice, lengths agree
    refused([rwm], write("m6.json", edited), "backend 'nerd' is not a table row")
    edited = json.loads(json.dumps(good))
    edited["backends"]["nerd"]["per_platform"]["0"] = [2, 1]  # more climbs than seeds planned
    refused([rwm], write("m5.json", edited), "backend 'nerd' is not a table row")
    edited = json.loads(json.dumps(good))
    edited["backends"]["nerd"]["per_platform"]["0"] = [1, 1]  # possible alone, but 2 climbs where the seed counts 1
    refused([rwm], write("m7.json", edited), "backend 'nerd' is not a table row")
    edited = json.loads(json.dumps(good))
    edited["platforms"][1]["lane"] = 0
    refused([rwm], write("m8.json", edited), "one of them twice")
    refused([rwm], write("m3.json", _plan_json(1, {"nerd": [True, True]})), "is not a `flashnerd plan-table` JSON")
    refused([rwm], str(tmp_path / "missing.json"), "is not a readable `flashnerd plan-table` JSON")


@pytest.mark.parametrize("text, message", [
    ('{"backends": {"mujoco": "x"}}', "is not a `flashnerd plan --out` JSON"),
    ('{"backends": {"mujoco": {"per_platform": [{"lane": 0, "height": 0.06, "climbed": "yes", "planning_ms": [1]}]}}}',
     "is not a `flashnerd plan --out` JSON"),
    ('{"backends": {"mujoco": {"per_platform": [{"lane": 0, "height": 0.06, "climbed": true, "planning_ms": [NaN]}]}}}',
     "is not a `flashnerd plan --out` JSON"),
    ("[" * 100_000 + "]" * 100_000, "exists and is not JSON"),
], ids=["backend_text", "climbed_text", "nan_time", "deep"])
def test_a_damaged_plan_file_is_refused_before_planning_and_kept(tmp_path, capsys, text, message):
    """`flashnerd plan --out` reads the file back (to --resume its platforms, or keep its other backends), and
    `plan-table` reads it too: an edited or damaged one is a one-line error of each, and stays as it was."""
    from flashnerd.cli.main import main

    out = tmp_path / "plan.json"
    out.write_text(text)
    assert main(["plan", "--dynamics", "mujoco", "--platforms", "0", "--num_samples", "4", "--horizon", "2",
                 "--iterations", "1", "--episode_s", "0.1", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert main(["plan-table", str(out), "--out", str(tmp_path / "table.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a" in err and len(err.splitlines()) == 1, err
    assert out.read_text() == text and not (tmp_path / "table.json").exists()
