"""The `Dynamics` seam: every backend (analytical or learned) steps batched worlds behind one interface."""

from flashnerd.dynamics.base import Dynamics, RobotState, available_backends, make_dynamics

__all__ = ["Dynamics", "RobotState", "available_backends", "make_dynamics"]
