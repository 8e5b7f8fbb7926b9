"""The base columns of the robot log format (docs/reference/robot_logs.md), named once for its readers and writers.

The quaternion is w, x, y, z (MuJoCo's order); the linear and angular velocities are in the base frame.
"""

from __future__ import annotations

BASE = {"pos": ("base_pos_x", "base_pos_y", "base_pos_z"),
        "quat": ("base_quat_w", "base_quat_x", "base_quat_y", "base_quat_z"),
        "lin_vel": ("base_lin_vel_x", "base_lin_vel_y", "base_lin_vel_z"),
        "ang_vel": ("base_ang_vel_x", "base_ang_vel_y", "base_ang_vel_z")}
BASE_COLUMNS = (*BASE["pos"], *BASE["quat"], *BASE["lin_vel"], *BASE["ang_vel"])  # (13,) a pose and twist row
# a logged base quaternion's norm is 1 within this (one written with 3 decimals is within 1e-3, an estimator's zeros
# before it starts are not); rows within it are normalized on import, logs and bags alike
QUAT_TOLERANCE = 0.01
