"""Recording trajectories from the analytical backend to HDF5, and reading them back for fitting."""
