"""Contact features for learned models: fixed probe points against the ground (the NeRD convention)."""

from flashnerd.contacts.probes import ProbeFeatures

__all__ = ["ProbeFeatures"]
