"""Platform climbing with DIAL-MPC: plan on any `Dynamics` backend, execute every chosen action in the analytical one.

One platform per lane of the `platforms` terrain (`sim/terrain.py`). The robot starts standing at the lane's start,
facing the platform, and DIAL-MPC chooses joint targets every control step by rolling sampled action sequences out on
the planning backend (all samples as one batch) and scoring them with `ClimbReward`: walk forward at `forward_speed`
along the lane until the base is `goal_past_edge` past the platform's edge, keep the base `base_height` above the
mean surface under the feet, stay upright and on heading, and follow a
trotting reference for the feet (swing height over the highest surface under or just ahead of each foot), the
published method's locomotion reward. The chosen first action is applied in MuJoCo. A platform counts as climbed
when, at the end, the base is past the edge by `success_margin`, every foot stands on the platform's top and the robot
is upright.

Shapes: S samples (the planning backend's worlds), H horizon steps, A actions (= joints), 4 feet.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from flashnerd.data.dataset import write_dataset
from flashnerd.dynamics import REFERENCE_BACKEND, backend_info, backend_names, make_dynamics
from flashnerd.planning.dial_mpc import DialMPC, DialMPCConfig, rollout_returns
from flashnerd.robots import RobotSpec
from flashnerd.robots.kinematics import TorchKinematics
from flashnerd.sim.scene import build_scene, default_qpos
from flashnerd.sim.terrain import LANE_GAP, PLATFORM_EDGE, PLATFORM_HEIGHTS, PLATFORM_SIZE
from flashnerd.utils.math import quat_apply_inverse, yaw_from_quat


@dataclass
class ClimbPlanCfg:
    """Settings of the platform-climbing planner (the same for every backend)."""

    robot: str = "anymal_c"
    feet: tuple[str, ...] = ("LF_FOOT", "RF_FOOT", "LH_FOOT", "RH_FOOT")
    gait_offsets: tuple[float, ...] = (0.0, 0.5, 0.5, 0.0)  # trot: diagonal pairs in phase
    gait_frequency: float = 2.0  # Hz
    swing_height: float = 0.14  # m above the surface under the foot, at mid-swing
    foot_radius: float = 0.03  # m: the foot sphere's center sits this high on a surface
    lookahead: float = 0.2  # m: a swinging foot clears the highest surface between it and this far ahead
    # True also asks a foot in stance to stand at the height of the surface just ahead of it. Near an edge that is the
    # platform's top, out of reach while the foot stands on the ground, so the cheapest plan waits at the edge; the
    # default keeps the lookahead to swinging feet
    lookahead_in_stance: bool = False
    # the trot's swing height shrinks to zero over the last `stop_distance` before the goal, so the robot ends standing
    # on four feet instead of trotting in place (where it bounces and drifts sideways); False trots to the end
    stand_at_goal: bool = True
    forward_speed: float = 0.5  # m/s along +x, slowing down over the last `stop_distance` before the goal
    goal_past_edge: float = 1.0  # m: where the base should stop, past the platform edge (the platform is 2 m deep)
    stop_distance: float = 0.3  # m
    base_height: float = 0.5  # m above the mean surface under the feet (the default pose stands at 0.46 m)
    episode_s: float = 8.0  # s per platform: at 5 s every backend was still stepping up the higher platforms
    action_scale: float = 0.5  # joint targets = default + action_scale * action, action in [-1, 1]
    # torch.compile the reward and a learned backend's contact features and step glue (compiles for seconds on the
    # first decision of a run, then cuts the per-step cost of these small launch-bound ops several times)
    compile: bool = True
    success_margin: float = 0.5  # m: base past the platform edge at the end
    # shipped models fitted on platform data, per learned backend (file names under checkpoints/<robot>/)
    checkpoints: dict[str, str] = field(default_factory=lambda: {
        "flashnerd": "flashnerd_platforms.safetensors", "nerd": "nerd_platforms.safetensors"})
    # lane 4: at weight 1 a lateral drift of 0.5 m cost less than a foot 0.2 m off its reference, and planning on a
    # learned model could drift off the platform's side at the goal (docs/results.md)
    weights: dict[str, float] = field(default_factory=lambda: {
        "forward": 1.0, "lane": 4.0, "heading": 0.5, "upright": 2.0, "height": 4.0, "feet": 8.0, "ang_vel": 0.02})
    planner: DialMPCConfig = field(default_factory=lambda: DialMPCConfig(
        num_samples=256, horizon=20, num_knots=5, iterations=2, first_iterations=6, sigma=0.5))


def _surface(x: torch.Tensor, y: torch.Tensor, lane_y: float, height: float) -> torch.Tensor:
    """Height of the lane's terrain under (x, y): the platform top over its footprint, the ground elsewhere."""
    depth, width = PLATFORM_SIZE
    on = (x >= PLATFORM_EDGE) & (x <= PLATFORM_EDGE + depth) & ((y - lane_y).abs() <= width / 2)
    return torch.where(on, torch.full_like(x, height), torch.zeros_like(x))


class ClimbReward:
    """Per-step reward (S,) of states on one lane; `t` is the time since the episode started (s)."""

    def __init__(self, cfg: ClimbPlanCfg, robot: RobotSpec, model, lane: int, device: torch.device | str = "cpu"):
        self.cfg, self.lane_y, self.height = cfg, lane * LANE_GAP, PLATFORM_HEIGHTS[lane]
        self.kin = TorchKinematics(model, device)
        self.feet = torch.tensor([model.body(f).id for f in cfg.feet], device=device)  # (4,)
        self.offsets = torch.tensor(cfg.gait_offsets, device=device)  # (4,)
        # the whole per-state reward as one compiled graph (its kinematics included); the time enters as the feet's
        # swing heights, a tensor, so that every step of an episode runs the same graph
        self._score = torch.compile(self._reward, dynamic=False) if cfg.compile else self._reward

    def feet_pos(self, qpos: torch.Tensor) -> torch.Tensor:
        """World positions (S, 4, 3) of the foot centers."""
        return self.kin.forward_mat(qpos)[0][:, self.feet]

    def __call__(self, qpos: torch.Tensor, qvel: torch.Tensor, t: float) -> torch.Tensor:
        c = self.cfg
        phase = (t * c.gait_frequency + self.offsets) % 1.0  # (4,)
        swing = c.swing_height * torch.clamp(torch.sin(2 * math.pi * phase), min=0.0)  # (4,) 0 in stance
        return self._score(qpos, qvel, swing)

    def _reward(self, qpos: torch.Tensor, qvel: torch.Tensor, swing: torch.Tensor) -> torch.Tensor:
        """The reward (S,) of states qpos (S, nq), qvel (S, nv) with the feet's swing heights (4,) at this time."""
        c, w = self.cfg, self.cfg.weights
        x, y, z = qpos[:, 0], qpos[:, 1], qpos[:, 2]  # (S,)
        speed = c.forward_speed * ((PLATFORM_EDGE + c.goal_past_edge - x) / c.stop_distance).clamp(-1.0, 1.0)  # (S,)
        gravity_b = quat_apply_inverse(qpos[:, 3:7], qpos.new_tensor([0.0, 0.0, -1.0]).expand(len(x), 3))  # (S, 3)
        feet = self.feet_pos(qpos)  # (S, 4, 3)
        under = _surface(feet[..., 0], feet[..., 1], self.lane_y, self.height)  # (S, 4) surface under each foot
        ground = torch.maximum(under, _surface(feet[..., 0] + c.lookahead, feet[..., 1], self.lane_y, self.height))
        if not c.lookahead_in_stance:
            ground = torch.where(swing > 0, ground, under)  # (S, 4)
        lift = swing.expand(len(x), 4)  # (S, 4)
        if c.stand_at_goal:
            lift = lift * (speed / c.forward_speed).clamp(0.0, 1.0)[:, None]  # (S, 4) no swing at the goal
        foot_err = feet[..., 2] - (ground + c.foot_radius + lift)  # (S, 4)
        # the base height follows the feet as they step up (a target from the surface under the base would jump at
        # the edge and hold the base back there)
        return -(w["forward"] * (qvel[:, 0] - speed).square()
                 + w["lane"] * (y - self.lane_y).square()
                 + w["heading"] * yaw_from_quat(qpos[:, 3:7]).square()
                 + w["upright"] * gravity_b[:, :2].square().sum(-1)
                 + w["height"] * (z - under.mean(dim=1) - c.base_height).square()
                 + w["feet"] * foot_err.square().sum(-1)
                 + w["ang_vel"] * qvel[:, 3:6].square().sum(-1))

    def checks(self, qpos: torch.Tensor) -> dict:
        """The parts of `climbed` for one world: base past the edge by the margin, each foot on the platform's top,
        upright (gravity's z in the base frame below -0.8)."""
        feet = self.feet_pos(qpos[None])[0]  # (4, 3)
        gravity_z = quat_apply_inverse(qpos[None, 3:7], qpos.new_tensor([[0.0, 0.0, -1.0]]))[0, 2]
        on_top = (_surface(feet[:, 0], feet[:, 1], self.lane_y, self.height) > 0) & (feet[:, 2] > self.height)
        return {"past_edge": bool(qpos[0] > PLATFORM_EDGE + self.cfg.success_margin),
                "feet_on_top": on_top.tolist(), "upright": bool(gravity_z < -0.8)}

    def climbed(self, qpos: torch.Tensor) -> bool:
        """Base past the edge by the margin, all four feet on the platform's top, upright (one world)."""
        return passed(self.checks(qpos))


def passed(checks: dict) -> bool:
    """Whether every part of `ClimbReward.checks` holds."""
    return checks["past_edge"] and all(checks["feet_on_top"]) and checks["upright"]


def lane_start(robot: RobotSpec, model, lane: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Standing pose (nq,) at the start of `lane`, facing +x, and zero velocity (nv,)."""
    qpos = torch.as_tensor(default_qpos(robot, model), dtype=torch.float32)
    qpos[1] = lane * LANE_GAP
    return qpos, torch.zeros(model.nv)


class RolloutRecorder:
    """Keeps `per_call` random samples of every batch of planning rollouts (state, control), to write as a dataset in
    `flashnerd record`'s format: ground-truth transitions from exactly the states and action sequences a planner
    explores (on an analytical planning backend its own rollouts; on a learned one the kept action sequences replayed
    in MuJoCo, so a model can be refitted on the states its own plans lead to, as in DAgger)."""

    def __init__(self, per_call: int, seed: int = 0) -> None:
        self.per_call, self.gen = per_call, torch.Generator().manual_seed(seed)
        self.qpos: list[torch.Tensor] = []
        self.qvel: list[torch.Tensor] = []
        self.ctrl: list[torch.Tensor] = []

    def pick(self, num_samples: int) -> torch.Tensor:
        return torch.randperm(num_samples, generator=self.gen)[:self.per_call]

    def add(self, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> None:
        """qpos (n, H+1, nq), qvel (n, H+1, nv), ctrl (n, H, nu) of the kept samples."""
        self.qpos.append(qpos.cpu())
        self.qvel.append(qvel.cpu())
        self.ctrl.append(ctrl.cpu())

    def replay(self, truth, qpos0: torch.Tensor, qvel0: torch.Tensor, ctrl: torch.Tensor) -> None:
        """Roll controls ctrl (n, H, nu) out in `truth` (an analytical backend of n worlds) from one state qpos0 (nq,),
        qvel0 (nv,) and keep the trajectories."""
        n, horizon = ctrl.shape[:2]
        truth.reset(torch.arange(n), qpos0.cpu().expand(n, -1), qvel0.cpu().expand(n, -1))
        qpos, qvel = [truth.state().qpos.clone()], [truth.state().qvel.clone()]  # (n, nq), (n, nv)
        for h in range(horizon):
            truth.step(ctrl[:, h].cpu())
            qpos.append(truth.state().qpos.clone())
            qvel.append(truth.state().qvel.clone())
        self.add(torch.stack(qpos, 1), torch.stack(qvel, 1), ctrl)

    def write(self, path, robot: RobotSpec, terrain: str, attrs: dict | None = None) -> dict:
        qpos, qvel, ctrl = torch.cat(self.qpos), torch.cat(self.qvel), torch.cat(self.ctrl)
        return write_dataset(path, robot, qpos, qvel, ctrl, terrain=terrain, source="plan", **(attrs or {}))


class PlatformClimb:
    """One platform with one planning backend, a control decision at a time: DIAL-MPC plans on `dynamics`, the chosen
    action is executed in MuJoCo. `decide()` makes one decision; `result()` says whether the platform was climbed. A
    `recorder` keeps some of the planning rollouts. Several climbs can be stepped in turns (`flashnerd bench plan`
    interleaves backends so that a drifting machine slows them alike)."""

    @torch.no_grad()
    def __init__(self, cfg: ClimbPlanCfg, robot: RobotSpec, dynamics: str, lane: int, seed: int = 0,
                 dynamics_kwargs: dict | None = None, device: str = "cpu",
                 recorder: RolloutRecorder | None = None) -> None:
        p = cfg.planner
        self.cfg, self.robot, self.lane = cfg, robot, lane
        learned = backend_info(dynamics).learned
        compiled = {"compile": cfg.compile} if "compile" in backend_info(dynamics).options() else {}
        self.plan_dyn = make_dynamics(dynamics, robot, p.num_samples, device=device, terrain="platforms",
                                      **compiled, **(dynamics_kwargs or {}))
        self.sim = make_dynamics(REFERENCE_BACKEND, robot, 1, terrain="platforms", nthread=1)
        model = build_scene(robot, "platforms")
        # a learned planning backend's kept samples are replayed in MuJoCo to record ground truth
        self.truth = (make_dynamics(REFERENCE_BACKEND, robot, min(recorder.per_call, p.num_samples),
                                    terrain="platforms", nthread=1) if recorder is not None and learned else None)
        self.recorder = recorder
        self.reward = ClimbReward(cfg, robot, model, lane, device=self.plan_dyn.device)
        self.grad_dyn = self.grad_reward = None
        if p.grad_steps:  # one differentiable world of the same learned model scores the plan being refined
            if not learned:
                raise ValueError(f"gradient refinement (grad_steps {p.grad_steps}) needs a learned planning backend; "
                                 f"'{dynamics}' has no gradients: plan on a learned one "
                                 f"({', '.join(backend_names(learned=True, planning=True))}) "
                                 "or set grad_steps 0")
            self.grad_dyn = make_dynamics(dynamics, robot, 1, device=device, terrain="platforms", differentiable=True,
                                          **(dynamics_kwargs or {}))
            # compiled kinematics would compile a second time for the backward pass; this path is one world
            self.grad_reward = ClimbReward(replace(cfg, compile=False), robot, model, lane,
                                           device=self.plan_dyn.device)
        qpos, qvel = lane_start(robot, model, lane)
        self.sim.reset(torch.arange(1), qpos[None], qvel[None])
        self.default = torch.tensor(robot.default_joint_pos, device=self.plan_dyn.device)  # (A,)
        self.mpc = DialMPC(p, robot.num_joints, self._evaluate, device=self.plan_dyn.device, seed=seed,
                           refine=self._refine_return if p.grad_steps else None)
        self.steps = int(round(cfg.episode_s / robot.control_dt))
        self.t_now = 0.0
        self.planning_ms: list[float] = []
        self.base_path: list[list[float]] = []

    def _evaluate(self, actions: torch.Tensor) -> torch.Tensor:
        """Mean reward (S,) of action sequences (S, H, A) rolled out from the executed state on the planning backend."""
        cfg, dyn, recorder, num_samples = self.cfg, self.plan_dyn, self.recorder, self.cfg.planner.num_samples
        s = self.sim.state()
        q0, v0 = s.qpos[0].to(dyn.device), s.qvel[0].to(dyn.device)  # (nq,), (nv,)
        keep = recorder.pick(num_samples).to(dyn.device) if recorder is not None else None
        own = keep is not None and self.truth is None  # record the planning backend's own (ground-truth) rollouts
        path = [(q0.expand(len(keep), -1), v0.expand(len(keep), -1))] if own else []
        dt = self.robot.control_dt
        returns = rollout_returns(
            dyn, q0, v0, actions,
            lambda st, h: torch.nan_to_num(self.reward(st.qpos, st.qvel, self.t_now + h * dt), nan=-1e6),
            lambda a: self.default + cfg.action_scale * a,
            (lambda st: path.append((st.qpos[keep].clone(), st.qvel[keep].clone()))) if own else None)
        if own:
            recorder.add(torch.stack([q for q, _ in path], 1), torch.stack([v for _, v in path], 1),
                         self.default + cfg.action_scale * actions[keep])
        elif keep is not None:
            recorder.replay(self.truth, q0, v0, self.default + cfg.action_scale * actions[keep])
        return returns

    def _refine_return(self, actions: torch.Tensor) -> torch.Tensor:
        """Mean reward (1,) of one action sequence (1, H, A) on the differentiable planning world, with the graph."""
        s, dyn, dt = self.sim.state(), self.grad_dyn, self.robot.control_dt
        dyn.detach()  # a rollout starts a graph of its own (the last one is dropped at the end of `decide`)
        return rollout_returns(
            dyn, s.qpos[0].to(dyn.device), s.qvel[0].to(dyn.device), actions,
            lambda st, h: torch.nan_to_num(self.grad_reward(st.qpos, st.qvel, self.t_now + h * dt), nan=-1e6,
                                           neginf=-1e6),
            lambda a: self.default + self.cfg.action_scale * a, grad=True)

    @torch.no_grad()
    def decide(self) -> float:
        """Plan one control decision, execute it in MuJoCo; returns the planning time (ms)."""
        self.t_now = len(self.planning_ms) * self.robot.control_dt
        start = time.perf_counter()
        action = self.mpc.step()  # (A,)
        if self.grad_dyn is not None:  # the last scoring rollout's graph is no longer needed
            self.grad_dyn.detach()
        self.planning_ms.append(1e3 * (time.perf_counter() - start))
        self.sim.step((self.default + self.cfg.action_scale * action).cpu()[None])
        self.base_path.append(self.sim.state().qpos[0, :3].tolist())
        return self.planning_ms[-1]

    @torch.no_grad()
    def result(self) -> dict:
        """Climbed (judged on the current state), planning times of every decision so far, and the base path."""
        checks = self.reward.checks(self.sim.state().qpos[0].to(self.plan_dyn.device))
        out = {"lane": self.lane, "height": PLATFORM_HEIGHTS[self.lane], "climbed": passed(checks), "checks": checks,
               "median_planning_ms": float(np.median(self.planning_ms)), "planning_ms": self.planning_ms,
               "base_path": self.base_path}
        if self.mpc.refinements:  # how much the gradient steps added, on the model, per decision
            gains = [g for r in self.mpc.refinements if math.isfinite(g := r["refined"] - r["sampled"])]
            out["refinement"] = {"median_gain": float(np.median(gains)) if gains else None,
                                 "improved": sum(g > 0 for g in gains), "decisions": len(self.mpc.refinements)}
        return out

    def close(self) -> None:
        for dyn in (self.sim, self.plan_dyn, self.truth, self.grad_dyn):
            if dyn is not None:
                dyn.close()


def climb_platform(cfg: ClimbPlanCfg, robot: RobotSpec, dynamics: str, lane: int, seed: int = 0,
                   dynamics_kwargs: dict | None = None, device: str = "cpu", progress=None,
                   recorder: RolloutRecorder | None = None) -> dict:
    """Plan on `dynamics`, execute in MuJoCo, for one whole platform episode; returns climbed, planning times (every
    decision) and the base path. A `recorder` keeps some of the planning rollouts."""
    climb = PlatformClimb(cfg, robot, dynamics, lane, seed, dynamics_kwargs, device, recorder)
    for k in range(climb.steps):
        climb.decide()
        if progress is not None:
            progress(k + 1, climb.steps)
    out = climb.result()
    climb.close()
    return out
