"""`FlashNeRDEnv`: one batched torch environment for every task and every dynamics backend.

The layout follows Isaac Lab's manager-based RL env (observation groups, weighted reward terms times the step dt,
terminations split into terminated/truncated, reset and interval events, velocity commands, `extras["log"]`),
but its configuration is a plain dataclass and its physics is any `Dynamics` backend chosen by name.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from flashnerd.dynamics import backend_info, backend_names, make_dynamics
from flashnerd.envs import mdp
from flashnerd.envs.commands import OrientationGoal, VelocityCommand
from flashnerd.envs.config import DoneTerm, EnvCfg, RewTerm
from flashnerd.envs.registry import load_entry_point, with_robot
from flashnerd.envs.terrain import terrain_height_map
from flashnerd.sim.scene import actuator_ctrl_limits, build_scene, variant_robot
from flashnerd.types import actuator_joint_columns
from flashnerd.utils.allocator import retain_freed_memory
from flashnerd.utils.math import quat_apply_inverse, yaw_from_quat


class AirTime:
    """Per-body air and contact timers of a contact group, as Isaac Lab's contact sensor tracks them."""

    def __init__(self, num_envs: int, num_bodies: int, device: torch.device) -> None:
        z = dict(device=device)
        self.current_air_time = torch.zeros(num_envs, num_bodies, **z)  # (N, nb)
        self.last_air_time = torch.zeros(num_envs, num_bodies, **z)
        self.current_contact_time = torch.zeros(num_envs, num_bodies, **z)
        self.last_contact_time = torch.zeros(num_envs, num_bodies, **z)

    def update(self, in_contact: torch.Tensor, dt: float) -> None:
        """Advance the timers by dt given the contact flags (N, nb)."""
        first_contact = (self.current_air_time > 0) & in_contact
        first_detached = (self.current_contact_time > 0) & ~in_contact
        # written in place: a timer replaced under torch.inference_mode (rsl_rl's rollouts step so) could not take a
        # reset's write outside it
        self.last_air_time.copy_(torch.where(first_contact, self.current_air_time + dt, self.last_air_time))
        self.current_air_time.copy_(torch.where(in_contact, 0.0, self.current_air_time + dt))
        self.last_contact_time.copy_(torch.where(first_detached, self.current_contact_time + dt,
                                                 self.last_contact_time))
        self.current_contact_time.copy_(torch.where(in_contact, self.current_contact_time + dt, 0.0))

    def first_contact(self, dt: float) -> torch.Tensor:
        """Bodies that touched down during the last step (N, nb) as float."""
        return ((self.current_contact_time > 0) & (self.current_contact_time < dt + 1e-8)).float()

    def reset(self, env_ids: torch.Tensor) -> None:
        for buf in (self.current_air_time, self.last_air_time, self.current_contact_time, self.last_contact_time):
            buf[env_ids] = 0.0


class FlashNeRDEnv(gym.Env):
    """A batched task environment. `gym.make(task_id, num_envs=..., dynamics=..., device=...)` builds one.

    `reset()` returns (obs, extras); `step(actions)` returns (obs, reward, terminated, truncated, extras), where
    obs is a dict of (N, D) tensors per observation group ("policy", "critic").
    """

    is_vector_env = True
    metadata = {"render_modes": [None]}

    def __init__(
        self,
        cfg: EnvCfg | None = None,
        num_envs: int | None = None,
        dynamics: str | None = None,
        device: str | None = None,
        seed: int | None = None,
        render_mode: str | None = None,
        robot_variant: str | None = None,
        robot: str | None = None,
        env_cfg_entry_point: Any = None,
        rsl_rl_cfg_entry_point: Any = None,
        plan_cfg_entry_point: Any = None,
        **dynamics_kwargs: Any,
    ) -> None:
        if cfg is None:
            if env_cfg_entry_point is None:
                raise ValueError("FlashNeRDEnv needs cfg= or a registry entry with env_cfg_entry_point")
            cfg = load_entry_point(env_cfg_entry_point)()
        overrides = {k: v for k, v in dict(num_envs=num_envs, dynamics=dynamics, device=device, seed=seed,
                                           robot_variant=robot_variant).items() if v is not None}
        if dynamics_kwargs:
            overrides["dynamics_kwargs"] = {**cfg.dynamics_kwargs, **dynamics_kwargs}
        cfg = dataclasses.replace(cfg, **overrides)
        if robot is not None:
            cfg = with_robot(cfg, robot)
        if cfg.num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {cfg.num_envs}")
        self.cfg = cfg
        self.render_mode = render_mode
        self.device = _resolve_device(cfg.device)
        with torch.inference_mode(False):  # a normal tensor, also for an env made inside inference mode
            self._down = torch.tensor([0.0, 0.0, -1.0], device=self.device)  # (3,) gravity's direction in the world
        if self.device.type == "cpu":  # every step allocates MB-sized tensors: keep their pages (utils/allocator.py)
            retain_freed_memory()
        self.num_envs = cfg.num_envs
        self.robot = variant_robot(cfg.robot, cfg.robot_variant, check=False)  # the backend builds its scene
        self.rng = torch.Generator(device=self.device).manual_seed(cfg.seed)
        torch.manual_seed(cfg.seed)

        if cfg.action_mode not in ("offset", "ema_limits"):
            raise ValueError(f"unknown action_mode '{cfg.action_mode}'; choose offset or ema_limits")
        if cfg.objects and not backend_info(cfg.dynamics).objects:
            raise ValueError(f"backend '{cfg.dynamics}' simulates the robot alone, and this task needs "
                             f"{', '.join(cfg.objects)}; use one of: {', '.join(backend_names(objects=True))}")
        scene = {"objects": tuple(cfg.objects)} if cfg.objects else {}
        if cfg.object_mass is not None:
            if not cfg.objects:
                raise ValueError("object_mass sets the mass of the scene's objects, and this task has none")
            if not (math.isfinite(cfg.object_mass) and cfg.object_mass > 0):
                raise ValueError(f"object_mass must be a positive number of kg, got {cfg.object_mass}")
            if "cube_mass" in cfg.dynamics_kwargs:
                raise ValueError("the cube's mass is set twice (object_mass and the backend option cube_mass); "
                                 "keep object_mass")
            scene["cube_mass"] = float(cfg.object_mass)
        self.dyn = make_dynamics(cfg.dynamics, self.robot, cfg.num_envs, device=self.device,
                                 terrain=cfg.terrain, **scene, **cfg.dynamics_kwargs)
        self.cfg = cfg = _with_uncertainty_terms(cfg, self.dyn)
        self.step_dt = self.dyn.control_dt
        self.max_episode_length_s = cfg.episode_length_s
        self.max_episode_length = math.ceil(cfg.episode_length_s / self.step_dt)

        n, nj = self.num_envs, self.robot.num_joints
        self.num_actions = nj
        self.default_joint_pos = torch.tensor(self.robot.default_joint_pos, device=self.device)  # (nj,)
        self._default_qpos = torch.as_tensor(self.dyn.default_qpos(), dtype=torch.float32, device=self.device)
        self.actions = torch.zeros(n, nj, device=self.device)  # (N, na)
        self.joint_targets = self.default_joint_pos.repeat(n, 1)  # (N, nj) what the backend was last sent
        self.targets_sent = self.joint_targets  # (N, nj) what it was sent in the last step (a reset world's too)
        robot_model = build_scene(self.robot)
        ctrl_range = torch.as_tensor(actuator_ctrl_limits(robot_model), dtype=torch.float32,
                                     device=self.device)  # (nj, 2), +-inf where not limited
        if cfg.action_mode == "ema_limits" and not torch.isfinite(ctrl_range).all():
            raise ValueError(f"action_mode 'ema_limits' maps actions onto the joints' control ranges, and robot "
                             f"'{self.robot.name}' has actuators without ctrlrange; add one in its MJCF")
        # (nj,), (nj,) qpos and qvel column of each actuated joint
        self._actuated_qpos, self._actuated_qvel = (torch.as_tensor(c, device=self.device)
                                                    for c in actuator_joint_columns(robot_model))
        self._target_low, self._target_high = ctrl_range[:, 0], ctrl_range[:, 1]
        joints = robot_model.actuator_trnid[:, 0]  # (nj,) each actuator's joint
        joint_range = np.where(robot_model.jnt_limited[joints].astype(bool)[:, None], robot_model.jnt_range[joints],
                               np.array([-np.inf, np.inf]))  # (nj, 2)
        self._joint_low, self._joint_high = torch.as_tensor(joint_range.T, dtype=torch.float32, device=self.device)
        self.prev_actions = torch.zeros(n, nj, device=self.device)
        self.joint_acc = torch.zeros(n, nj, device=self.device)
        self._prev_joint_vel = torch.zeros(n, nj, device=self.device)
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=self.device)  # (N,)
        self.terminated = torch.zeros(n, dtype=torch.bool, device=self.device)  # (N,) ended by a termination
        self.truncated = torch.zeros(n, dtype=torch.bool, device=self.device)  # (N,) ended by a time-out
        self.common_step_counter = 0
        # With keep_final_state (recording sets it), `final_state` holds after a step with resets a copy of the state
        # every world was in before the resets replaced the reset worlds' (the state a fall ended in); else None.
        self.keep_final_state = False
        self.final_state = None

        # Contact groups: slices into the backend's (N, nb) contact-force summary.
        self._contact_slices: dict[str, slice] = {}
        start = 0
        for group, bodies in self.robot.contact_bodies.items():
            self._contact_slices[group] = slice(start, start + len(bodies))
            start += len(bodies)
        self.air_time = AirTime(n, len(self.robot.contact_bodies.get("feet", ())), self.device)

        self.height_map = terrain_height_map(cfg.terrain, self.device)  # the terrain's heights, None without a field
        self.command_manager = VelocityCommand(cfg.commands, n, self.device, self.rng) if cfg.commands else None
        self.goal = OrientationGoal(cfg.goal, n, self.device, self.rng) if cfg.goal else None
        self.trackers = {name: make(self) for name, make in cfg.trackers.items()}
        self.episode_sums = {name: torch.zeros(n, device=self.device) for name in cfg.rewards}
        self.reward_terms: dict[str, torch.Tensor] = {}  # each term's weighted reward of the last step (N,)
        self._interval_time_left = {
            name: self._sample_interval(ev.interval_range_s, n)
            for name, ev in cfg.events.items() if ev.mode == "interval"
        }
        self._term_buffers = {name: torch.zeros(n, dtype=torch.bool, device=self.device) for name in cfg.terminations}
        self.extras: dict[str, Any] = {"log": {}}

        self._update_derived()
        obs = self.compute_observations()
        self.single_observation_space = gym.spaces.Dict(
            {g: gym.spaces.Box(-np.inf, np.inf, (v.shape[1],), np.float32) for g, v in obs.items()}
        )
        self.single_action_space = gym.spaces.Box(-np.inf, np.inf, (nj,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)
        self._reset_idx(torch.arange(n, device=self.device))
        self._obs = self.compute_observations()

    # --- properties tasks read ----------------------------------------------------------------------------------

    @property
    def state(self):
        """The backend's current `RobotState`."""
        return self.dyn.state()

    def contact_force(self, group: str) -> torch.Tensor:
        """Largest contact-force norm over the last step of each body in `group` (N, nb)."""
        if group not in self._contact_slices:
            raise ValueError(f"unknown contact group '{group}'; robot '{self.robot.name}' has "
                             f"{', '.join(self._contact_slices)}")
        return self.state.contact_force[:, self._contact_slices[group]]

    # --- gym API ------------------------------------------------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Reset every world; returns (obs, extras)."""
        if seed is not None:
            self.rng.manual_seed(seed)
            torch.manual_seed(seed)
        self._reset_idx(torch.arange(self.num_envs, device=self.device))
        self._obs = self.compute_observations()
        return self._obs, self.extras

    def step(self, actions: torch.Tensor):
        """Apply actions (N, na) for one control step; returns (obs, reward, terminated, truncated, extras)."""
        actions = self._check_actions(actions)
        # replaced, not written: with a differentiable backend the actions carry the policy's graph
        self.prev_actions, self.actions = self.actions, actions.clone()
        self.joint_targets = self._action_to_targets(self.actions)  # (N, nj)
        self.dyn.step(self.joint_targets)
        self.targets_sent = self.joint_targets  # (N, nj) this step's, kept when a reset moves joint_targets on

        self.episode_length_buf += 1
        self.common_step_counter += 1
        self._update_derived()
        if "feet" in self._contact_slices:
            self.air_time.update(self.contact_force("feet") > 1.0, self.step_dt)
        for tracker in self.trackers.values():
            tracker.update()

        terminated, truncated = self._compute_dones()
        self.terminated, self.truncated = terminated, truncated
        reward = self._compute_rewards()
        if self.goal is not None:  # after the rewards (they paid the bonus on the old goal), before resets log it
            self.goal.update(self.object_quat)
        self.extras = {"log": {}}
        if self.state.disagreement is not None:  # how far PPO has taken the learned model from its data
            self.extras["log"]["Metrics/model_disagreement"] = self.state.disagreement.mean()
        reset_ids = torch.nonzero(terminated | truncated).flatten()
        self.final_state = None
        if len(reset_ids) > 0:
            if self.keep_final_state:
                s = self.state
                self.final_state = dataclasses.replace(s, qpos=s.qpos.clone(), qvel=s.qvel.clone(),
                                                       joint_torque=s.joint_torque.clone(),
                                                       contact_force=s.contact_force.clone())
            self._reset_idx(reset_ids)
        if self.command_manager is not None:  # commands are given to the robot: no gradient flows into them
            self.command_manager.update(self.step_dt, self.heading.detach())
        self._apply_interval_events()
        self._obs = self.compute_observations()
        self.extras["time_outs"] = truncated
        return self._obs, reward, terminated, truncated, self.extras

    @property
    def differentiable(self) -> bool:
        """Whether observations and rewards carry gradients with respect to the actions (a learned backend made
        with `differentiable=True`); `detach()` cuts them."""
        return bool(getattr(self.dyn, "differentiable", False))

    def detach(self) -> None:
        """Cut the autograd graph of a differentiable env (truncated backpropagation between short rollouts): the
        backend's states and caches and every buffer derived from them keep their values only."""
        if not self.differentiable:
            return
        self.dyn.detach()
        for holder in (self, *self.trackers.values()):  # a tracker integrates states too (the roll's progress)
            for name, value in vars(holder).items():
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    setattr(holder, name, value.detach())
        self._obs = {group: obs.detach() for group, obs in self._obs.items()}

    def get_observations(self) -> dict[str, torch.Tensor]:
        """The observations returned by the last `reset()`/`step()`."""
        return self._obs

    def tracker_state(self) -> dict[str, float]:
        """The state of every tracker that holds one across episodes (its `state()`, e.g. the terrain curriculum's
        {"Curriculum/terrain_levels": 2.3}): where a run ended. Trackers of episode statistics have none."""
        return {k: v for tracker in self.trackers.values() if hasattr(tracker, "state")
                for k, v in tracker.state().items()}

    def tracker_checkpoint(self) -> dict[str, dict]:
        """What a resumed run needs of the trackers that hold state across episodes (e.g. each world's terrain level),
        as plain values: tracker name -> its `checkpoint()`."""
        return {name: t.checkpoint() for name, t in self.trackers.items() if hasattr(t, "checkpoint")}

    def restore_trackers(self, saved: Any) -> None:
        """Put the trackers back where a `tracker_checkpoint` left them, then reset every world, so each starts a
        fresh episode there (a reset that follows no episode moves no curriculum). A malformed `saved` (untrusted: it
        comes from a checkpoint file) is a one-line ValueError."""
        if not isinstance(saved, dict):
            raise ValueError("the checkpoint's tracker state is not a mapping of tracker names; resume from a "
                             "checkpoint flashnerd wrote")
        before = self.tracker_checkpoint()
        try:
            for name, tracker in self.trackers.items():
                if hasattr(tracker, "restore") and name in saved:
                    tracker.restore(saved[name])
        except ValueError:  # all or nothing: the trackers restored before the refused one go back
            for name, state in before.items():
                self.trackers[name].restore(state)
            raise
        self.episode_length_buf.zero_()  # no episode ran on the restored state: the reset moves no curriculum
        self.reset()

    def close(self) -> None:
        """Release the backend's threads and buffers."""
        self.dyn.close()

    # --- internals ----------------------------------------------------------------------------------------------

    def _check_actions(self, actions: torch.Tensor) -> torch.Tensor:
        actions = torch.as_tensor(actions, device=self.device, dtype=torch.float32)
        if actions.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions have shape {tuple(actions.shape)}, expected ({self.num_envs}, "
                             f"{self.num_actions}) = (num_envs, num_actions)")
        if not torch.isfinite(actions).all():
            bad = torch.nonzero(~torch.isfinite(actions).all(dim=1)).flatten()[:5].tolist()
            raise ValueError(f"actions contain NaN or Inf (worlds {bad}...); check the policy's output")
        return actions

    def _action_to_targets(self, actions: torch.Tensor) -> torch.Tensor:
        """Joint position targets (N, nj) of actions (N, na), as `cfg.action_mode` says, within the actuators' control
        ranges: what MuJoCo applies (it clamps each target), so what recording stores and a learned backend sees."""
        lo, hi = self._target_low, self._target_high
        if self.cfg.action_mode == "offset":
            return torch.clamp(self.default_joint_pos + self.cfg.action_scale * actions, lo, hi)  # (N, nj)
        fresh = lo + 0.5 * (actions.clamp(-1.0, 1.0) + 1.0) * (hi - lo)  # (N, nj) action range -> joint range
        return torch.lerp(self.joint_targets, fresh, self.cfg.action_ema_alpha)

    @property
    def object_pos(self) -> torch.Tensor:
        """The object's world position (N, 3)."""
        return self.dyn.object_state()[:, 0:3]

    @property
    def object_quat(self) -> torch.Tensor:
        """The object's orientation (N, 4), wxyz."""
        return self.dyn.object_state()[:, 3:7]

    def _update_derived(self, joint_acc: bool = True) -> None:
        s = self.dyn.state()
        if joint_acc:
            self.joint_acc = (s.joint_vel - self._prev_joint_vel) / self.step_dt  # (N, nj)
            self._prev_joint_vel = s.joint_vel.clone()
        if not self.robot.floating_base:  # no base: the root quantities below do not exist
            return
        quat = s.root_quat_w  # (N, 4)
        self.root_lin_vel_b = quat_apply_inverse(quat, s.root_lin_vel_w)  # (N, 3)
        self.root_ang_vel_b = s.root_ang_vel_b  # (N, 3)
        gravity = self._down.expand_as(self.root_lin_vel_b)  # (N, 3)
        self.projected_gravity_b = quat_apply_inverse(quat, gravity)  # (N, 3)
        self.heading = yaw_from_quat(quat)  # (N,)

    def _compute_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        truncated = torch.zeros_like(terminated)
        for name, term in self.cfg.terminations.items():
            value = term.func(self, **term.params)  # (N,) bool
            self._term_buffers[name] = value
            if term.time_out:
                truncated |= value
            else:
                terminated |= value
        return terminated, truncated & ~terminated

    def _compute_rewards(self) -> torch.Tensor:
        reward = torch.zeros(self.num_envs, device=self.device)
        sane = ~mdp.diverged(self)  # (N,)
        for name, term in self.cfg.rewards.items():
            value = term.func(self, **term.params) * (term.weight * self.step_dt)  # (N,)
            # A diverged world (NaN/Inf state, or an impossible speed) earns nothing this step and is reset by its
            # termination term; without this one bad world would poison the batch's returns (rsl_rl stops on NaN).
            value = torch.where(sane, torch.nan_to_num(value, nan=0.0, posinf=0.0, neginf=0.0), 0.0)
            self.reward_terms[name] = value.detach()
            self.episode_sums[name] += value.detach()
            reward = reward + value
        return reward

    def compute_observations(self) -> dict[str, torch.Tensor]:
        """Evaluate every observation group: {group: (N, D)}. A term in several groups (the policy's and the
        critic's) is computed once; each group adds its own noise, clip and scale to it."""
        out, computed = {}, {}
        for group_name, group in self.cfg.observations.items():
            parts = []
            for term in group.terms.values():
                key = _term_key(term)
                x = computed.get(key) if key is not None else None
                if x is None:
                    x = term.func(self, **term.params)  # (N, d)
                    if key is not None:
                        computed[key] = x
                if group.enable_corruption and term.noise > 0.0:
                    x = x + (2.0 * torch.rand(x.shape, device=self.device, generator=self.rng) - 1.0) * term.noise
                if term.clip is not None:
                    x = x.clamp(*term.clip)
                parts.append(x * term.scale)
            out[group_name] = torch.cat(parts, dim=-1)  # (N, D)
        return out

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        log = self.extras.setdefault("log", {})
        for name, sums in self.episode_sums.items():
            log[f"Episode_Reward/{name}"] = torch.mean(sums[env_ids]) / self.max_episode_length_s
            sums[env_ids] = 0.0
        for name, buf in self._term_buffers.items():
            log[f"Episode_Termination/{name}"] = torch.count_nonzero(buf[env_ids])
        for tracker in self.trackers.values():
            log.update(tracker.log(env_ids))
            tracker.reset(env_ids)
        if self.goal is not None:
            log["Metrics/goals_reached"] = torch.mean(self.goal.successes[env_ids])
            self.goal.successes[env_ids] = 0.0

        k = len(env_ids)
        qpos = self._default_qpos.expand(k, -1).clone()  # (k, nq)
        qvel = torch.zeros(k, self.state.qvel.shape[1], device=self.device)  # (k, nv)
        for event in self.cfg.events.values():
            if event.mode == "reset":
                event.func(self, env_ids, qpos, qvel, **event.params)
        self.dyn.reset(env_ids, qpos, qvel)
        for event in self.cfg.events.values():
            if event.mode == "reset_object":  # objects are placed once the robot's state is written
                event.func(self, env_ids, **event.params)
        if self.goal is not None:  # once the object is placed: relative goals start from its new orientation
            self.goal.resample(env_ids, self.object_quat)
        # the EMA restarts from the reset pose; buffers that may carry gradients are replaced, not written
        self.joint_targets = self.joint_targets.index_copy(0, env_ids, qpos[:, self._actuated_qpos])

        self.actions = self.actions.index_fill(0, env_ids, 0.0)
        self.prev_actions = self.prev_actions.index_fill(0, env_ids, 0.0)
        self.episode_length_buf[env_ids] = 0
        self.air_time.reset(env_ids)
        if self.command_manager is not None:
            self.command_manager.resample(env_ids)
        self._update_derived(joint_acc=False)
        self._prev_joint_vel = self._prev_joint_vel.index_copy(0, env_ids, self.state.joint_vel[env_ids])
        self.joint_acc = self.joint_acc.index_fill(0, env_ids, 0.0)

    def _sample_interval(self, bounds: tuple[float, float] | None, n: int) -> torch.Tensor:
        lo, hi = bounds if bounds is not None else (1.0, 1.0)
        return lo + (hi - lo) * torch.rand(n, device=self.device, generator=self.rng)

    def _apply_interval_events(self) -> None:
        for name, time_left in self._interval_time_left.items():
            event = self.cfg.events[name]
            time_left -= self.step_dt
            ids = torch.nonzero(time_left <= 0.0).flatten()
            if len(ids) > 0:
                event.func(self, ids, **event.params)
                time_left[ids] = self._sample_interval(event.interval_range_s, len(ids))


def _with_uncertainty_terms(cfg: EnvCfg, dyn) -> EnvCfg:
    """`cfg` with the reward and termination terms its uncertainty options ask for (named "model_uncertainty");
    options set for a backend that reports no disagreement are a one-line error."""
    options = {"uncertainty_penalty": cfg.uncertainty_penalty, "uncertainty_threshold": cfg.uncertainty_threshold}
    for name, value in options.items():
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"--{name} must be a finite number >= 0 (0: off), got {value}")
    if not any(options.values()):
        return cfg
    if dyn.state().disagreement is None:
        raise ValueError(f"--uncertainty_penalty/--uncertainty_threshold need a learned ensemble; backend "
                         f"'{cfg.dynamics}' reports no model disagreement (fit one with `flashnerd fit --ensemble 4` "
                         "and pass it as --dynamics_checkpoint)")
    rewards, terminations = dict(cfg.rewards), dict(cfg.terminations)
    if cfg.uncertainty_penalty:
        rewards["model_uncertainty"] = RewTerm(mdp.model_disagreement, weight=-cfg.uncertainty_penalty)
    if cfg.uncertainty_threshold:
        terminations["model_uncertainty"] = DoneTerm(mdp.model_disagreement_above,
                                                     params={"threshold": cfg.uncertainty_threshold})
    return dataclasses.replace(cfg, rewards=rewards, terminations=terminations)


def _resolve_device(device: str) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device '{device}' requested but CUDA is not available; use --device cpu")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device '{device}'; use cpu or cuda[:index]")
    return dev


def _term_key(term) -> tuple | None:
    """What identifies an observation term's raw value within one step (its function and parameters, lists as from a
    YAML file or an override alike with tuples, each value with its type: 1 and 1.0 are other parameters), or None
    where a parameter cannot be hashed (the term is then computed in each group)."""
    key = (term.func, _frozen(term.params))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _frozen(value):
    """`value` as a hashable tree: sequences as tuples, mappings as sorted item tuples, leaves with their type."""
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        return ("map", tuple(sorted((str(k), _frozen(v)) for k, v in value.items())))
    return (type(value), value)
