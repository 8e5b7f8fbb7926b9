"""Analytical physics backends (MuJoCo C on CPU) and scene assembly."""
