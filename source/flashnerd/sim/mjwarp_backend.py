"""The `mjwarp` backend: MuJoCo Warp stepping all worlds as one batch, on a CUDA device or (slowly) on the CPU.

The same MJCF as the `mujoco` backend is compiled by MuJoCo and moved to the device with `mujoco_warp.put_model`.
The state lives in Warp arrays; `state()` returns zero-copy torch views of them (`wp.to_torch`), and `reset()`
writes through those views, so no tensor crosses between host and device per step. On CUDA one control step
(`decimation` physics steps plus the contact-force reduction) is captured once as a CUDA graph and replayed.
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch
import warp as wp

from flashnerd.robots import RobotSpec
from flashnerd.sim.actuation import actuation_for
from flashnerd.sim.config import MjwarpConfig
from flashnerd.sim.randomize import randomization_for
from flashnerd.sim.scene import build_scene, check_actuators, default_qpos, robot_columns, sensor_address
from flashnerd.sim.terrain import terrain_height, terrain_heightfield
from flashnerd.types import RobotState, actuated_columns

try:
    import mujoco_warp as mjw
except ImportError as err:  # pragma: no cover - mujoco-warp is an install requirement
    raise ImportError("the mjwarp backend needs mujoco-warp: pip install mujoco-warp warp-lang") from err

wp.config.quiet = True  # Warp's kernel-load lines would mix into the JSON that commands print on stdout


@wp.kernel
def _max_contact_force(
    sensordata: wp.array2d(dtype=float),  # (N, nsensordata)
    contact_adr: wp.array(dtype=int),  # (nb,) address of each body's contact sensor: found, fx, fy, fz
    out: wp.array2d(dtype=float),  # (N, nb) running maximum of the force norm over the control step
):
    world, body = wp.tid()
    a = contact_adr[body]
    force = wp.vec3(sensordata[world, a + 1], sensordata[world, a + 2], sensordata[world, a + 3])
    out[world, body] = wp.max(out[world, body], wp.length(force))


@wp.kernel
def _speed_limit(
    qpos: wp.array2d(dtype=float),  # (N, nq)
    qvel: wp.array2d(dtype=float),  # (N, nv)
    target: wp.array2d(dtype=float),  # (N, nu) what this substep's actuators see
    qadr: wp.array(dtype=int),  # (nu,) qpos address of each actuated joint
    dadr: wp.array(dtype=int),  # (nu,) qvel address
    prm: wp.array3d(dtype=float),  # (N, nu, 10) gear, gain, bias0-2, force lo/hi, ctrl lo/hi, no-load speed
    ctrl: wp.array2d(dtype=float),  # (N, nu) out: the target
    qfrc_applied: wp.array2d(dtype=float),  # (N, nv) out: the line's cut as a joint force
    cut: wp.array2d(dtype=float),  # (N, nu) out: the cut in actuator-force units
):
    # Actuation.speed_limit (sim/actuation.py), one actuator of one world per thread
    world, a = wp.tid()
    ctrl[world, a] = target[world, a]
    c = wp.float32(0.0)  # a dynamic variable: Warp needs its type before the branch assigns it
    if not wp.isinf(prm[world, a, 9]):
        gear, gain = prm[world, a, 0], prm[world, a, 1]
        qd = qvel[world, dadr[a]]
        u = wp.clamp(target[world, a], prm[world, a, 7], prm[world, a, 8])
        q = qpos[world, qadr[a]]
        force = gain * u + prm[world, a, 2] + prm[world, a, 3] * gear * q + prm[world, a, 4] * gear * qd
        lo, hi = prm[world, a, 5], prm[world, a, 6]
        applied = wp.clamp(force, lo, hi)
        room = wp.clamp(1.0 - wp.abs(qd) / prm[world, a, 9], 0.0, 1.0)
        c = wp.clamp(applied, lo * room, hi * room) - applied
    cut[world, a] = c
    qfrc_applied[world, dadr[a]] = prm[world, a, 0] * c


class MjwarpDynamics:
    """N worlds of one robot in MuJoCo Warp; `step()` runs `robot.decimation` physics steps in every world.

    Contact and constraint buffers are sized per world (`nconmax` contacts, `njmax` constraint rows); a world
    that needs more loses the excess rows, which `overflow()` reports.
    """

    def __init__(self, robot: RobotSpec, num_worlds: int, device: str | torch.device = "cpu", terrain: str = "flat",
                 config: MjwarpConfig | None = None) -> None:
        config = config or MjwarpConfig()
        objects, nconmax, njmax, graph = config.objects, config.nconmax, config.njmax, config.graph
        self.robot = robot
        self.num_worlds = num_worlds
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.control_dt = robot.control_dt
        self.scene = build_scene(robot, terrain, objects, config.cube_mass)
        m = self.scene
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        self.nq_r, self.nv_r = robot_columns(robot, m)  # the robot's leading columns; objects follow
        check_actuators(robot, m)
        self.wp_device = wp.get_device(str(self.device))
        if nconmax is None:
            nconmax = 48 if terrain_heightfield(terrain) is None else 128
        # A pyramidal contact of condim 3 takes 4 constraint rows; joint limits take one row each.
        njmax = njmax if njmax is not None else 4 * nconmax + 2 * self.nv

        data0 = mujoco.MjData(m)
        data0.qpos[:self.nq_r] = self.default_qpos()
        if robot.floating_base:  # standing on the terrain, not inside it (the contact buffers are sized from here)
            data0.qpos[2] += float(terrain_height(terrain, data0.qpos[None, 0:2])[0])
        data0.ctrl[:] = robot.default_joint_pos
        mujoco.mj_forward(m, data0)
        self._act = actuation_for(robot, m)  # a variant's delay and torque-speed limit (sim/actuation.py)
        # A variant's `randomize` ranges (sim/randomize.py): the fields it draws, and the constants MuJoCo derives
        # from mass, inertia and armature, get one row per world (MuJoCo Warp's batched model fields).
        self._rand = randomization_for(robot, m)
        batched = {}
        if self._rand is not None:
            derived = ("body_subtreemass", "body_invweight0", "dof_invweight0", "actuator_acc0") + (
                ("tendon_invweight0",) if m.ntendon else ())
            batched = {f: num_worlds for f in self._rand.fields + (derived if self._rand.needs_set_const else ())}
        with wp.ScopedDevice(self.wp_device):
            self._m = mjw.put_model(m, batch_sizes=batched)
            self._d = mjw.put_data(m, data0, nworld=num_worlds, nconmax=nconmax, njmax=njmax)
            self._contact_adr = wp.array(
                [self._sensor_adr(f"{b}_contact") for b in robot.all_contact_bodies], dtype=int)
            self._contact_max = wp.zeros((num_worlds, len(robot.all_contact_bodies)), dtype=float)
        self.nconmax, self.njmax = nconmax, njmax

        # Zero-copy torch views of the Warp state.
        d = self._d
        self._qpos_t = wp.to_torch(d.qpos)  # (N, nq)
        self._qvel_t = wp.to_torch(d.qvel)  # (N, nv)
        self._ctrl_t = wp.to_torch(d.ctrl)  # (N, nu)
        self._time_t = wp.to_torch(d.time)  # (N,)
        self._warmstart_t = wp.to_torch(d.qacc_warmstart)  # (N, nv)
        self._sens_t = wp.to_torch(d.sensordata)  # (N, nsensordata)
        self._contact_t = wp.to_torch(self._contact_max)  # (N, nb)
        torque_adr = [self._sensor_adr(f"{j}_torque") for j in robot.joint_names]
        self._torque_adr = torch.tensor(torque_adr, dtype=torch.long, device=self.device)  # (nu,)
        self._torque_t = torch.zeros(num_worlds, self.nu, dtype=torch.float32, device=self.device)
        self._robot_state = RobotState(self._qpos_t[:, :self.nq_r], self._qvel_t[:, :self.nv_r], self._torque_t,
                                       self._contact_t, robot.floating_base,
                                       **actuated_columns(self.scene, robot.floating_base, self.nq_r, self.nv_r,
                                                          self.device))
        self._object_t = torch.zeros(num_worlds, 13 if objects else 0, dtype=torch.float32,
                                     device=self.device)  # (N, 13) first object's state
        self._refresh_objects()
        if self._act is not None:
            self._init_actuation()
        self._qpos0 = torch.as_tensor(data0.qpos, dtype=torch.float32, device=self.device)  # (nq,) objects' spawn
        if self._rand is not None:
            self.draws = self._rand.start(num_worlds)  # (N, P) each world's drawn values
            self._fields_t = {f: wp.to_torch(getattr(self._m, f)) for f in self._rand.fields}  # (N, *shape) views
            self._redraw(torch.arange(num_worlds, device=self.device))

        self._graph = None
        use_graph = graph if graph is not None else self.wp_device.is_cuda
        if use_graph:
            if not self.wp_device.is_cuda:
                raise ValueError("graph=True needs a CUDA device; CUDA graphs do not exist on the CPU")
            self._capture()

    def _sensor_adr(self, name: str) -> int:
        return sensor_address(self.scene, self.robot, name)

    def default_qpos(self) -> np.ndarray:
        """The standing configuration: base at the spawn height, identity orientation, default joint angles."""
        return default_qpos(self.robot, self.scene)

    # --- Dynamics interface -------------------------------------------------------------------------------------

    def reset(self, world_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Write the robot state of `world_ids` (k,): qpos (k, nq_r), qvel (k, nv_r); their objects return to their
        spawn pose at rest, their clocks and solver warm starts restart at zero, and their contact and torque outputs
        read zero until their next step."""
        ids = world_ids.to(self.device, torch.long)
        self._qpos_t[ids] = self._qpos0
        self._qpos_t[ids, :self.nq_r] = qpos.to(self._qpos_t)
        self._qvel_t[ids] = 0.0
        self._qvel_t[ids, :self.nv_r] = qvel.to(self._qvel_t)
        self._time_t[ids] = 0.0
        self._warmstart_t[ids] = 0.0
        self._contact_t[ids] = 0.0
        self._torque_t[ids] = 0.0
        if self._act is not None:  # a restarted world has held its default targets
            self._history[ids] = self._default_target
        if self._rand is not None:
            self._redraw(ids)
        self._refresh_objects()

    def _redraw(self, ids: torch.Tensor) -> None:
        """New draws of the variant's ranges for worlds `ids` (k,), written into their rows of the batched model
        fields, then the derived constants recomputed (MuJoCo Warp's `set_const`, all worlds at once)."""
        host_ids = ids.cpu().numpy()
        values = self._rand.redraw(host_ids)  # field -> (k, *shape)
        for field, value in values.items():
            view = self._fields_t[field]
            view[ids] = torch.as_tensor(value, dtype=view.dtype).to(self.device).reshape(len(host_ids), *view.shape[1:])
        if self._act is not None:
            drawn = self._rand.actuation_draws(host_ids)  # key -> (k,)
            params = self._act.with_fields(len(host_ids), values, drawn)  # (k, nu, 10)
            self._act_prm_t[ids] = torch.as_tensor(params, dtype=torch.float32).to(self.device)
            if self._act.drawn_delay:
                self._gather_idx[ids] = torch.as_tensor(self._act.offsets_for(drawn["delay_s"])).to(self._gather_idx)
        if self._rand.needs_set_const:
            with self._scope():  # ordered with torch's writes above, as the control step is
                mjw.set_const(self._m, self._d, groups=mjw.SetConstGroup.FIXED | mjw.SetConstGroup.INERT0)

    def set_qvel(self, world_ids: torch.Tensor, qvel: torch.Tensor) -> None:
        """Overwrite the robot's generalized velocity (k, nv_r) of `world_ids` (k,)."""
        self._qvel_t[world_ids.to(self.device, torch.long), :self.nv_r] = qvel.to(self._qvel_t)

    def object_state(self) -> torch.Tensor:
        """The first object's pose and velocity (N, 13): position, quaternion wxyz, linear and angular velocity
        (a buffer refreshed with the state; copy to keep it)."""
        return self._object_t

    def _refresh_objects(self) -> None:
        if self._object_t.shape[1]:
            self._object_t[:, :7] = self._qpos_t[:, self.nq_r:self.nq_r + 7]
            self._object_t[:, 7:] = self._qvel_t[:, self.nv_r:self.nv_r + 6]

    def reset_objects(self, world_ids: torch.Tensor, pose: torch.Tensor, vel: torch.Tensor) -> None:
        """Place the first object of `world_ids` (k,) at pose (k, 7) with velocity (k, 6)."""
        ids = world_ids.to(self.device, torch.long)
        self._qpos_t[ids, self.nq_r:self.nq_r + 7] = pose.to(self._qpos_t)
        self._qvel_t[ids, self.nv_r:self.nv_r + 6] = vel.to(self._qvel_t)
        self._refresh_objects()

    def step(self, ctrl: torch.Tensor) -> None:
        """Advance all worlds by one control period under joint position targets ctrl (N, nu)."""
        if self._act is None:
            self._ctrl_t.copy_(ctrl)
        else:
            for i in range(self._history.shape[1] - 1):  # (N, H, nu) oldest first; in place, no allocation
                self._history[:, i].copy_(self._history[:, i + 1])
            self._history[:, -1].copy_(ctrl)
            torch.gather(self._history, 1, self._gather_idx, out=self._gathered)  # (N, dec, nu) each substep's
            self._substep_target.copy_(self._gathered.transpose(0, 1))  # (dec, N, nu)
        if self._graph is not None:
            wp.capture_launch(self._graph, stream=self._stream())
        else:
            self._control_step()
        torch.index_select(self._sens_t, 1, self._torque_adr, out=self._torque_t)  # (N, nu) last substep's torque
        if self._act is not None and self._act.speed_limited:
            self._torque_t.add_(self._cut_t)  # the actuatorfrc sensors see MuJoCo's force alone
        self._refresh_objects()

    def state(self) -> RobotState:
        """Zero-copy views of the current state; valid until the next `step()`/`reset()`."""
        return self._robot_state

    def overflow(self) -> dict[str, int]:
        """Contacts and constraint rows requested beyond the buffers at the last step (0 when everything fit)."""
        nacon = int(self._d.nacon.numpy()[0])
        return {"contacts": max(0, nacon - self.nconmax * self.num_worlds),
                "constraints": max(0, int(self._d.nefc.numpy().max()) - self.njmax)}

    def close(self) -> None:
        """Release the CUDA graph (the Warp arrays are freed with the object)."""
        self._graph = None

    # --- helpers ------------------------------------------------------------------------------------------------

    def _stream(self):
        return wp.stream_from_torch(torch.cuda.current_stream(self.device)) if self.wp_device.is_cuda else None

    def _scope(self):
        """On CUDA, launch on torch's stream, so torch's writes before and reads after are ordered with the kernels."""
        return wp.ScopedStream(self._stream()) if self.wp_device.is_cuda else wp.ScopedDevice(self.wp_device)

    def _control_step(self) -> None:
        """`decimation` physics steps and the running maximum of each contact body's force over them."""
        with self._scope():
            self._contact_max.zero_()
            for k in range(self.robot.decimation):
                if self._act is not None:
                    self._actuate(k)
                mjw.step(self._m, self._d)
                wp.launch(_max_contact_force, dim=self._contact_max.shape,
                          inputs=[self._d.sensordata, self._contact_adr], outputs=[self._contact_max])

    def _init_actuation(self) -> None:
        act, n = self._act, self.num_worlds
        f32 = dict(dtype=torch.float32, device=self.device)
        self._default_target = torch.tensor(self.robot.default_joint_pos, **f32)  # (nu,)
        self._history = self._default_target.repeat(n, act.history_len, 1)  # (N, H, nu)
        self._gather_idx = torch.as_tensor(act.offsets, dtype=torch.long, device=self.device).expand(
            n, *act.offsets.shape)  # (N, dec, nu) history slot of each substep's control
        if act.drawn_delay:  # each world's own slots, written at its draws
            self._gather_idx = self._gather_idx.clone()
        self._gathered = torch.zeros(n, *act.offsets.shape, **f32)  # (N, dec, nu)
        self._substep_target = torch.zeros(act.offsets.shape[0], n, self.nu, **f32)  # (dec, N, nu)
        with wp.ScopedDevice(self.wp_device):
            self._substep_target_wp = wp.from_torch(self._substep_target)  # (dec, N, nu) zero-copy
            self._act_qadr = wp.array(act.qadr, dtype=int)
            self._act_dadr = wp.array(act.dadr, dtype=int)
            # (N, nu, 10) sim/actuation.py PARAMS, per world (a randomized variant draws some of them)
            self._act_prm = wp.array(np.repeat(act.params[None], n, axis=0).astype(np.float32), dtype=float)
            self._cut = wp.zeros((n, self.nu), dtype=float)  # (N, nu) the line's cut at the last substep
        self._cut_t = wp.to_torch(self._cut)
        self._act_prm_t = wp.to_torch(self._act_prm)  # (N, nu, 10)

    def _actuate(self, k: int) -> None:
        """Write substep `k`'s control (its delayed target) and, under a speed limit, the line's cut of the actuator
        force as an applied joint force."""
        target = self._substep_target_wp[k]  # (N, nu)
        if self._act.speed_limited:
            wp.launch(_speed_limit, dim=(self.num_worlds, self.nu),
                      inputs=[self._d.qpos, self._d.qvel, target, self._act_qadr, self._act_dadr, self._act_prm],
                      outputs=[self._d.ctrl, self._d.qfrc_applied, self._cut])
        else:
            wp.copy(self._d.ctrl, target)

    def _capture(self) -> None:
        saved = [t.clone() for t in (self._qpos_t, self._qvel_t, self._time_t, self._warmstart_t)]
        self._control_step()  # load every kernel before capture (compilation cannot be captured)
        for t, s in zip((self._qpos_t, self._qvel_t, self._time_t, self._warmstart_t), saved):
            t.copy_(s)  # the warm-up step leaves no trace in the state
        with wp.ScopedCapture(device=self.wp_device, stream=self._stream()) as capture:
            self._control_step()
        self._graph = capture.graph
