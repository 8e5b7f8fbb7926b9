"""Heightfield terrain: a generated grid of sub-terrains in the spirit of Isaac Lab's rough terrains, as one MuJoCo
hfield, and the same surface read back from a compiled model for the learned backends' contact rows.

The `rough` field is `LEVELS` rows of difficulty (row 0 easiest) by one column per sub-terrain type, each tile
`TILE` m square with a flat `PLATFORM` m platform in its middle (where a robot starts):

- `stairs`, `stairs_down`: pyramid stairs up to / down into the platform, steps 0.3 m deep and 0.05 to 0.18 m high;
- `boxes`: a grid of 0.45 m boxes of random heights up to 0.05 to 0.2 m;
- `noise`: uniform height noise of +-0.02 to +-0.1 m on a 0.1 m grid (quantized to 5 mm);
- `slope`, `slope_down`: pyramid slopes up to / down into the platform, grade 0 to 0.4.

Every height is measured from `base_height`, the depth of the deepest pit, so the whole surface stays above the
ground plane (MuJoCo's hfield has no negative elevations); the outermost grid points sit on the ground, so the field
has no side walls (MuJoCo's prisms would have them, the triangulated surface not). The grid is MuJoCo's:
heights[r, c] sits at x = x0 + c * cell, y = y0 + r * cell, and each cell is split into the triangles (r, c),
(r, c+1), (r+1, c+1) and (r, c), (r+1, c+1), (r+1, c), as MuJoCo splits it (the tests cast MuJoCo's rays on it).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from flashnerd.robots.spec import DEFAULT_FLOOR_BITS
from flashnerd.sim.naming import unused_name

TILE = 6.0  # m: side of one sub-terrain (Isaac Lab: 8)
PLATFORM = 2.0  # m: side of the flat platform in each tile's middle (Isaac Lab's; ANYmal-C is 1 m long)
CELL = 0.1  # m between grid points (Isaac Lab's horizontal scale)
LEVELS = 5  # rows of difficulty
BORDER = 20.0  # m of flat ground around the tiles, at their edges' level (Isaac Lab's border_width): a robot
# tracking 1 m/s for a 20 s episode from an outer tile stays on the field
TYPES = ("stairs", "stairs_down", "boxes", "noise", "slope", "slope_down")
STEP_DEPTH = 0.3  # m: stair tread
BOX_SIZE = 0.45  # m: side of the random boxes
HFIELD_NAME = "terrain_hfield"


@dataclass(frozen=True)
class HeightField:
    """A heightfield: heights (nrow, ncol) m above the ground plane, on a grid of spacing `cell` from (x0, y0)."""

    heights: np.ndarray
    cell: float
    x0: float
    y0: float
    base_height: float = 0.0  # the level of a tile's edge (flat ground of the field)

    @property
    def half_size(self) -> tuple[float, float]:
        """Half extents (x, y) of the grid."""
        nrow, ncol = self.heights.shape
        return (ncol - 1) * self.cell / 2, (nrow - 1) * self.cell / 2

    @property
    def center(self) -> tuple[float, float]:
        hx, hy = self.half_size
        return self.x0 + hx, self.y0 + hy

    def height_at(self, xy: np.ndarray) -> np.ndarray:
        """Surface height (n,) under points xy (n, 2) on MuJoCo's triangles; 0 (the ground) outside the grid."""
        return HeightMap(self, dtype=torch.float64)(torch.as_tensor(xy, dtype=torch.float64)).numpy()


class HeightMap:
    """A heightfield's surface height in torch, batched: `heights(points)` for points (..., >= 2) -> (...), on
    MuJoCo's triangles (see `HeightField.height_at`); `outside` where a point is off the grid."""

    def __init__(self, field: HeightField, device: torch.device | str = "cpu", outside: float = 0.0,
                 dtype: torch.dtype = torch.float32) -> None:
        self.field, self.outside = field, outside
        self.table = torch.tensor(field.heights, dtype=dtype, device=torch.device(device))  # (nrow, ncol)
        h = self.table
        h00, h01, h10, h11 = h[:-1, :-1], h[:-1, 1:], h[1:, :-1], h[1:, 1:]  # (nrow - 1, ncol - 1) per cell
        # per cell, the two triangles as h00 + fu * a + fv * b, one row per cell: a lookup is one gather
        self._cells = torch.stack((h00, h01 - h00, h11 - h01, h11 - h10, h10 - h00), dim=-1).flatten(0, 1)  # (cells, 5)

    def __call__(self, points: torch.Tensor) -> torch.Tensor:
        f = self.field
        nrow, ncol = self.table.shape
        u, v = (points[..., 0] - f.x0) / f.cell, (points[..., 1] - f.y0) / f.cell
        inside = (u >= 0) & (u <= ncol - 1) & (v >= 0) & (v <= nrow - 1)
        c, r = u.floor().long().clamp(0, ncol - 2), v.floor().long().clamp(0, nrow - 2)  # a NaN point: cell 0
        fu, fv = (u - c).clamp(0, 1), (v - r).clamp(0, 1)
        h00, du_low, dv_low, du_up, dv_up = self._cells[r * (ncol - 1) + c].unbind(-1)  # (...) x5
        # triangle (r,c), (r,c+1), (r+1,c+1) where fu >= fv; (r,c), (r+1,c+1), (r+1,c) where fu < fv
        lower = fu >= fv
        height = h00 + fu * torch.where(lower, du_low, du_up) + fv * torch.where(lower, dv_low, dv_up)
        return torch.where(inside, height, self.outside)


def _tile(kind: str, difficulty: float, u: np.ndarray, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Heights (relative to the tile's edge) of one sub-terrain at tile coordinates u, v in [-TILE/2, TILE/2]."""
    ring = np.maximum(np.abs(u), np.abs(v))  # distance from the middle in the max norm
    flat = ring <= PLATFORM / 2 + 1e-9
    steps = math.floor((TILE - PLATFORM) / 2 / STEP_DEPTH)
    if kind in ("stairs", "stairs_down"):
        step = 0.05 + 0.13 * difficulty
        k = np.minimum(np.floor((TILE / 2 - ring) / STEP_DEPTH + 1e-9), steps)  # steps climbed from the edge
        return (1 if kind == "stairs" else -1) * k * step
    if kind in ("slope", "slope_down"):
        grade = 0.4 * difficulty
        return (1 if kind == "slope" else -1) * grade * (TILE / 2 - np.maximum(ring, PLATFORM / 2))
    if kind == "boxes":
        top = 0.05 + 0.15 * difficulty
        n = math.ceil(TILE / BOX_SIZE)
        grid = rng.uniform(0.0, top, size=(n, n))
        i = np.clip(((u + TILE / 2) / BOX_SIZE).astype(int), 0, n - 1)
        j = np.clip(((v + TILE / 2) / BOX_SIZE).astype(int), 0, n - 1)
        return np.where(flat, 0.0, grid[j, i])
    if kind == "noise":
        amp = 0.02 + 0.08 * difficulty
        noise = np.round(rng.uniform(-amp, amp, size=u.shape) / 0.005) * 0.005
        return np.where(flat, 0.0, noise)
    raise ValueError(f"unknown sub-terrain '{kind}'; choose one of: {', '.join(TYPES)}")


@functools.lru_cache(maxsize=4)
def rough_heightfield(seed: int = 0, levels: int = LEVELS, types: tuple[str, ...] = TYPES,
                      border: float = BORDER) -> HeightField:
    """The `rough` field: `levels` rows of difficulty 0..1 by one column per type inside `border` m of flat ground
    at the tiles' edge level, centred on the origin (built once per arguments; its heights are read-only)."""
    rng = np.random.default_rng(seed)
    per_tile = round(TILE / CELL)
    nrow, ncol = levels * per_tile + 1, len(types) * per_tile + 1
    heights = np.zeros((nrow, ncol))
    local = (np.arange(per_tile + 1) * CELL) - TILE / 2  # tile coordinates of a tile's grid points
    u, v = np.meshgrid(local, local)  # (T+1, T+1): u along columns (x), v along rows (y)
    for row in range(levels):
        difficulty = row / max(levels - 1, 1)
        for col, kind in enumerate(types):
            rs, cs = row * per_tile, col * per_tile
            heights[rs:rs + per_tile + 1, cs:cs + per_tile + 1] = _tile(kind, difficulty, u, v, rng)
    pad = round(border / CELL) + 1 if border > 0 else 0  # + the outer ring, which slopes to the ground
    heights = np.pad(heights, pad)  # (nrow + 2 pad, ncol + 2 pad): the border at the tiles' edge level
    base = max(0.0, -float(heights.min()))  # the deepest pit sits on the ground plane
    nrow, ncol = heights.shape
    x0, y0 = -(ncol - 1) * CELL / 2, -(nrow - 1) * CELL / 2
    heights = heights + base
    heights[[0, -1], :] = heights[:, [0, -1]] = 0.0  # the field rises from the ground at its outer edge: no walls
    heights.setflags(write=False)
    return HeightField(heights, CELL, x0, y0, base)


def tile_centers(field: HeightField, levels: int = LEVELS, types: int = len(TYPES)) -> np.ndarray:
    """Centres (levels, types, 2) of the tiles of a `rough_heightfield` (x, y), where robots start: the tiles lie in
    the middle of the grid whatever its border, so a field read back from a scene gives the same centres."""
    per, (cx, cy) = TILE, field.center
    x = cx + per * (np.arange(types) - (types - 1) / 2)
    y = cy + per * (np.arange(levels) - (levels - 1) / 2)
    return np.stack(np.meshgrid(x, y), axis=-1)  # (levels, types, 2)


def add_heightfield(spec: mujoco.MjSpec, field: HeightField, bits: tuple[int, int] = DEFAULT_FLOOR_BITS) -> None:
    """Add `field` to `spec` as one hfield asset and geom (colliding like the floor: contype and conaffinity `bits`),
    named `HFIELD_NAME` unless the robot took that name."""
    nrow, ncol = field.heights.shape
    top = float(field.heights.max())
    hx, hy = field.half_size
    asset = spec.add_hfield(name=unused_name(spec.hfields, HFIELD_NAME), size=[hx, hy, max(top, 1e-6), 0.1],
                            nrow=nrow, ncol=ncol, userdata=(field.heights / max(top, 1e-6)).ravel().tolist())
    cx, cy = field.center
    spec.worldbody.add_geom(name=unused_name(spec.geoms, HFIELD_NAME), type=mujoco.mjtGeom.mjGEOM_HFIELD,
                            hfieldname=asset.name, pos=[cx, cy, 0.0], contype=bits[0], conaffinity=bits[1], condim=3,
                            friction=[1.0, 0.005, 0.0001],
                            rgba=[0.5, 0.47, 0.42, 1.0])


def read_heightfield(model: mujoco.MjModel) -> HeightField | None:
    """The heightfield of a compiled scene (its world-body hfield geom, unrotated), or None when it has none."""
    geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] == 0
             and int(model.geom_type[g]) == int(mujoco.mjtGeom.mjGEOM_HFIELD)]
    if not geoms:
        return None
    if len(geoms) > 1:
        raise ValueError("the scene has more than one heightfield; contact rows read one")
    g = geoms[0]
    if not np.allclose(model.geom_quat[g], (1.0, 0.0, 0.0, 0.0)):
        raise ValueError("the scene's heightfield is rotated; contact rows read an axis-aligned one")
    h = int(model.geom_dataid[g])
    nrow, ncol = int(model.hfield_nrow[h]), int(model.hfield_ncol[h])
    adr = int(model.hfield_adr[h])
    size = model.hfield_size[h]
    heights = model.hfield_data[adr:adr + nrow * ncol].reshape(nrow, ncol) * size[2] + model.geom_pos[g][2]
    cell_x, cell_y = 2 * size[0] / (ncol - 1), 2 * size[1] / (nrow - 1)
    if not math.isclose(cell_x, cell_y, rel_tol=1e-6):
        raise ValueError(f"the scene's heightfield has cells of {cell_x:g} x {cell_y:g} m; contact rows read square "
                         "ones")
    return HeightField(heights.astype(np.float64), float(cell_x), float(model.geom_pos[g][0] - size[0]),
                       float(model.geom_pos[g][1] - size[1]))
