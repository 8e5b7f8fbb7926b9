"""FlashNeRD: fast streaming neural robot dynamics, task environments and RSL-RL training on any dynamics backend."""

import os

# Render headless by default (EGL: a GPU, or Mesa's software rasterizer on a CPU). MuJoCo reads MUJOCO_GL when it is
# first imported, so this only applies when flashnerd is imported before mujoco; set MUJOCO_GL yourself otherwise.
if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

__version__ = "0.1.0"
