"""Terrain-aware task pieces: Isaac Lab's terrain-level curriculum (a tracker), the height-scan observation and the
reset event that places a robot on its tile. They read the task's heightfield terrain (`sim/heightfield.py`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from flashnerd.sim.heightfield import LEVELS, TILE, HeightMap, tile_centers
from flashnerd.sim.terrain import terrain_heightfield
from flashnerd.utils.math import yaw_from_quat

if TYPE_CHECKING:
    from flashnerd.envs.core import FlashNeRDEnv


def terrain_height_map(terrain: str, device: torch.device | str = "cpu") -> HeightMap | None:
    """The torch height lookup of terrain `terrain`'s heightfield, or None for a terrain without one."""
    field = terrain_heightfield(terrain)
    return None if field is None else HeightMap(field, device)


class TerrainLevels:
    """Where each world's robot starts: a tile of the rough field (a difficulty level and a sub-terrain column), and
    with `curriculum` Isaac Lab's `terrain_levels_vel` rule at every reset: a robot that walked farther than half a
    tile from its start moves one level up, one that walked less than half its commanded distance moves one down;
    beyond the hardest level a robot starts on a random level. Columns are dealt out evenly over the worlds."""

    def __init__(self, env: FlashNeRDEnv, max_init_level: int = LEVELS - 1, curriculum: bool = True) -> None:
        if env.height_map is None:
            raise ValueError(f"terrain '{env.cfg.terrain}' has no tiles; the terrain-level curriculum needs a "
                             "heightfield terrain such as 'rough'")
        self.env, self.curriculum = env, curriculum
        n, dev = env.num_envs, env.device
        self.centers = torch.as_tensor(tile_centers(env.height_map.field), dtype=torch.float32,
                                       device=dev)  # (L, T, 2)
        self.num_levels, num_types = self.centers.shape[:2]
        top = min(max_init_level, self.num_levels - 1)
        self.level = torch.randint(0, top + 1, (n,), device=dev, generator=env.rng)  # (N,)
        self.column = torch.arange(n, device=dev) * num_types // n  # (N,) blocks of worlds per sub-terrain
        self.origins = torch.zeros(n, 3, device=dev)  # (N, 3) each world's tile centre on the surface
        self._place(torch.arange(n, device=dev))

    def _place(self, env_ids: torch.Tensor) -> None:
        xy = self.centers[self.level[env_ids], self.column[env_ids]]  # (k, 2)
        self.origins[env_ids, :2] = xy
        self.origins[env_ids, 2] = self.env.height_map(xy)

    def update(self) -> None:
        """Nothing per step: levels change at resets."""

    def reset(self, env_ids: torch.Tensor) -> None:
        env = self.env
        if self.curriculum:
            ran = env.episode_length_buf[env_ids] > 0  # a world's first reset follows no episode
            walked = torch.linalg.norm(env.state.qpos[env_ids, :2] - self.origins[env_ids, :2], dim=1)  # (k,)
            commanded = torch.linalg.norm(env.command_manager.command[env_ids, :2], dim=1) * env.max_episode_length_s
            up = walked > TILE / 2
            down = (walked < 0.5 * commanded) & ~up
            level = self.level[env_ids] + (ran & up).long() - (ran & down).long()
            beyond = level >= self.num_levels
            level = torch.where(beyond, torch.randint(0, self.num_levels, level.shape, device=env.device,
                                                      generator=env.rng), level.clamp_min(0))
            self.level[env_ids] = level
        self._place(env_ids)

    def log(self, env_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"Curriculum/terrain_levels": self.level.float().mean()}

    def state(self) -> dict[str, float]:
        """Where the curriculum stands now: the mean level over every world."""
        return {"Curriculum/terrain_levels": float(self.level.float().mean())}

    def checkpoint(self) -> dict[str, list[int]]:
        """What a resumed run restores (`restore`), as plain values: each world's level."""
        return {"level": self.level.tolist()}

    def restore(self, saved: Any) -> None:
        """Each world's level from a `checkpoint` (the file is untrusted: anything but a list of levels of this field
        is a one-line ValueError); a run resumed with another world count takes the saved levels in turn. The robots
        start there at their next reset."""
        level = saved.get("level") if isinstance(saved, dict) else None
        if not (isinstance(level, list) and level
                and all(type(x) is int and 0 <= x < self.num_levels for x in level)):
            raise ValueError(f"the checkpoint's terrain levels are not a list of levels in 0-{self.num_levels - 1} "
                             "(one per world); resume from a checkpoint of this task written by flashnerd")
        n, dev = self.env.num_envs, self.level.device
        saved_levels = torch.tensor(level, device=dev)  # (M,)
        self.level.copy_(saved_levels[torch.arange(n, device=dev) % len(level)])  # (N,)
        self._place(torch.arange(n, device=dev))


def place_on_terrain(env: FlashNeRDEnv, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
    """Reset event, after the base pose offsets: move each robot to its world's tile (`TerrainLevels`, tracker
    `terrain`) and lift it by the surface height under its new position."""
    levels = env.trackers["terrain"]
    qpos[:, 0:2] += levels.origins[env_ids, :2]
    qpos[:, 2] += env.height_map(qpos[:, 0:2])


@functools.lru_cache(maxsize=8)
def _scan_grid(size: tuple[float, float], resolution: float, device: str) -> torch.Tensor:
    nx, ny = round(size[0] / resolution) + 1, round(size[1] / resolution) + 1
    xs = torch.linspace(-size[0] / 2, size[0] / 2, nx, device=device)
    ys = torch.linspace(-size[1] / 2, size[1] / 2, ny, device=device)
    return torch.cartesian_prod(xs, ys)  # (R, 2)


def height_scan(env: FlashNeRDEnv, size: tuple[float, float] = (1.6, 1.0), resolution: float = 0.1,
                offset: float = 0.5) -> torch.Tensor:
    """Isaac Lab's height scan (N, R): base height above the terrain at a grid of `size` m (x, y) around the base,
    turned with its heading only, minus `offset`; R = 17 x 11 for the defaults. On a terrain without a heightfield the
    ground is the plane z = 0."""
    grid = _scan_grid(tuple(size), resolution, str(env.device))  # (R, 2) in the heading frame
    qpos = env.state.qpos
    yaw = yaw_from_quat(qpos[:, 3:7])  # (N,)
    cos, sin = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
    x = qpos[:, None, 0] + cos * grid[:, 0] - sin * grid[:, 1]  # (N, R)
    y = qpos[:, None, 1] + sin * grid[:, 0] + cos * grid[:, 1]
    ground = env.height_map(torch.stack((x, y), dim=-1)) if env.height_map is not None else torch.zeros_like(x)
    return qpos[:, 2:3] - ground - offset  # (N, R)
