"""The `mujoco` backend: MuJoCo C stepping all worlds with its threaded `rollout` (a persistent thread pool)."""

from __future__ import annotations

import copy
import os

import mujoco
import numpy as np
import torch
from mujoco import rollout

from flashnerd.robots import RobotSpec
from flashnerd.sim.actuation import actuation_for
from flashnerd.sim.config import MujocoConfig
from flashnerd.sim.randomize import randomization_for
from flashnerd.sim.scene import build_scene, check_actuators, default_qpos, robot_columns, sensor_address
from flashnerd.types import RobotState, actuated_columns

_STATE_SPEC = mujoco.mjtState.mjSTATE_FULLPHYSICS


class MujocoDynamics:
    """N independent MuJoCo worlds of one robot; `step()` runs `robot.decimation` physics steps per world.

    The physics state of all worlds lives in one float64 array (N, nstate) that `rollout` reads and writes;
    torch views of it are refreshed into preallocated float32 buffers on `device` after every step.
    """

    def __init__(self, robot: RobotSpec, num_worlds: int, device: str | torch.device = "cpu", terrain: str = "flat",
                 config: MujocoConfig | None = None) -> None:
        config = config or MujocoConfig()
        objects, nthread = config.objects, config.nthread
        self.robot = robot
        self.num_worlds = num_worlds
        self.device = torch.device(device)
        self.control_dt = robot.control_dt
        self.scene = build_scene(robot, terrain, objects, config.cube_mass)
        m = self.scene
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        self.nq_r, self.nv_r = robot_columns(robot, m)  # the robot's leading columns; objects follow
        self._robot_qvel = slice(1 + self.nq, 1 + self.nq + self.nv_r)
        check_actuators(robot, m)
        self.nthread = max(1, min(nthread or os.cpu_count() or 1, num_worlds))
        self._roll = rollout.Rollout(nthread=self.nthread)
        self._datas = [mujoco.MjData(m) for _ in range(self.nthread)]

        # State layout of mjSTATE_FULLPHYSICS: [time, qpos, qvel, act, ...].
        self._nstate = mujoco.mj_stateSize(m, _STATE_SPEC)
        self._qpos_slice = slice(1, 1 + self.nq)
        self._qvel_slice = slice(1 + self.nq, 1 + self.nq + self.nv)
        self._state = np.zeros((num_worlds, self._nstate))  # (N, nstate)
        self._out_state = np.zeros((num_worlds, robot.decimation, self._nstate))  # (N, dec, nstate)
        self._out_sens = np.zeros((num_worlds, robot.decimation, m.nsensordata))  # (N, dec, nsens)
        self._ctrl = np.zeros((num_worlds, robot.decimation, self.nu))  # (N, dec, nu), held over the substeps
        # A variant's delay and torque-speed limit (sim/actuation.py): a history of the targets (N, H, nu), and
        # under a speed limit one rollout call per substep, the line's cut applied as a joint force (qfrc_applied).
        self._act = actuation_for(robot, m)
        self._models = [m] * num_worlds  # rollout with skip_checks takes one model reference per world
        self._act_params = None if self._act is None else self._act.params  # (nu, 10), per world under randomization
        # A variant's `randomize` ranges (sim/randomize.py): one model per world, its fields drawn at build and reset.
        self._rand = randomization_for(robot, m)
        self._offsets = None  # (N, dec, nu) each world's history slots, when each draws its delay
        if self._rand is not None:
            if self._rand.fields:  # a drawn delay or torque-speed line alone leaves the model shared
                self._models = [copy.copy(m) for _ in range(num_worlds)]
            self.draws = self._rand.start(num_worlds)  # (N, P) each world's drawn values
            self._const_data = mujoco.MjData(m)  # scratch for mj_setConst
            if self._act is not None:
                self._act_params = np.repeat(self._act.params[None], num_worlds, axis=0)  # (N, nu, 10)
                if self._act.drawn_delay:
                    self._offsets = np.repeat(self._act.offsets[None], num_worlds, axis=0)  # (N, dec, nu)
            self._redraw(np.arange(num_worlds))
        if self._act is not None:
            self._history = np.repeat(np.asarray(robot.default_joint_pos, dtype=float)[None, None],
                                      num_worlds, axis=0).repeat(self._act.history_len, axis=1)  # (N, H, nu)
            self._ctrl1 = np.zeros((num_worlds, 1, self.nu + self.nv))  # (N, 1, nu + nv) ctrl, qfrc_applied
            self._state1 = np.zeros((num_worlds, 1, self._nstate))  # (N, 1, nstate)
            self._sens1 = np.zeros((num_worlds, 1, m.nsensordata))  # (N, 1, nsens)

        # Sensor addresses: one 'contact' sensor (found, fx, fy, fz) per contact body, one torque per actuator.
        self._contact_adr = np.array([self._sensor_adr(f"{b}_contact") for b in robot.all_contact_bodies], dtype=int)
        self._torque_adr = np.array([self._sensor_adr(f"{j}_torque") for j in robot.joint_names], dtype=int)

        # Preallocated torch outputs.
        f32 = dict(dtype=torch.float32, device=self.device)
        self._qpos_t = torch.zeros(num_worlds, self.nq, **f32)
        self._qvel_t = torch.zeros(num_worlds, self.nv, **f32)
        self._torque_t = torch.zeros(num_worlds, self.nu, **f32)
        self._contact_t = torch.zeros(num_worlds, len(self._contact_adr), **f32)
        self._robot_state = RobotState(self._qpos_t[:, :self.nq_r], self._qvel_t[:, :self.nv_r], self._torque_t,
                                       self._contact_t, robot.floating_base,
                                       **actuated_columns(m, robot.floating_base, self.nq_r, self.nv_r, self.device))
        self._object_t = torch.zeros(num_worlds, 13 if objects else 0, **f32)  # (N, 13) first object's state

        # Start every world in the model's default pose, standing at the spawn height; objects at their spawn.
        self._qpos0 = m.qpos0.copy()  # (nq,)
        self._qpos0[:self.nq_r] = self.default_qpos()
        self._state[:, self._qpos_slice] = self._qpos0
        self._ctrl[:] = np.asarray(robot.default_joint_pos)
        self._refresh_torch()

    def _sensor_adr(self, name: str) -> int:
        return sensor_address(self.scene, self.robot, name)

    def default_qpos(self) -> np.ndarray:
        """The standing configuration: base at the spawn height, identity orientation, default joint angles."""
        return default_qpos(self.robot, self.scene)

    # --- Dynamics interface -------------------------------------------------------------------------------------

    def reset(self, world_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Write the robot state of `world_ids` (k,): qpos (k, nq_r), qvel (k, nv_r); their clocks restart at zero
        and their objects return to their spawn pose at rest."""
        ids = _as_index(world_ids)
        self._state[ids] = 0.0
        q = np.repeat(self._qpos0[None], len(ids), axis=0)  # (k, nq)
        q[:, :self.nq_r] = qpos.detach().cpu().double().numpy()
        self._state[ids, self._qpos_slice] = q
        self._state[ids, self._robot_qvel] = qvel.detach().cpu().double().numpy()
        if self._act is not None:  # a restarted world has held its default targets
            self._history[ids] = np.asarray(self.robot.default_joint_pos)
        if self._rand is not None:
            self._redraw(ids)
        self._refresh_torch(ids)

    def _redraw(self, ids: np.ndarray) -> None:
        """New draws of the variant's ranges for worlds `ids` (k,), written into their models (a reset, not a step:
        the loop over the reset worlds writes a few small arrays and recomputes the derived constants)."""
        values = self._rand.redraw(ids)  # field -> (k, *shape)
        for j, i in enumerate(ids if values else ()):
            model = self._models[i]
            for field, value in values.items():
                getattr(model, field)[:] = value[j]
            if self._rand.needs_set_const:
                mujoco.mj_setConst(model, self._const_data)
        if self._act is not None:
            drawn = self._rand.actuation_draws(ids)  # key -> (k,)
            self._act_params[ids] = self._act.with_fields(len(ids), values, drawn)
            if self._offsets is not None:
                self._offsets[ids] = self._act.offsets_for(drawn["delay_s"])

    def set_qvel(self, world_ids: torch.Tensor, qvel: torch.Tensor) -> None:
        """Overwrite the robot's generalized velocity (k, nv_r) of `world_ids` (k,)."""
        ids = _as_index(world_ids)
        self._state[ids, self._robot_qvel] = qvel.detach().cpu().double().numpy()
        self._refresh_torch(ids)

    def object_state(self) -> torch.Tensor:
        """The first object's pose and velocity (N, 13): position, quaternion wxyz, linear and angular velocity
        (a buffer refreshed with the state; copy to keep it)."""
        return self._object_t

    def reset_objects(self, world_ids: torch.Tensor, pose: torch.Tensor, vel: torch.Tensor) -> None:
        """Place the first object of `world_ids` (k,) at pose (k, 7) with velocity (k, 6)."""
        ids = _as_index(world_ids)
        q0, v0 = self._qpos_slice.start + self.nq_r, self._qvel_slice.start + self.nv_r
        self._state[ids, q0:q0 + 7] = pose.detach().cpu().double().numpy()
        self._state[ids, v0:v0 + 6] = vel.detach().cpu().double().numpy()
        self._refresh_torch(ids)

    def step(self, ctrl: torch.Tensor) -> None:
        """Advance all worlds by one control period under joint position targets ctrl (N, nu)."""
        target = ctrl.detach().cpu().numpy()  # (N, nu)
        if self._act is None:
            self._ctrl[:] = target[:, None, :]
        else:
            self._history[:, :-1] = self._history[:, 1:]  # (N, H, nu) oldest first
            self._history[:, -1] = target
            self._ctrl[:] = self._act.substep_targets(self._history, self._offsets)  # (N, dec, nu) each substep's
        if self._act is not None and self._act.speed_limited:
            self._speed_limited_substeps()
        else:
            self._roll.rollout(
                self._models, self._datas, self._state, self._ctrl, nstep=self.robot.decimation,
                state=self._out_state, sensordata=self._out_sens, skip_checks=True,
            )
        self._state[:] = self._out_state[:, -1]  # (N, nstate)
        self._refresh_torch(sensors=True)

    def _speed_limited_substeps(self) -> None:
        """One rollout call per physics substep, each with the line's cut of the actuator force (from the state at
        its start) applied to the joints; the torque outputs report the force on the line."""
        act, spec = self._act, mujoco.mjtState.mjSTATE_CTRL | mujoco.mjtState.mjSTATE_QFRC_APPLIED
        for k in range(self.robot.decimation):
            cut = act.speed_limit(self._ctrl[:, k], self._state[:, self._qpos_slice], self._state[:, self._qvel_slice],
                                  self._act_params)
            self._ctrl1[:, 0, :self.nu] = self._ctrl[:, k]
            self._ctrl1[:, 0, self.nu + act.dadr] = act.params[:, 0] * cut  # (N, nu) gear x force: joint torque
            self._roll.rollout(self._models, self._datas, self._state, self._ctrl1, control_spec=spec, nstep=1,
                               state=self._state1, sensordata=self._sens1, skip_checks=True)
            self._sens1[:, 0, self._torque_adr] += cut  # the actuatorfrc sensors see MuJoCo's force alone
            self._out_state[:, k] = self._state1[:, 0]
            self._out_sens[:, k] = self._sens1[:, 0]
            self._state[:] = self._state1[:, 0]

    def state(self) -> RobotState:
        """Views of the current state; valid until the next `step()`/`reset()`."""
        return self._robot_state

    @property
    def plain_step(self) -> bool:
        """True when a control step is MuJoCo's own `mj_step` under the targets as `ctrl` on the scene's model: no
        actuation delay or torque-speed line, no per-world randomized models (a variant adds those)."""
        return self._act is None and self._rand is None

    def physics_state(self) -> np.ndarray:
        """Every world's whole physics state (N, mj_stateSize(scene, mjSTATE_FULLPHYSICS)), robot and objects, as
        `mj_getState` writes it: a live view (read it, do not write it), valid until the next step or reset."""
        return self._state

    # --- helpers ------------------------------------------------------------------------------------------------

    def _refresh_torch(self, ids: np.ndarray | slice = slice(None), sensors: bool = False) -> None:
        self._qpos_t[ids] = torch.from_numpy(self._state[ids, self._qpos_slice]).to(self._qpos_t)
        self._qvel_t[ids] = torch.from_numpy(self._state[ids, self._qvel_slice]).to(self._qvel_t)
        if self._object_t.shape[1]:
            self._object_t[ids, :7] = self._qpos_t[ids, self.nq_r:self.nq_r + 7]
            self._object_t[ids, 7:] = self._qvel_t[ids, self.nv_r:self.nv_r + 6]
        if sensors:
            force = self._out_sens[:, :, self._contact_adr[:, None] + np.arange(1, 4)]  # (N, dec, nb, 3)
            self._contact_t.copy_(torch.from_numpy(np.linalg.norm(force, axis=-1).max(axis=1)))  # (N, nb)
            self._torque_t.copy_(torch.from_numpy(self._out_sens[:, -1, self._torque_adr]))  # (N, nu)
        else:
            self._contact_t[ids] = 0.0
            self._torque_t[ids] = 0.0

    def close(self) -> None:
        """Stop the rollout thread pool."""
        self._roll.close()

    def __del__(self) -> None:
        try:
            self._roll.close()
        except Exception:
            pass


def _as_index(world_ids: torch.Tensor) -> np.ndarray:
    return world_ids.detach().cpu().numpy().astype(np.int64).reshape(-1)
