"""Offscreen rendering of any backend's robot state (analytical or learned) through the robot's MJCF, and MP4 output.

Learned backends have no MuJoCo data of their own: a state is rendered by writing its qpos into one `MjData` of the
same scene and running forward kinematics, so analytical and learned rollouts look alike frame for frame.
"""

from __future__ import annotations

import os
from pathlib import Path

import mujoco
import numpy as np
from PIL import Image, ImageDraw

from flashnerd.robots import RobotSpec
from flashnerd.sim.naming import unused_name
from flashnerd.sim.scene import build_scene_spec
from flashnerd.utils.atomic import temporary_path


class RobotRenderer:
    """Renders one robot state at a time with a camera that follows the base (width x height RGB, uint8), in the
    task's scene: its terrain (a heightfield, platforms) and its objects (the cube, posed per frame)."""

    def __init__(self, robot: RobotSpec, width: int = 640, height: int = 480, terrain: str = "flat",
                 objects: tuple[str, ...] = (), distance: float = 2.5, elevation: float = -20.0,
                 azimuth: float = 135.0) -> None:
        spec = build_scene_spec(robot, terrain, tuple(objects))
        if not any(t.type == mujoco.mjtTexture.mjTEXTURE_SKYBOX for t in spec.textures):  # a user's MJCF may have one
            spec.add_texture(name=unused_name(spec.textures, "sky"), type=mujoco.mjtTexture.mjTEXTURE_SKYBOX,
                             builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT, rgb1=[0.55, 0.65, 0.8],
                             rgb2=[0.1, 0.12, 0.18], width=256, height=256)
        self.model = spec.compile()  # the physics scene plus a sky: rendering only, never simulated
        self.model.vis.headlight.ambient[:] = 0.35
        self.model.vis.headlight.diffuse[:] = 0.7
        self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, width)
        self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, height)
        self.data = mujoco.MjData(self.model)
        # each object is a free body after the robot in qpos (sim/scene.py): 7 numbers, position and quaternion wxyz
        self.nq_robot = self.model.nq - 7 * len(objects)
        self.follow_base = robot.floating_base  # a fixed-base robot is framed at a fixed point above its base
        try:
            self.renderer = mujoco.Renderer(self.model, height=height, width=width)
        except Exception as err:  # no usable OpenGL: say which system package is missing, in one line
            raise RuntimeError(f"offscreen rendering failed ({str(err).splitlines()[0][:120]}); on a CPU install "
                               "Mesa's EGL (apt install libegl1 libgl1-mesa-dri) and set MUJOCO_GL=egl, or use "
                               "MUJOCO_GL=osmesa with libosmesa6") from err
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_FREE
        self.camera.distance, self.camera.elevation, self.camera.azimuth = distance, elevation, azimuth

    def render(self, qpos: np.ndarray, object_pose: np.ndarray | None = None) -> np.ndarray:
        """RGB image (height, width, 3) of the robot at configuration qpos (nq of the robot,), with the first object
        at object_pose (7,): position and quaternion wxyz (where it spawns when None)."""
        if qpos.shape != (self.nq_robot,):
            raise ValueError(f"qpos of shape {qpos.shape}; the robot has {self.nq_robot} position coordinates")
        self.data.qpos[:self.nq_robot] = qpos
        if object_pose is not None:
            if self.model.nq == self.nq_robot:
                raise ValueError("an object pose was given, and this scene has no objects")
            self.data.qpos[self.nq_robot:self.nq_robot + 7] = object_pose
        mujoco.mj_kinematics(self.model, self.data)
        self.camera.lookat[:] = self.data.qpos[0:3] if self.follow_base else (0.0, 0.0, 0.5)
        self.renderer.update_scene(self.data, camera=self.camera)
        return self.renderer.render().copy()

    def close(self) -> None:
        self.renderer.close()


def label_frame(frame: np.ndarray, text: str) -> np.ndarray:
    """Draw `text` in the top-left corner of an RGB frame (a copy)."""
    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, 8 + 6 * len(text), 18), fill=(0, 0, 0))
    draw.text((4, 4), text, fill=(255, 255, 255))
    return np.asarray(image)


def side_by_side(left: np.ndarray, right: np.ndarray, gap: int = 4) -> np.ndarray:
    """Two frames of equal height next to each other with a white gap: (H, W1 + gap + W2, 3)."""
    spacer = np.full((left.shape[0], gap, 3), 255, dtype=np.uint8)
    return np.concatenate([left, spacer, right], axis=1)


class VideoWriter:
    """H.264 MP4 through imageio-ffmpeg, written to a temporary `....tmp.mp4` beside `path` and renamed when closed
    without error.

    Frames are padded with black on the right and bottom to multiples of 16 pixels (H.264 macroblocks) rather than
    rescaled, so pixel columns keep their place (side-by-side halves stay comparable).
    """

    def __init__(self, path: str | Path, fps: int) -> None:
        import imageio.v2 as imageio

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temporary_path(self.path, suffix=".mp4")  # the writer picks the format from the suffix
        self._writer = imageio.get_writer(self.tmp, fps=fps, codec="libx264", quality=7, macro_block_size=1,
                                          ffmpeg_log_level="error")
        self.frames = 0

    def append(self, frame: np.ndarray) -> None:
        """Add one RGB frame (H, W, 3) uint8."""
        h, w = frame.shape[:2]
        frame = np.pad(frame, ((0, -h % 16), (0, -w % 16), (0, 0)))  # (H', W', 3)
        self._writer.append_data(frame)
        self.frames += 1

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._writer.close()
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
