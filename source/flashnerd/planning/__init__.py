"""Planning with any `Dynamics` backend: DIAL-MPC (annealed sampling model-predictive control)."""

from flashnerd.planning.dial_mpc import DialMPC, DialMPCConfig, rollout_returns, spline_matrix

__all__ = ["DialMPC", "DialMPCConfig", "spline_matrix", "rollout_returns"]
