"""Contact features for learned models: fixed ground probes (NeRD) or variable contact rows (FlashNeRD)."""

from flashnerd.contacts.probes import CONTACT_MODES, NoContact, ProbeFeatures, contact_features
from flashnerd.contacts.rows import ContactRowDetector, ContactRows, unpack_rows

__all__ = ["CONTACT_MODES", "ContactRowDetector", "ContactRows", "NoContact", "ProbeFeatures", "contact_features",
           "unpack_rows"]
