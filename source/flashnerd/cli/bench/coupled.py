"""`flashnerd bench coupled`: control steps per second of the coupled backends against plain MuJoCo on the same
hand-and-cube scene (JSON)."""

from __future__ import annotations

import argparse
import json
import os
import time

import mujoco
import numpy as np
import torch
from mujoco import rollout

from flashnerd.cli.common import check_positive
from flashnerd.dynamics import make_dynamics
from flashnerd.dynamics.coupled import COUPLING_MODES, FREE_MOTION_ORACLE, CoupledDynamics, OracleFreeMotion
from flashnerd.models import MODEL_KINDS
from flashnerd.robots import get_robot
from flashnerd.utils.machine import describe_machine


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("coupled", help="control steps per second of the coupled/oneway backends vs plain MuJoCo "
                                        "on the same hand-and-cube scene")
    p.add_argument("--robot", default="allegro", help="fixed-base robot whose scene gets a cube")
    p.add_argument("--num_worlds", type=int, default=256, help="parallel worlds")
    p.add_argument("--steps", type=int, default=20, help="timed control steps")
    p.add_argument("--free_motion", default="flashnerd",
                   help=f"robot model: a learned kind ({', '.join(MODEL_KINDS)}; shipped checkpoint) or "
                        f"'{FREE_MOTION_ORACLE}'")
    p.add_argument("--nthread", type=int, default=None, help="threads of every backend (default: all cores)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Env-steps per second of `coupled`, `oneway` and MuJoCo's threaded rollout on one scene (JSON)."""
    check_positive("num_worlds", args.num_worlds)
    check_positive("steps", args.steps)
    robot = get_robot(args.robot)
    n, dec = args.num_worlds, robot.decimation
    ctrl = torch.tensor(robot.default_joint_pos).repeat(n, 1)  # (N, nu)
    out = {"robot": robot.name, "num_worlds": n, "steps": args.steps, "free_motion": args.free_motion,
           "threads": args.nthread or os.cpu_count(), "machine": describe_machine()}
    for mode in COUPLING_MODES:
        motion = OracleFreeMotion(robot, n) if args.free_motion == FREE_MOTION_ORACLE else args.free_motion
        dyn = make_dynamics(mode, robot, n, free_motion=motion, nthread=args.nthread)
        dyn.step(ctrl)  # warm-up
        start = time.perf_counter()
        for _ in range(args.steps):
            dyn.step(ctrl)
        out[f"{mode}_env_steps_per_s"] = round(n * args.steps / (time.perf_counter() - start), 1)
        dyn.close()
    # Plain MuJoCo on the same scene (actuators on), all worlds in one threaded rollout per control step.
    model = CoupledDynamics._build_model(robot, "euler")
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.zeros((n, mujoco.mj_stateSize(model, spec)))
    data = mujoco.MjData(model)
    data.qpos[:] = dyn.qpos0  # the coupled runs' start: robot at its default pose, cube at its spawn
    mujoco.mj_getState(model, data, state[0], spec)
    state[:] = state[0]
    controls = np.repeat(ctrl.numpy()[:, None, :], dec, axis=1).astype(np.float64)  # (N, dec, nu)
    nthread = args.nthread or os.cpu_count() or 1
    with rollout.Rollout(nthread=nthread) as roll:
        datas = [mujoco.MjData(model) for _ in range(nthread)]
        start = None
        for step in range(args.steps + 1):
            if step == 1:
                start = time.perf_counter()  # the first call (thread-pool start) is the warm-up
            states, _ = roll.rollout([model] * n, datas, state, controls, nstep=dec)
            state[:] = states[:, -1]
    out["mujoco_env_steps_per_s"] = round(n * args.steps / (time.perf_counter() - start), 1)
    out["coupled_vs_mujoco"] = round(out["coupled_env_steps_per_s"] / out["mujoco_env_steps_per_s"], 3)
    print(json.dumps(out))
    return out
