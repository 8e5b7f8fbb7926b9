"""Fitting learned dynamics models and measuring them (long-horizon accuracy, throughput)."""
