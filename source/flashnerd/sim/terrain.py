"""Terrains: a ground plane plus static boxes (platforms, steps, blocks, ramps) or a heightfield, named so every backend
builds the same.

A terrain is a list of `Box`es resting in the world. The MuJoCo scene gets one box geom per `Box` (named
`terrain_<i>`); the learned backends' contact detector reads the same boxes back from the compiled model, so the
analytical and the learned side see one terrain.

- `flat`: the ground plane only.
- `platforms`: six platforms of heights `PLATFORM_HEIGHTS` (up to 0.181 m) in six lanes along +y, spaced `LANE_GAP`
  apart; in lane k the robot starts at (0, k * LANE_GAP) facing +x, and the platform's near edge is at
  x = `PLATFORM_EDGE`.
- `blocks`: training terrain (a fixed seed): a field of steps, boxes and ramps of heights up to 0.2 m, so recorded
  data shows the feet, shanks and base meeting edges, tops and sides.
- `rough`: one heightfield of sub-terrains (stairs, boxes, noise, slopes) in rows of difficulty, Isaac Lab's rough
  terrain in spirit (`sim/heightfield.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from flashnerd.robots.spec import DEFAULT_FLOOR_BITS
from flashnerd.sim.heightfield import PLATFORM, TILE, HeightField, add_heightfield, rough_heightfield, tile_centers
from flashnerd.sim.naming import unused_name

PLATFORM_HEIGHTS = (0.06, 0.085, 0.11, 0.135, 0.16, 0.181)  # m
PLATFORM_EDGE = 0.75  # m: the near edge of every platform, ahead of the robot's start
PLATFORM_SIZE = (2.0, 1.6)  # m: depth (x) and width (y)
LANE_GAP = 3.0  # m between lanes
BLOCKS_EXTENT = 6.0  # m: the blocks field covers [-extent, extent]^2
TERRAINS = ("flat", "platforms", "blocks", "rough")


@dataclass(frozen=True)
class Box:
    """A static box: center (m), half sizes (m) and a rotation about y (pitch, rad; a ramp when nonzero)."""

    center: tuple[float, float, float]
    half: tuple[float, float, float]
    pitch: float = 0.0

    @property
    def quat(self) -> tuple[float, float, float, float]:
        return (math.cos(self.pitch / 2), 0.0, math.sin(self.pitch / 2), 0.0)


def platform_boxes() -> list[Box]:
    """The six climbing platforms, one per lane."""
    depth, width = PLATFORM_SIZE
    return [Box((PLATFORM_EDGE + depth / 2, k * LANE_GAP, h / 2), (depth / 2, width / 2, h / 2))
            for k, h in enumerate(PLATFORM_HEIGHTS)]


def block_boxes(seed: int = 0, count: int = 48) -> list[Box]:
    """A field of `count` steps, boxes and ramps (heights 0.03-0.2 m) around the origin; the origin stays clear."""
    rng = np.random.default_rng(seed)
    boxes: list[Box] = []
    while len(boxes) < count:
        x, y = rng.uniform(-BLOCKS_EXTENT, BLOCKS_EXTENT, size=2)
        if math.hypot(x, y) < 0.8:
            continue
        h = float(rng.uniform(0.03, 0.2))
        hx, hy = (float(v) for v in rng.uniform(0.25, 0.9, size=2))
        kind = rng.integers(3)
        if kind == 2:  # a ramp: a long thin slab pitched 6-15 degrees, its low end in the ground
            pitch = float(rng.uniform(0.1, 0.26)) * (1 if rng.random() < 0.5 else -1)
            boxes.append(Box((float(x), float(y), hx * abs(math.sin(pitch)) / 2), (hx, hy, 0.02), pitch))
        else:  # a box (kind 0) or a wide step (kind 1)
            if kind == 1:
                hy = float(rng.uniform(1.0, 1.5))
            boxes.append(Box((float(x), float(y), h / 2), (hx, hy, h / 2)))
    return boxes


def terrain_boxes(name: str) -> list[Box]:
    """The boxes of terrain `name`; an unknown name is a one-line error."""
    if name not in TERRAINS:
        raise ValueError(f"unknown terrain '{name}'; choose one of: {', '.join(TERRAINS)}")
    return {"flat": list, "platforms": platform_boxes, "blocks": block_boxes, "rough": list}[name]()


def terrain_heightfield(name: str) -> HeightField | None:
    """The heightfield of terrain `name`, or None for a terrain of boxes."""
    return rough_heightfield() if name == "rough" else None


def add_terrain(spec: mujoco.MjSpec, name: str, bits: tuple[int, int] = DEFAULT_FLOOR_BITS) -> None:
    """Add terrain `name` to `spec`'s world body: its boxes (geoms `terrain_<i>`, or the next free name) or its
    heightfield, colliding like the floor (its contype and conaffinity `bits`)."""
    field = terrain_heightfield(name)
    if field is not None:
        add_heightfield(spec, field, bits)
    for i, box in enumerate(terrain_boxes(name)):
        spec.worldbody.add_geom(
            name=unused_name(spec.geoms, f"terrain_{i}"), type=mujoco.mjtGeom.mjGEOM_BOX, pos=list(box.center),
            quat=list(box.quat), size=list(box.half), contype=bits[0], conaffinity=bits[1], condim=3,
            friction=[1.0, 0.005, 0.0001],
            rgba=[0.55, 0.5, 0.45, 1.0],
        )


def surface_height(boxes: list[Box], xy: np.ndarray) -> np.ndarray:
    """Height (n,) of the terrain's top under points xy (n, 2): the highest box top covering each point (a ramp counts
    with its highest point, a safe spawn height), 0 on the plain ground."""
    height = np.zeros(len(xy))
    for box in boxes:
        c, h = np.asarray(box.center), np.asarray(box.half)
        reach_x = h[0] * abs(math.cos(box.pitch)) + h[2] * abs(math.sin(box.pitch))  # x half extent when pitched
        top = c[2] + h[0] * abs(math.sin(box.pitch)) + h[2] * abs(math.cos(box.pitch))
        inside = (np.abs(xy[:, 0] - c[0]) <= reach_x) & (np.abs(xy[:, 1] - c[1]) <= h[1])
        height = np.where(inside, np.maximum(height, top), height)
    return height


def terrain_height(name: str, xy: np.ndarray) -> np.ndarray:
    """Height (n,) of terrain `name`'s top under points xy (n, 2) (see `surface_height`; a heightfield's surface)."""
    field = terrain_heightfield(name)
    return field.height_at(xy) if field is not None else surface_height(terrain_boxes(name), xy)


def sample_spawn_xy(name: str, n: int, gen) -> np.ndarray:
    """Start positions (n, 2) for recording on terrain `name` (a torch.Generator draws them): the origin on `flat`,
    anywhere on the `blocks` field, and in front of, at the edge of or on a platform of a random lane on
    `platforms`."""
    import torch

    u = torch.rand(n, 2, generator=gen, dtype=torch.float64).numpy()  # (n, 2)
    if name == "flat":
        return np.zeros((n, 2))
    if name == "blocks":
        return (u - 0.5) * 2 * BLOCKS_EXTENT
    if name == "rough":  # on a random tile's platform, or anywhere within a tile around it
        centers = tile_centers(rough_heightfield()).reshape(-1, 2)
        pick = torch.randint(len(centers), (n,), generator=gen).numpy()
        wide = torch.rand(n, 1, generator=gen, dtype=torch.float64).numpy() < 0.5
        return centers[pick] + (u - 0.5) * np.where(wide, 0.75 * TILE, PLATFORM)
    lane = np.floor(torch.rand(n, generator=gen, dtype=torch.float64).numpy() * len(PLATFORM_HEIGHTS))
    x = -0.5 + u[:, 0] * (PLATFORM_EDGE + PLATFORM_SIZE[0] * 0.75 + 0.5)
    y = lane * LANE_GAP + (u[:, 1] - 0.5) * PLATFORM_SIZE[1] * 0.8
    return np.stack((x, y), axis=1)
