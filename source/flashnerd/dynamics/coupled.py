"""Two-way coupling: a free-motion model moves the robot inside MuJoCo's constraint solver, next to analytical objects.

Per physics step, for all worlds at once (`mode="coupled"`):

    qfrc_applied[robot] = M a + c - p  M, c = qfrc_bias, p = qfrc_passive at the current state (MuJoCo's position and
                                      velocity stages, mj_step1's work, computed at the end of the previous step);
                                      a = the model's free (unconstrained) robot acceleration; the robot's actuators
                                      are disabled (the model owns actuation), so MuJoCo's smooth robot acceleration
                                      equals a
    step                              constraint solve for robot and objects together, integration, then the next
                                      state's position and velocity stages

so objects push back on the robot and the resolved state feeds the next prediction. `mode="oneway"` is the seed's
ablation: the robot follows the model's prediction kinematically (its qpos/qvel are overwritten every physics step)
and the objects react, but nothing acts back on the robot.

The worlds are one `mujoco.batch.Batch` (one MjData per world, stepped by MuJoCo's own thread pool in one C call per
physics step); M a is one batched product over worlds in numpy. The model call is one batched torch call per control
step for all worlds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import mujoco
import numpy as np
import torch
from mujoco import batch as mj_batch

from flashnerd.dynamics.learned import LearnedConfig, LearnedDynamics
from flashnerd.models import MODEL_KINDS
from flashnerd.robots import RobotSpec
from flashnerd.sim.scene import CUBE_MASS, build_scene, build_scene_spec, check_actuators, default_qpos, robot_columns
from flashnerd.types import RobotState, actuated_columns


class FreeMotion(Protocol):
    """Predicts the robot's free acceleration (N, nv_r) from its state (N, nq_r), (N, nv_r) and targets (N, nu).

    `per_substep` says whether it is asked at every physics step (an analytical oracle) or once per control step
    (a learned model predicting the whole step)."""

    per_substep: bool

    def reset(self, world_ids: torch.Tensor) -> None: ...

    def acceleration(self, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> torch.Tensor: ...


class OracleFreeMotion:
    """The analytical free acceleration of the robot alone: MuJoCo's smooth acceleration of a robot-only model under
    its PD actuators (what a perfect model of the robot would predict). Used to test the coupling exactly."""

    per_substep = True

    def __init__(self, robot: RobotSpec, num_worlds: int) -> None:
        self.model = build_scene(robot)
        self.datas = [mujoco.MjData(self.model) for _ in range(num_worlds)]

    def reset(self, world_ids: torch.Tensor) -> None:
        pass

    def acceleration(self, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> torch.Tensor:
        q, v, u = (x.detach().cpu().double().numpy() for x in (qpos, qvel, ctrl))
        out = np.empty_like(v)  # (N, nv_r)
        for w, d in enumerate(self.datas):  # test-only oracle; the learned model is one batched call
            d.qpos[:], d.qvel[:], d.ctrl[:] = q[w], v[w], u[w]
            mujoco.mj_forward(self.model, d)
            out[w] = d.qacc_smooth
        return torch.from_numpy(out)


class LearnedFreeMotion:
    """A learned model of the robot alone (fitted on free-motion data), one batched call per control step: the free
    acceleration is the predicted velocity change over the step divided by the step. The model keeps its history; the
    state it starts each step from is the resolved one (after contact), written without clearing that history."""

    per_substep = False

    def __init__(self, robot: RobotSpec, num_worlds: int, kind: str = "flashnerd", checkpoint=None,
                 device: str | torch.device = "cpu") -> None:
        self.dyn = LearnedDynamics(robot, num_worlds, device=device, config=LearnedConfig(checkpoint=checkpoint),
                                   kind=kind)

    def reset(self, world_ids: torch.Tensor) -> None:
        self.dyn.reset_history(world_ids)

    @torch.no_grad()
    def acceleration(self, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> torch.Tensor:
        dyn = self.dyn
        qvel = qvel.to(dyn.state().qvel)
        dyn.set_state(qpos.to(qvel), qvel)
        dyn.step(ctrl)
        return (dyn.state().qvel - qvel) / dyn.control_dt  # (N, nv_r)


TWO_WAY = "coupled"  # the coupling; each mode is the name of its backend
ONE_WAY = "oneway"  # the seed's ablation: the robot follows the model, nothing acts back on it
COUPLING_MODES = (TWO_WAY, ONE_WAY)
FREE_MOTION_ORACLE = "oracle"  # the analytical free motion, for exact tests of the coupling


@dataclass(frozen=True)
class CoupledConfig:
    """Options of the `coupled` and `oneway` backends."""

    free_motion: FreeMotion | str = "flashnerd"  # a learned model kind (its checkpoint below), "oracle", or an object
    checkpoint: str | Path | None = None  # the free-motion model's checkpoint (default: the shipped one)
    nthread: int | None = None  # threads stepping the worlds (default: one per core)
    full_solve: bool = False  # run every constraint-solver iteration (tolerance 0) instead of exiting early: with an
    # exact free motion, two-way coupling then reproduces MuJoCo to rounding (an early exit moves with the rounding)
    integrator: str = "euler"  # euler (the coupling is exact) or implicitfast
    cube_mass: float = CUBE_MASS  # kg
    objects: tuple[str, ...] = ("cube",)  # the scene's objects: a cube is the only one these backends simulate


class CoupledDynamics:
    """`num_worlds` worlds of a fixed-base robot and a free cube; the robot's free motion comes from `free_motion`.

    `state()` reports the robot's DOFs only (RobotState); `object_state()` the cube's pose and velocity. `scene` is
    the compiled model the worlds were built from: the batch simulates a copy made at construction, so set options
    through `CoupledConfig` (an edit of `scene` afterwards does not reach the worlds)."""

    def __init__(self, robot: RobotSpec, num_worlds: int, device: str | torch.device = "cpu", terrain: str = "flat",
                 config: CoupledConfig | None = None, mode: str = TWO_WAY) -> None:
        config = config or CoupledConfig()
        robot = robot.without_ranges()  # one robot in every world: the variant's fixed values
        free_motion, checkpoint, nthread = config.free_motion, config.checkpoint, config.nthread
        if mode not in COUPLING_MODES:
            raise ValueError(f"unknown coupling mode '{mode}'; choose one of: {', '.join(COUPLING_MODES)}")
        if robot.floating_base:
            raise ValueError(f"coupling needs a fixed-base robot; '{robot.name}' floats")
        if terrain != "flat":
            raise ValueError(f"the {mode} backend simulates a hand and a cube on flat ground, not terrain '{terrain}'")
        if tuple(config.objects) not in ((), ("cube",)):
            raise ValueError(f"the {mode} backend simulates one cube, not objects {tuple(config.objects)}")
        self.robot, self.num_worlds, self.mode = robot, num_worlds, mode
        self.device = torch.device(device)
        self.control_dt = robot.control_dt
        self.scene = self._build_model(robot, config.integrator, config.cube_mass)
        m = self.scene
        check_actuators(robot, m)
        self.nq_r, self.nv_r = robot_columns(robot, m)
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        if isinstance(free_motion, str) and free_motion not in (FREE_MOTION_ORACLE, *MODEL_KINDS):
            raise ValueError(f"unknown free-motion model '{free_motion}'; choose {FREE_MOTION_ORACLE} or a learned "
                             f"model: {', '.join(MODEL_KINDS)}")
        if free_motion == FREE_MOTION_ORACLE:
            free_motion = OracleFreeMotion(robot, num_worlds)
        elif isinstance(free_motion, str):
            free_motion = LearnedFreeMotion(robot, num_worlds, free_motion, checkpoint, self.device)
        self.free_motion = free_motion
        # The model owns actuation: MuJoCo's actuators stay off in both modes, so nothing drives the robot twice.
        m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
        if config.full_solve:
            m.opt.tolerance = 0.0
        self.qpos0 = m.qpos0.copy()  # (nq,) the whole scene's start: robot at its default pose, cube at its spawn
        self.qpos0[:self.nq_r] = self.default_qpos()
        self.nthread = max(1, min(nthread or os.cpu_count() or 1, num_worlds))
        # One MjData per world (persistent): a step continues from the position and velocity stages the last call
        # computed, and the batch reruns them for a world whose state was written since.
        self.sims = mj_batch.Batch(m, num_worlds, nthread=self.nthread, persistent=True)
        sims = self.sims
        self._sim_qpos, self._sim_qvel = sims.bind("qpos"), sims.bind("qvel")  # (N, nq), (N, nv) live state rows
        self._applied = sims.bind("qfrc_applied")  # (N, nv) state row: the model's generalized force
        self._mass, self._bias, self._passive = sims.bind("M"), sims.bind("qfrc_bias"), sims.bind("qfrc_passive")
        self._sim_qpos[:] = self.qpos0
        sims.forward(stage=mujoco.mjtStage.mjSTAGE_VEL)
        # M is stored sparse: its lower triangle, row by row (M_rownnz, M_colind). M a over the robot's DOFs is one
        # product per stored entry (the off-diagonal ones twice, mirrored) summed into rows by a fixed 0/1 matrix.
        # The objects are separate trees, so M is block-diagonal and the robot's block is all the robot needs.
        rows = np.zeros(len(m.M_colind), dtype=np.int64)  # (nnz,) row of each stored entry
        for i, (start, count) in enumerate(zip(m.M_rowadr, m.M_rownnz)):
            rows[start:start + count] = i
        cols = m.M_colind.astype(np.int64)  # (nnz,) its column
        robot = np.flatnonzero((rows < self.nv_r) & (cols < self.nv_r))  # (E,) entries of the robot's block
        mirror = robot[rows[robot] != cols[robot]]  # (E_off,) its off-diagonal entries
        self._m_entries = np.concatenate((robot, mirror))  # (E + E_off,) entry of each product
        self._m_inputs = np.concatenate((cols[robot], rows[mirror]))  # (E + E_off,) the acceleration it multiplies
        out_rows = np.concatenate((rows[robot], cols[mirror]))  # (E + E_off,) the row of M a it adds to
        self._m_sum = np.zeros((len(out_rows), self.nv_r))  # (E + E_off, nv_r)
        self._m_sum[np.arange(len(out_rows)), out_rows] = 1.0
        self._m_prod = np.zeros((num_worlds, len(out_rows)))  # (N, E + E_off) products of entries and accelerations
        self._m_acc = np.zeros((num_worlds, self.nv_r))  # (N, nv_r) M a
        self._acc = np.zeros((num_worlds, self.nv_r))  # (N, nv_r) the model's free robot acceleration
        f32 = dict(dtype=torch.float32, device=self.device)
        self._qpos = torch.zeros(num_worlds, self.nq_r, **f32)
        self._qvel = torch.zeros(num_worlds, self.nv_r, **f32)
        self._obj = torch.zeros(num_worlds, 13, **f32)  # cube pos (3), quat (4), lin vel (3), ang vel (3)
        self._torque = torch.zeros(num_worlds, self.nu, **f32)  # generalized force on each actuated joint
        self._act_dof = m.jnt_dofadr[m.actuator_trnid[:, 0]]  # (nu,) DOF of each actuator's joint
        self._state = RobotState(self._qpos, self._qvel, self._torque, torch.zeros(num_worlds, 0, **f32),
                                 floating_base=False, **actuated_columns(m, False, self.nq_r, self.nv_r, self.device))
        self._gather()

    @staticmethod
    def _build_model(robot: RobotSpec, integrator: str = "euler", cube_mass: float = CUBE_MASS) -> mujoco.MjModel:
        """The robot's scene plus a cube at its object spawn point, on `integrator` (Euler: the coupling is exact)."""
        integrators = {"euler": mujoco.mjtIntegrator.mjINT_EULER,
                       "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST}
        if integrator not in integrators:
            raise ValueError(f"unknown integrator '{integrator}'; choose euler or implicitfast")
        spec = build_scene_spec(robot, objects=("cube",), cube_mass=cube_mass)
        spec.option.integrator = integrators[integrator]
        return spec.compile()

    def default_qpos(self) -> np.ndarray:
        """The robot's default pose (its qpos columns only, as every backend reports it)."""
        return default_qpos(self.robot, self.scene)

    # --- Dynamics interface -------------------------------------------------------------------------------------

    def reset(self, world_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Write the robot state (k, nq_r), (k, nv_r) of `world_ids`; their cube returns to its spawn pose at rest."""
        self.reset_full(world_ids, self._full(qpos, self.qpos0), self._full(qvel, np.zeros(self.nv)))

    def reset_full(self, world_ids: torch.Tensor, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Write the whole state (robot and cube) of `world_ids`: qpos (k, nq), qvel (k, nv)."""
        ids = world_ids.detach().cpu().numpy().reshape(-1)
        worlds = self._worlds(ids)
        self.sims.reset(worlds, stage=mujoco.mjtStage.mjSTAGE_NONE)  # MuJoCo's defaults (warm start, time, forces)
        self._sim_qpos[ids], self._sim_qvel[ids] = qpos, qvel
        self.sims.forward(worlds, stage=mujoco.mjtStage.mjSTAGE_VEL)
        self.free_motion.reset(torch.as_tensor(ids))
        self._gather()

    def reset_objects(self, world_ids: torch.Tensor, pose: torch.Tensor, vel: torch.Tensor) -> None:
        """Place the cube of `world_ids` (k,) at pose (k, 7) with velocity (k, 6)."""
        ids = world_ids.detach().cpu().numpy().reshape(-1)
        p, v = pose.detach().cpu().double().numpy(), vel.detach().cpu().double().numpy()
        self._sim_qpos[ids, self.nq_r:self.nq_r + 7], self._sim_qvel[ids, self.nv_r:self.nv_r + 6] = p, v
        self.sims.forward(self._worlds(ids), stage=mujoco.mjtStage.mjSTAGE_VEL)
        self._gather()

    def set_qvel(self, world_ids: torch.Tensor, qvel: torch.Tensor) -> None:
        """Overwrite the robot's generalized velocity (k, nv_r) of `world_ids` (k,)."""
        ids = world_ids.detach().cpu().numpy().reshape(-1)
        self._sim_qvel[ids, :self.nv_r] = qvel.detach().cpu().double().numpy()
        self.sims.forward(self._worlds(ids), stage=mujoco.mjtStage.mjSTAGE_VEL)
        self._gather()

    def step(self, ctrl: torch.Tensor) -> None:
        """Advance every world by one control step under robot joint targets ctrl (N, nu)."""
        if self.sims is None:
            raise RuntimeError("this coupled backend was closed; build a new one to step")
        if not torch.isfinite(ctrl).all():
            raise ValueError("ctrl holds NaN or Inf; the coupled backend needs finite joint targets")
        dec = self.robot.decimation
        substep = self._substep_oneway if self.mode == ONE_WAY else self._substep_coupled
        for k in range(dec):
            if k == 0 or self.free_motion.per_substep:
                acc = self.free_motion.acceleration(self._qpos64, self._qvel64, ctrl)  # (N, nv_r)
                self._acc[:] = acc.detach().cpu().double().numpy()
            substep()
            if self.free_motion.per_substep:
                self._gather()
        self._gather()

    def state(self) -> RobotState:
        """The robot's DOFs only; valid until the next `step()`/`reset()`."""
        return self._state

    def object_state(self) -> torch.Tensor:
        """Cube pose and velocity (N, 13): position (3), quaternion wxyz (4), linear (3) and angular (3) velocity."""
        return self._obj

    def close(self) -> None:
        """Release the worlds: the batch, its threads and every view into it (a view keeps the batch alive)."""
        self.sims = self._sim_qpos = self._sim_qvel = self._applied = self._mass = self._bias = self._passive = None

    @staticmethod
    def _worlds(ids: np.ndarray) -> np.ndarray:
        """The batch's world ids for a call: sorted and unique, as `mujoco.batch` requires (writes take any order)."""
        return np.unique(ids)

    def scene_qpos(self) -> np.ndarray:
        """The whole scene's generalized positions (N, nq), robot then cube: a live view, valid until the next call."""
        return self._sim_qpos

    # --- physics ------------------------------------------------------------------------------------------------

    def _substep_coupled(self) -> None:
        """One physics step of every world, the robot driven by M a + c - p (see the module docstring)."""
        r, m_acc = self.nv_r, self._robot_mass_times(self._acc)  # (N, nv_r) M a
        applied = self._applied[:, :r]  # (N, nv_r) view of the state rows
        np.add(m_acc, self._bias[:, :r], out=applied)
        np.subtract(applied, self._passive[:, :r], out=applied)
        self.sims.step(stage=mujoco.mjtStage.mjSTAGE_VEL)  # the next state's stages, for the next substep's M, c, p

    def _robot_mass_times(self, acc: np.ndarray) -> np.ndarray:
        """M a (N, nv_r) over the robot's DOFs at the current state for accelerations acc (N, nv_r); a buffer that
        the next call overwrites."""
        np.multiply(self._mass[:, self._m_entries], acc[:, self._m_inputs], out=self._m_prod)  # (N, E + E_off)
        return np.matmul(self._m_prod, self._m_sum, out=self._m_acc)  # (N, nv_r)

    def _substep_oneway(self) -> None:
        """The robot moves along the model's free motion (velocity integrated semi-implicitly, as MuJoCo's Euler);
        contacts act on the cube, and whatever they do to the robot is overwritten."""
        h = float(self.scene.opt.timestep)
        v = self._sim_qvel[:, :self.nv_r] + h * self._acc  # (N, nv_r)
        q = self._sim_qpos[:, :self.nq_r] + h * v  # hinge and slide joints only: qpos and qvel share their layout
        self.sims.step()
        self._sim_qpos[:, :self.nq_r], self._sim_qvel[:, :self.nv_r] = q, v

    def _gather(self) -> None:
        q, v = self._sim_qpos, self._sim_qvel  # (N, nq), (N, nv)
        f = self._applied[:, self._act_dof]  # (N, nu) the model's actuation
        # The free-motion model reads the state in float64 (an exact oracle must); the RobotState is float32.
        self._qpos64 = torch.from_numpy(q[:, :self.nq_r].copy())
        self._qvel64 = torch.from_numpy(v[:, :self.nv_r].copy())
        self._qpos.copy_(self._qpos64)
        self._qvel.copy_(self._qvel64)
        self._torque.copy_(torch.from_numpy(f))
        self._obj[:, :7].copy_(torch.from_numpy(q[:, self.nq_r:self.nq_r + 7]))
        self._obj[:, 7:].copy_(torch.from_numpy(v[:, self.nv_r:self.nv_r + 6]))

    def _full(self, x: torch.Tensor, rest: np.ndarray) -> np.ndarray:
        full = np.repeat(rest[None], x.shape[0], axis=0)
        full[:, :x.shape[1]] = x.detach().cpu().double().numpy()
        return full

