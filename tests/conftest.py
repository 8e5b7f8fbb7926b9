"""Shared fixtures: small envs and backends (a few worlds keep the CPU suite fast)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch

import flashnerd_tasks  # noqa: F401  (registers the task ids)
from flashnerd.data.record import ExplorationSource
from flashnerd.dynamics import make_dynamics
from flashnerd.robots import get_robot

TASK = "FlashNeRD-Velocity-Flat-Anymal-C-v0"
HOUND = Path(__file__).parent / "assets" / "hound"


def grouped_hound(folder: Path) -> Path:
    """The hound with each foot sphere in an unnamed body of its own welded below its calf (a user's grouping), as a
    spec file that gives only `mjcf:`; returns the spec file's path."""
    shutil.copytree(HOUND / "meshes", folder / "meshes")
    xml = (HOUND / "hound.xml").read_text().replace('model="hound"', 'model="grouped"')
    for leg in ("FL", "FR", "RL", "RR"):
        xml = xml.replace(f'<geom name="{leg}" class="foot" pos="0 0 -0.2"/>',
                          f'<body pos="0 0 -0.1"><geom name="{leg}" class="foot" pos="0 0 -0.1"/></body>')
    (folder / "robot.xml").write_text(xml)
    (folder / "robot.yaml").write_text("mjcf: robot.xml\n")
    return folder / "robot.yaml"


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


@pytest.fixture
def short_episodes(monkeypatch):
    """`short_episodes(module, ...)`: the env configs those command modules build (through their `task_cfgs` and
    `play_variant`) get episodes of `seconds`, so a pipeline test's trainings and evaluations run short episodes
    instead of the task's 20 s ones (such tests check the stages and the files, not the returns)."""

    def shorten(*modules, seconds: float = 1.0) -> None:
        for module in modules:
            def short_cfgs(*args, _task_cfgs=module.task_cfgs, **kwargs):
                env_cfg, agent_cfg = _task_cfgs(*args, **kwargs)
                return dataclasses.replace(env_cfg, episode_length_s=seconds), agent_cfg

            monkeypatch.setattr(module, "task_cfgs", short_cfgs)
            if hasattr(module, "play_variant"):  # the evaluation config of a task with a -Play- variant
                def short_play(task, env_cfg, _play_variant=module.play_variant):
                    play, cfg = _play_variant(task, env_cfg)
                    return play, dataclasses.replace(cfg, episode_length_s=seconds)

                monkeypatch.setattr(module, "play_variant", short_play)

    return shorten


def stopping_source(robot, num_worlds: int, at_batch: int):
    """An exploration source whose recording is stopped (Ctrl-C) as its batch `at_batch` (1-based) starts: the
    recorder keeps every batch before it in `<out>.parts/`."""

    class StoppingSource(ExplorationSource):
        calls = 0

        def start_trajectory(self) -> None:
            self.calls += 1
            if self.calls == at_batch:
                raise KeyboardInterrupt
            super().start_trajectory()

    return StoppingSource(robot, num_worlds, torch.Generator())


def record_nominal_and_worn(root, nominal_worlds: int, worn_worlds: int, steps: int) -> None:
    """Exploration data of the nominal ANYmal-C (`root`/sim.h5, seed 1) and of its worn variant (`root`/worn.h5, seed
    2: kp 0.75x, torque limits 0.7x, heavier, more joint friction), in 20-step trajectories."""
    from flashnerd.data.record import record
    from flashnerd.robots.variant import load_variant

    nominal = get_robot("anymal_c")
    worn = nominal.with_variant(load_variant("variants/anymal_c_worn.yaml"))
    record(nominal, num_worlds=nominal_worlds, steps=steps, out=root / "sim.h5", traj_len=20, seed=1, progress=False)
    record(worn, num_worlds=worn_worlds, steps=steps, out=root / "worn.h5", traj_len=20, seed=2, progress=False)


@pytest.fixture(scope="session")
def worn_logs(tmp_path_factory):
    """One recording of the worn variant (3 worlds x 60 steps, seed 3) as a dataset (ref.h5) and as the logs the
    stand-in robot writes: a Parquet log (log.parquet) and a ROS 2 bag (log.mcap)."""
    from flashnerd.cli.main import main

    root = tmp_path_factory.mktemp("worn_logs")
    common = ["record", "--num_worlds", "3", "--steps", "60", "--traj_len", "30", "--seed", "3",
              "--robot_variant", "variants/anymal_c_worn.yaml"]
    for out, fmt in (("ref.h5", []), ("log.parquet", ["--format", "logs"]), ("log.mcap", ["--format", "logs"])):
        assert main([*common, "--out", str(root / out), *fmt]) == 0
    return root


def dataset_arrays(path) -> dict:
    """qpos, qvel, ctrl and torque of a dataset file, as numpy arrays."""
    import h5py

    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in ("qpos", "qvel", "ctrl", "torque")}
