"""How hard a scene object pushes back on the robot, measured in MuJoCo: the generalized force on the robot's DOFs
from its contacts with the object, against the robot's own inertial force (M qacc).

One-way coupling (the `oneway` backend) moves the robot as if the object were not there. That is harmless where the
object's reaction on the robot is small next to what the robot's actuators spend on moving the robot itself, and it
misleads a policy where the reaction is comparable (the seed's Fig. 8). `ReactionMeter` measures the two along any
policy's motion: it wraps an env's `mujoco` backend and, at every control step, replays each world's step on its own
`MjData` from the backend's exact physics state (so the replica is the env's world, checked by `replica_error`),
reading the contact forces and accelerations of every physics substep. The replica starts each step from a zero warm
start, as every rollout call of the backend does (the physics state carries none), and matches its world exactly.
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from flashnerd.sim.mujoco_backend import MujocoDynamics

_CONTACT_ROWS = frozenset(int(t) for t in (mujoco.mjtConstraint.mjCNSTR_CONTACT_FRICTIONLESS,
                                           mujoco.mjtConstraint.mjCNSTR_CONTACT_PYRAMIDAL,
                                           mujoco.mjtConstraint.mjCNSTR_CONTACT_ELLIPTIC))
_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS


def object_reaction(model: mujoco.MjModel, data: mujoco.MjData, body: int, nv_r: int) -> tuple[np.ndarray, np.ndarray]:
    """(reaction, inertial), each (nv_r,), of the step `data` last took: J^T f over the constraint rows of the
    contacts that touch `body`, and M qacc, on the robot's first nv_r DOFs."""
    rows = np.zeros(data.nefc)  # (nefc,) 1 on the rows of the object's contacts
    for r in range(data.nefc):
        if int(data.efc_type[r]) in _CONTACT_ROWS:
            contact = data.contact[data.efc_id[r]]
            if body in (model.geom_bodyid[contact.geom1], model.geom_bodyid[contact.geom2]):
                rows[r] = 1.0
    reaction, inertial = np.zeros(model.nv), np.zeros(model.nv)
    mujoco.mj_mulJacTVec(model, data, reaction, data.efc_force * rows)  # (nv,)
    mujoco.mj_mulM(model, data, inertial, data.qacc)  # (nv,)
    return reaction[:nv_r], inertial[:nv_r]


def object_body(model: mujoco.MjModel, nv_r: int) -> int:
    """The body of the scene's object (the last free joint whose DOFs follow the robot's first nv_r: objects are added
    after the robot), found by structure since the robot may own a body named like the object; -1 when none."""
    free = [j for j in range(model.njnt)
            if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE and model.jnt_dofadr[j] >= nv_r]
    return int(model.jnt_bodyid[free[-1]]) if free else -1


class ReactionMeter:
    """A `mujoco` backend that also measures, in its first `worlds` worlds, the object's reaction on the robot and
    the robot's inertial force at every physics substep (the object: body `body`, by default the scene's free object).
    Everything else is the wrapped backend's."""

    def __init__(self, dyn: MujocoDynamics, worlds: int, body: str | None = None) -> None:
        if not isinstance(dyn, MujocoDynamics):
            raise ValueError(f"the reaction is measured in MuJoCo; the env runs on '{type(dyn).__name__}': run it "
                             "with --dynamics mujoco")
        if not dyn.plain_step:
            raise ValueError("the reaction meter replays MuJoCo's plain step, and this robot variant steps otherwise "
                             "(actuation delay, a torque-speed line or randomized ranges); drop --robot_variant")
        self.inner, self.model = dyn, dyn.scene
        if body is None:
            self.body = object_body(self.model, dyn.nv_r)
            if self.body < 0:
                raise ValueError("the scene has no free object after the robot to measure the reaction of")
        else:
            self.body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, body)
            if self.body < 0:
                raise ValueError(f"the scene has no body '{body}' to measure the reaction of")
        self.datas = [mujoco.MjData(self.model) for _ in range(min(worlds, dyn.num_worlds))]
        self.reactions: list[np.ndarray] = []  # (nv_r,) per measured substep
        self.inertials: list[np.ndarray] = []
        self.replica_error = 0.0  # largest difference between a replica's physics state and its world's after a step
        self._replica_state = np.zeros(dyn.physics_state().shape[1])  # (nstate,)

    def __getattr__(self, name: str) -> object:
        if name == "inner":  # not set yet (copy, pickle): no recursion through the lookup below
            raise AttributeError(name)
        return getattr(self.inner, name)

    def step(self, ctrl: torch.Tensor) -> None:
        """Replay each measured world's step from the backend's physics state, then step the backend itself."""
        target = ctrl.detach().cpu().double().numpy()  # (N, nu)
        start = self.inner.physics_state()
        for w, d in enumerate(self.datas):
            mujoco.mj_setState(self.model, d, start[w], _FULL)
            d.qacc_warmstart[:] = 0.0  # as each rollout call of the backend starts (the state carries no warm start)
            d.ctrl[:] = target[w]
            for _ in range(self.inner.robot.decimation):
                mujoco.mj_step(self.model, d)
                reaction, inertial = object_reaction(self.model, d, self.body, self.inner.nv_r)
                self.reactions.append(reaction)
                self.inertials.append(inertial)
        self.inner.step(ctrl)
        after = self.inner.physics_state()
        for w, d in enumerate(self.datas):
            mujoco.mj_getState(self.model, d, self._replica_state, _FULL)
            self.replica_error = max(self.replica_error, float(np.abs(self._replica_state - after[w]).max()))

    def summary(self) -> dict:
        """RMS over substeps and the robot's DOFs of the reaction and the inertial force, and their ratio."""
        rms = lambda x: float(np.sqrt(np.mean(np.square(x)))) if x else 0.0  # noqa: E731
        out = {"reaction_rms": rms(self.reactions), "inertial_rms": rms(self.inertials),
               "substeps": len(self.reactions), "replica_error": self.replica_error}
        out["ratio"] = out["reaction_rms"] / out["inertial_rms"] if out["inertial_rms"] > 0 else None
        return out
