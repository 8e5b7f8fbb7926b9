"""Rollout videos on the CPU (Mesa EGL): frame counts, non-blank frames, and side-by-side halves that differ exactly
when the backends differ."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import TASK

from flashnerd.cli.main import main
from flashnerd.cli.video import env_renderer, world_zero
from flashnerd.robots import get_robot
from flashnerd.viz import RobotRenderer

PLAY = "FlashNeRD-Velocity-Flat-Anymal-C-Play-v0"


def _frames(path: Path) -> np.ndarray:
    import imageio.v2 as imageio

    with imageio.get_reader(path) as reader:
        return np.stack([np.asarray(f) for f in reader])  # (T, H, W, 3)


@pytest.fixture(scope="module", autouse=True)
def opengl():
    """Rendering needs a system OpenGL (Mesa EGL on a CPU); without one these tests cannot run at all."""
    try:
        RobotRenderer(get_robot("anymal_c"), 32, 32).close()
    except RuntimeError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def policy_ckpt(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("video_logs")
    argv = ["train", "--task", TASK, "--num_envs", "8", "--max_iterations", "1", "--seed", "2",
            "--log_root", str(root), "--run_name", "v", "--eval_episodes", "0"]
    assert main(argv) == 0
    return next(root.glob("anymal_c_flat/*_v/model_0.pt"))


def test_play_video_has_the_requested_frames_and_is_not_blank(policy_ckpt, capsys):
    argv = ["play", "--task", PLAY, "--num_envs", "2", "--checkpoint", str(policy_ckpt), "--video",
            "--video_length", "30", "--video_width", "320", "--video_height", "240"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    frames = _frames(Path(result["video"]))
    assert frames.shape == (30, 240, 320, 3) and result["frames"] == 30  # 320 x 240: no padding needed
    assert frames[:, 40:].std() > 10.0  # the scene, not a uniform image
    assert not list(Path(result["video"]).parent.glob("*.tmp.mp4"))


def _halves(path: Path, w: int = 192, h: int = 144) -> np.ndarray:
    """Per-pixel largest channel difference between the two halves below the labels: (T, h - 24, w)."""
    frames = _frames(path).astype(np.float32)  # (T, H', W', 3): 2w + 4 wide, padded to multiples of 16
    return np.abs(frames[:, 24:h, :w] - frames[:, 24:h, w + 4:2 * w + 4]).max(-1)


def test_side_by_side_halves_match_for_two_analytical_sides_and_differ_for_a_learned_one(policy_ckpt, tmp_path,
                                                                                         capsys):
    """Identical renders differ only by H.264 noise (measured at most 30 of 255); a learned side that drifted by a
    few centimetres moves edges by whole pixels (differences of 40 and more in dozens of pixels)."""
    common = ["compare-video", "--task", PLAY, "--checkpoint", str(policy_ckpt), "--video_length", "100",
              "--video_width", "192", "--video_height", "144"]
    assert main([*common, "--dynamics", "mujoco", "--out", str(tmp_path / "same.mp4")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["base_drift_m"]["end"] == 0.0
    assert main([*common, "--dynamics", "flashnerd", "--out", str(tmp_path / "learned.mp4")]) == 0
    drift = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["base_drift_m"]["end"]
    assert drift > 0.0
    assert (_halves(tmp_path / "same.mp4") > 40).sum() == 0
    assert (_halves(tmp_path / "learned.mp4")[-20:] > 40).sum() >= 10


@pytest.mark.parametrize("task", ["FlashNeRD-Velocity-Rough-Anymal-C-Play-v0", "FlashNeRD-Climb-Platform-Anymal-C-v0"])
def test_a_video_renders_the_tasks_terrain(task):
    """The renderer's scene is the one the task simulates: the rough field's heightfield, the platforms' boxes (a
    video of a flat floor under a robot climbing stairs would show it floating)."""
    env = gym.make(task, num_envs=1, dynamics="mujoco")
    scene, renderer = env.unwrapped.dyn.scene, env_renderer(env, 32, 24)
    try:
        assert renderer.model.ngeom == scene.ngeom and (renderer.model.geom_type == scene.geom_type).all()
        assert np.array_equal(renderer.model.geom_size, scene.geom_size)
        assert renderer.model.nhfield == scene.nhfield
        assert np.array_equal(renderer.model.hfield_data, scene.hfield_data)
        assert renderer.render(*world_zero(env)).std() > 10.0
    finally:
        renderer.close()
        env.close()


def test_a_video_poses_the_tasks_object_each_frame():
    """In-hand frames show the cube where the backend has it (the renderer's cube body sits at the object state),
    and a robot-only scene refuses an object pose."""
    env = gym.make("FlashNeRD-Reorient-Cube-Allegro-v0", num_envs=2, dynamics="mujoco")
    env.reset(seed=3)
    for _ in range(10):
        env.step(torch.rand(2, 16) * 2 - 1)
    renderer = env_renderer(env, 32, 24)
    try:
        qpos, pose = world_zero(env)
        renderer.render(qpos, pose)
        cube = renderer.model.body("cube").id
        assert np.allclose(renderer.data.xpos[cube], pose[:3], atol=1e-6)
        assert np.allclose(renderer.data.xquat[cube], pose[3:7], atol=1e-6)
        hand = env.unwrapped.dyn.scene
        assert renderer.nq_robot == hand.nq - 7
    finally:
        renderer.close()
        env.close()
    alone = RobotRenderer(get_robot("anymal_c"), 32, 24)
    try:
        with pytest.raises(ValueError, match="no objects"):
            alone.render(np.zeros(alone.nq_robot), np.zeros(7))
        with pytest.raises(ValueError, match="position coordinates"):
            alone.render(np.zeros(alone.nq_robot + 1))
    finally:
        alone.close()
