"""MuJoCo Warp (`mjwarp`, here on the CPU) against MuJoCo C (`mujoco`): same MJCF, same states, same controls.

Tolerances over 50 control steps (1 s): |qpos| 1e-3, |qvel| 2e-2, torque 0.5 N*m, contact force 1% of the largest
force + 1 N. Measured on this machine: 5e-5, 4e-4, 8e-3 N*m, 0.06 N (float32 Warp vs float64 C; both use the
Newton solver, a pyramidal cone and implicitfast integration).
"""

from __future__ import annotations

import pytest
import torch
from conftest import default_ctrl, grouped_hound
from torch.overrides import TorchFunctionMode

from flashnerd.dynamics import make_dynamics

N = 6


@pytest.fixture(scope="module")
def backends(request):
    from flashnerd.robots import get_robot

    robot = get_robot("anymal_c")
    warp_dyn = make_dynamics("mjwarp", robot, N)
    c_dyn = make_dynamics("mujoco", robot, N)
    yield robot, warp_dyn, c_dyn
    warp_dyn.close()
    c_dyn.close()


def _start(robot, backends, seed: int) -> torch.Generator:
    _, warp_dyn, c_dyn = backends
    gen = torch.Generator().manual_seed(seed)
    qpos = torch.as_tensor(c_dyn.default_qpos(), dtype=torch.float32).repeat(N, 1)  # (N, nq)
    qvel = torch.zeros(N, c_dyn.nv)
    if seed:
        qpos[:, 7:] += 0.1 * torch.randn(N, robot.num_joints, generator=gen)
        qvel[:, :6] = 0.3 * torch.randn(N, 6, generator=gen)
    for dyn in (warp_dyn, c_dyn):
        dyn.reset(torch.arange(N), qpos, qvel)
    return gen


def _compare(warp_dyn, c_dyn) -> dict[str, float]:
    w, c = warp_dyn.state(), c_dyn.state()
    return {
        "qpos": (w.qpos - c.qpos).abs().max().item(),
        "qvel": (w.qvel - c.qvel).abs().max().item(),
        "torque": (w.joint_torque - c.joint_torque).abs().max().item(),
        "contact": ((w.contact_force - c.contact_force).abs().max() / (0.01 * c.contact_force.max() + 1.0)).item(),
    }


TOL = {"qpos": 1e-3, "qvel": 2e-2, "torque": 0.5, "contact": 1.0}


@pytest.mark.parametrize("mode", ["standing", "random_targets"])
def test_mjwarp_tracks_mujoco_for_50_steps(backends, mode):
    robot, warp_dyn, c_dyn = backends
    gen = _start(robot, backends, seed=0 if mode == "standing" else 1)
    stand = default_ctrl(robot, N)
    worst = dict.fromkeys(TOL, 0.0)
    for _ in range(50):
        ctrl = stand if mode == "standing" else stand + 0.3 * torch.randn(N, robot.num_joints, generator=gen)
        warp_dyn.step(ctrl)
        c_dyn.step(ctrl)
        worst = {k: max(v, d) for (k, v), d in zip(worst.items(), _compare(warp_dyn, c_dyn).values())}
    assert all(worst[k] < TOL[k] for k in TOL), worst
    # The robot is on the ground in both: feet carry its weight (about 441 N in all).
    feet = slice(len(robot.all_contact_bodies) - 4, None)
    assert warp_dyn.state().contact_force[:, feet].sum(1).min() > 100.0
    assert warp_dyn.overflow() == {"contacts": 0, "constraints": 0}


def test_a_subtree_contact_sensor_reads_the_same_on_mjwarp(tmp_path):
    """Feet on unnamed bodies welded to the calves are sensed through the calves' subtrees (sim/scene.py); Warp's
    contact matching walks the tree as MuJoCo's does: the same forces through a 5 cm drop and standing."""
    from flashnerd.robots import get_robot

    robot = get_robot(str(grouped_hound(tmp_path)))
    warp_dyn, c_dyn = make_dynamics("mjwarp", robot, 2), make_dynamics("mujoco", robot, 2)
    qpos = torch.as_tensor(c_dyn.default_qpos(), dtype=torch.float32).repeat(2, 1)  # (2, nq)
    qpos[:, 2] += 0.05
    for dyn in (warp_dyn, c_dyn):
        dyn.reset(torch.arange(2), qpos, torch.zeros(2, c_dyn.nv))
    worst = 0.0
    for _ in range(50):
        for dyn in (warp_dyn, c_dyn):
            dyn.step(default_ctrl(robot, 2))
        worst = max(worst, _compare(warp_dyn, c_dyn)["contact"])
    assert worst < TOL["contact"]
    assert c_dyn.state().contact_force[:, 1:].min() > 10.0  # each calf carries its share through its foot sphere
    warp_dyn.close()
    c_dyn.close()


def test_mjwarp_reset_leaves_other_worlds_alone(backends):
    robot, warp_dyn, _ = backends
    _start(robot, backends, seed=2)
    ctrl = default_ctrl(robot, N)
    for _ in range(5):
        warp_dyn.step(ctrl)
    before = warp_dyn.state().qpos.clone()
    qpos = torch.as_tensor(warp_dyn.default_qpos(), dtype=torch.float32).repeat(2, 1)
    warp_dyn.reset(torch.tensor([1, 4]), qpos, torch.zeros(2, warp_dyn.nv))
    after = warp_dyn.state().qpos
    keep = [0, 2, 3, 5]
    assert torch.equal(after[keep], before[keep])
    assert torch.allclose(after[[1, 4]], qpos)
    assert (warp_dyn.state().contact_force[[1, 4]] == 0).all()


class _NoCuda(TorchFunctionMode):
    """Fails the test on any torch call that would create or move a tensor to CUDA."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        targets = [kwargs.get("device")]
        if func in (torch.Tensor.to, torch.Tensor.cuda):
            targets += [a for a in args[1:] if isinstance(a, str | torch.device)]
            if func is torch.Tensor.cuda:
                targets.append("cuda")
        for t in targets:
            if t is not None and torch.device(t).type == "cuda":
                raise AssertionError(f"{getattr(func, '__name__', func)} asked for CUDA on a --device cpu run")
        return func(*args, **kwargs)


@pytest.mark.parametrize("dynamics", ["mjwarp", "flashnerd", "mujoco"])
def test_every_task_runs_on_the_backend_without_touching_cuda(dynamics):
    import gymnasium as gym

    from flashnerd.dynamics.learned import default_checkpoint
    from flashnerd.envs.registry import load_cfg_from_registry, registered_tasks
    from flashnerd.robots import get_robot

    for task in registered_tasks():
        cfg = load_cfg_from_registry(task, "env_cfg_entry_point")
        shipped = default_checkpoint(get_robot(cfg.robot), dynamics).is_file()
        if dynamics == "flashnerd" and (cfg.objects or not shipped):
            continue  # no cube on a robot-only learned backend (tests/test_reorient.py), or no shipped model yet
        with _NoCuda():
            env = gym.make(task, num_envs=4, dynamics=dynamics, device="cpu")
            obs, _ = env.reset(seed=0)
            for _ in range(10):
                obs, reward, terminated, truncated, extras = env.step(torch.zeros(4, env.unwrapped.num_actions))
            env.close()
        assert torch.isfinite(obs["policy"]).all() and torch.isfinite(reward).all(), task
        assert not terminated.any(), task  # standing still with zero actions does not fall


def test_the_cuda_guard_catches_a_stray_cuda_call():
    with pytest.raises(AssertionError, match="asked for CUDA"), _NoCuda():
        torch.zeros(2).to("cuda")


def test_recording_from_mjwarp_replays_in_mujoco(tmp_path):
    from flashnerd.data.dataset import load_dataset
    from flashnerd.data.record import record
    from flashnerd.robots import get_robot

    robot = get_robot("anymal_c")
    info = record(robot, num_worlds=4, steps=20, out=tmp_path / "w.h5", traj_len=20, seed=3, progress=False,
                  backend="mjwarp")
    data = load_dataset(tmp_path / "w.h5", robot)
    assert info["trajectories"] == 4
    c_dyn = make_dynamics("mujoco", robot, 4)
    c_dyn.reset(torch.arange(4), data.qpos[:, 0], data.qvel[:, 0])
    for t in range(20):
        c_dyn.step(data.ctrl[:, t])
    assert (c_dyn.state().qpos - data.qpos[:, 20]).abs().max() < TOL["qpos"]
    c_dyn.close()
