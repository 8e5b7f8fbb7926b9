"""Contact features for learned models."""

from flashnerd.contacts.probes import NoContact, ProbeFeatures, contact_features

__all__ = ["NoContact", "ProbeFeatures", "contact_features"]
