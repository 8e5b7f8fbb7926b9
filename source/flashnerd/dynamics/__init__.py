"""The `Dynamics` seam's backends and their one registry: learned models, two-way coupling, and `make_dynamics`."""

from flashnerd.dynamics.registry import (
    REFERENCE_BACKEND,
    BackendInfo,
    available_backends,
    backend_info,
    backend_names,
    check_backend,
    make_dynamics,
    register_backend,
)
from flashnerd.types import Dynamics, ObjectDynamics, RobotState

__all__ = ["REFERENCE_BACKEND", "BackendInfo", "Dynamics", "ObjectDynamics", "RobotState", "available_backends",
           "backend_info", "backend_names", "check_backend", "make_dynamics", "register_backend"]
