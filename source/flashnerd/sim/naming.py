"""Names for what the suite adds to a robot's `MjSpec` (floor, lights, terrain, objects). A robot's MJCF may already
use any name (a body `cube`, a geom `terrain_0`), so each added element takes the first free one; what reads the
added elements back finds them by type and order, never by name."""

from __future__ import annotations


def unused_name(elements, base: str) -> str:
    """`base`, or `base_<k>` with the smallest k >= 1 that none of `elements` (a spec's textures, geoms, ...) is
    named."""
    taken = {e.name for e in elements}
    k = 0
    while (name := base if k == 0 else f"{base}_{k}") in taken:
        k += 1
    return name
