"""Shared fixtures: small envs and backends (a few worlds keep the CPU suite fast)."""

from __future__ import annotations

import pytest
import torch

import flashnerd_tasks  # noqa: F401  (registers the task ids)
from flashnerd.dynamics import make_dynamics
from flashnerd.robots import get_robot

TASK = "FlashNeRD-Velocity-Flat-Anymal-C-v0"


@pytest.fixture
def anymal():
    return get_robot("anymal_c")


@pytest.fixture
def cartpole():
    return get_robot("cartpole")


@pytest.fixture
def mujoco_dyn(anymal):
    dyn = make_dynamics("mujoco", anymal, num_worlds=4)
    yield dyn
    dyn.close()


def default_ctrl(robot, n: int) -> torch.Tensor:
    """Default-pose joint targets for n worlds (n, nj)."""
    return torch.tensor(robot.default_joint_pos, dtype=torch.float32).repeat(n, 1)
