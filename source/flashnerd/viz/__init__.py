"""Rendering robot states through their MJCF, and writing rollout videos."""

from flashnerd.viz.video import RobotRenderer, VideoWriter, label_frame, side_by_side

__all__ = ["RobotRenderer", "VideoWriter", "label_frame", "side_by_side"]
