"""Heightfield terrain: the generated rough field, its surface against MuJoCo's, contact rows of spheres against its
triangles (against an independent closest-point computation and MuJoCo's collision distance where that is exact),
and robots standing on it in MuJoCo."""

from __future__ import annotations

import json
import math

import mujoco
import numpy as np
import pytest
import torch

from flashnerd.contacts import ContactRowDetector
from flashnerd.dynamics import make_dynamics
from flashnerd.robots import get_robot
from flashnerd.sim.heightfield import (
    BORDER,
    LEVELS,
    PLATFORM,
    STEP_DEPTH,
    TILE,
    TYPES,
    HeightField,
    read_heightfield,
    rough_heightfield,
    tile_centers,
)
from flashnerd.sim.scene import build_scene
from flashnerd.sim.terrain import sample_spawn_xy, terrain_height
from flashnerd.utils.machine import describe_machine


@pytest.fixture(scope="module")
def rough_scene():
    robot = get_robot("anymal_c")
    return robot, build_scene(robot, "rough")


def test_rough_field_rows_grow_harder_and_platforms_are_flat():
    field = rough_heightfield()
    assert field.heights.min() >= 0 and (field.heights[[0, -1]] == 0).all() and (field.heights[:, [0, -1]] == 0).all()
    centers = tile_centers(field)  # (levels, types, 2)
    assert centers.shape == (LEVELS, len(TYPES), 2)
    steps = math.floor((TILE - PLATFORM) / 2 / STEP_DEPTH)
    stairs, down = TYPES.index("stairs"), TYPES.index("stairs_down")
    rise = []
    for level in range(LEVELS):
        difficulty = level / (LEVELS - 1)
        here = centers[level, stairs]
        platform = field.height_at(here[None] + np.array([[0.3, 0.2], [-0.3, -0.2], [0.0, 0.0]]))
        assert np.ptp(platform) < 1e-9  # flat where a robot starts
        edge = field.height_at(here[None] + np.array([[TILE / 2 - 0.05, 0.0]]))[0]
        rise.append(platform[0] - edge)
        assert platform[0] - edge == pytest.approx(steps * (0.05 + 0.13 * difficulty), abs=1e-9)
        pit = field.height_at(centers[level, down][None])[0]
        assert pit == pytest.approx(field.base_height - steps * (0.05 + 0.13 * difficulty), abs=1e-9)
    assert rise == sorted(rise)  # harder rows climb higher
    assert field.height_at(centers[-1, down][None])[0] == pytest.approx(0.0, abs=1e-9)  # the deepest pit: the ground


def test_the_tiles_are_ringed_by_flat_ground_a_walk_of_an_episode_wide():
    """Isaac Lab's 20 m border: from any outer tile a robot can walk the length of an episode (20 s at 1 m/s) and
    stay on flat ground at the tiles' edge level; the field meets the ground plane only beyond that."""
    field = rough_heightfield()
    centers = tile_centers(field)  # (levels, types, 2)
    lo, hi = centers.reshape(-1, 2).min(0) - TILE / 2, centers.reshape(-1, 2).max(0) + TILE / 2  # the tiles
    for corner in (lo, hi):
        out = np.sign(corner - centers.reshape(-1, 2).mean(0))  # away from the tiles
        walk = corner[None] + out[None] * np.linspace(0.05, BORDER - 0.05, 50)[:, None]  # (50, 2)
        assert np.allclose(field.height_at(walk), field.base_height, atol=1e-9)
    assert field.height_at((hi + BORDER + 0.5)[None])[0] == 0.0  # past the border: the ground plane
    assert field.base_height == pytest.approx(1.08, abs=1e-9)  # the deepest pit (stairs down, level 4) on the ground


def test_the_surface_is_mujocos(rough_scene):
    """Heights of the generated field, and of the field read back from the compiled scene (what the learned backends
    use), against MuJoCo's own ray cast onto the hfield geom."""
    _, model = rough_scene
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    field, read = rough_heightfield(), read_heightfield(model)
    assert np.allclose(tile_centers(read), tile_centers(field), atol=1e-6)  # where the curriculum starts robots
    det = ContactRowDetector(get_robot("anymal_c"), model)
    xy = np.concatenate((np.random.default_rng(0).uniform([-18.5, -15.5], [18.5, 15.5], size=(250, 2)),
                         _around_the_edge(field, 50, seed=1)))  # the tiles, and the grid's edge and past it
    geom = np.zeros(1, dtype=np.int32)
    mine = det._field_height(torch.tensor(np.c_[xy, np.zeros(len(xy))], dtype=torch.float32)).numpy()
    for i, (x, y) in enumerate(xy):
        down = mujoco.mj_ray(model, data, np.array([x, y, 5.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom)
        surface = 5.0 - down
        assert field.height_at(xy[i:i + 1])[0] == pytest.approx(surface, abs=1e-6)
        assert read.height_at(xy[i:i + 1])[0] == pytest.approx(surface, abs=1e-6)
        if model.geom(geom[0]).name == "terrain_hfield":
            assert mine[i] == pytest.approx(surface, abs=_float32_tolerance(field, xy[i]))


def _float32_tolerance(field, xy: np.ndarray) -> float:
    """How far a float32 height on `field`'s triangles at `xy` (2,) may be from the float64 one: a few roundings of
    the point's coordinates (an ulp of their size, tens of metres out: ~4e-6 m) times the steepest slope around it
    (the grid's outer ring drops the border's 1.08 m over one 0.1 m cell)."""
    c = int(np.clip((xy[0] - field.x0) // field.cell, 1, field.heights.shape[1] - 3))
    r = int(np.clip((xy[1] - field.y0) // field.cell, 1, field.heights.shape[0] - 3))
    slope = np.ptp(field.heights[r - 1:r + 3, c - 1:c + 3]) / field.cell  # steepest rise over the cells around
    return 1e-6 + 4 * float(np.finfo(np.float32).eps) * float(np.abs(xy).max()) * max(slope, 1.0)


def _around_the_edge(field, n: int, seed: int) -> np.ndarray:
    """n points (n, 2) within a metre of the outer edge of `field`'s grid, on either side of it, on all four sides."""
    gen = np.random.default_rng(seed)
    (hx, hy), (cx, cy) = field.half_size, field.center
    side = gen.integers(0, 4, n)  # -x, +x, -y, +y
    across = gen.uniform(-1.0, 1.0, n)  # metres past the edge (negative: on the grid)
    along = gen.uniform(-1.0, 1.0, n)  # fraction of the side
    x = np.where(side < 2, np.where(side == 0, -1, 1) * (hx + across), along * hx)
    y = np.where(side < 2, along * hy, np.where(side == 2, -1, 1) * (hy + across))
    return np.stack((cx + x, cy + y), axis=1)  # (n, 2)


def _nearest_on_surface(field, point: np.ndarray, cells: int = 2) -> float:
    """Distance from `point` to the field's triangles within `cells` cells, by another method than the detector's: the
    projection onto each triangle's plane when it falls inside (solved barycentric coordinates), else the nearest
    of the three clamped edge points."""
    h, cell = field.heights, field.cell
    nrow, ncol = h.shape
    c0, r0 = int((point[0] - field.x0) // cell), int((point[1] - field.y0) // cell)
    best = math.inf
    for r in range(max(r0 - cells, 0), min(r0 + cells + 1, nrow - 1)):
        for c in range(max(c0 - cells, 0), min(c0 + cells + 1, ncol - 1)):
            x, y = field.x0 + c * cell, field.y0 + r * cell
            v = {(dr, dc): np.array([x + dc * cell, y + dr * cell, h[r + dr, c + dc]])
                 for dr in (0, 1) for dc in (0, 1)}
            for a, b, d in ((v[0, 0], v[0, 1], v[1, 1]), (v[0, 0], v[1, 1], v[1, 0])):
                normal = np.cross(b - a, d - a)
                normal /= np.linalg.norm(normal)
                proj = point - np.dot(point - a, normal) * normal
                coords = np.linalg.lstsq(np.c_[b - a, d - a], proj - a, rcond=None)[0]
                if coords.min() >= 0 and coords.sum() <= 1:
                    best = min(best, abs(np.dot(point - a, normal)))
                for p, q in ((a, b), (b, d), (d, a)):
                    t = np.clip(np.dot(point - p, q - p) / np.dot(q - p, q - p), 0.0, 1.0)
                    best = min(best, np.linalg.norm(point - (p + t * (q - p))))
    return best


def test_sphere_rows_against_the_heightfield_are_exact(rough_scene):
    robot, model = rough_scene
    det = ContactRowDetector(robot, model)
    field = rough_heightfield()
    gen = np.random.default_rng(1)
    xy = gen.uniform([-17.5, -14.5], [17.5, 14.5], size=(200, 2))
    z = field.height_at(xy) + gen.uniform(-0.06, 0.12, size=len(xy))  # above, on and inside the surface
    centers = torch.tensor(np.c_[xy, z], dtype=torch.float32)[:, None]  # (n, 1, 3) one sphere per world
    dist, point, normal = det._field_pairs(centers)
    for i in range(len(xy)):
        ref = _nearest_on_surface(field, np.c_[xy, z][i])
        below = z[i] < field.height_at(xy[i:i + 1])[0]
        assert dist[i, 0].item() == pytest.approx(-ref if below else ref, abs=2e-5)
        gap = centers[i, 0] - point[i, 0]
        assert gap.norm().item() == pytest.approx(ref, abs=2e-5)  # the row's point is a nearest surface point
        assert normal[i, 0].norm().item() == pytest.approx(1.0, abs=1e-5)
        assert float(normal[i, 0, 2]) > -1e-6 or not below  # above the surface the normal points out of it


def _top_within(field, point: np.ndarray, reach: float) -> float:
    """The highest grid point of every cell within `reach` (horizontally) of `point`, by slicing the height grid."""
    h, cell = field.heights, field.cell
    k = math.ceil(reach / cell)
    r = min(max(math.floor((point[1] - field.y0) / cell), 0), h.shape[0] - 1)
    c = min(max(math.floor((point[0] - field.x0) / cell), 0), h.shape[1] - 1)
    return float(h[max(r - k, 0):r + k + 2, max(c - k, 0):c + k + 2].max())


def test_probes_far_above_the_field_skip_the_search_and_get_no_row(rough_scene):
    """A probe higher than the reach above every grid point near it (the rule recomputed here by slicing the grid)
    is farther than the reach from the surface (brute force over six cells, farther than any point here is from
    it), gets its height above them, an upward normal and no row; every other probe gets exactly what the full
    search gives it. On and off the grid."""
    robot, model = rough_scene
    det = ContactRowDetector(robot, model)
    field = rough_heightfield()
    gen = np.random.default_rng(3)
    xy = np.concatenate((gen.uniform([-18.5, -15.5], [18.5, 15.5], size=(300, 2)),  # the tiles and the border
                         _around_the_edge(field, 100, seed=4)))  # within a metre of the grid's edge, on and off it
    z = field.height_at(xy) + gen.uniform(-0.05, 0.55, size=len(xy))
    points = torch.tensor(np.c_[xy, z], dtype=torch.float32)
    dist, point, normal = (t[:, 0] for t in det._field_pairs(points[:, None]))  # (n,), (n, 3) x2
    full, full_point, full_normal = det._field_search(points, points)  # every point searched
    top = np.array([_top_within(field, p, det.field_reach) for p in points.double().numpy()])
    skipped = torch.as_tensor(points[:, 2].double().numpy() - top > det.field_reach)
    searched = ~skipped
    assert skipped.sum() > 100 and searched.sum() > 100
    assert torch.equal(dist[searched], full[searched]) and torch.equal(point[searched], full_point[searched])
    assert torch.equal(normal[searched], full_normal[searched])
    torch.testing.assert_close(dist[skipped].double(), torch.as_tensor(points[skipped, 2].double().numpy()
                                                                       - top[skipped.numpy()]), atol=1e-6, rtol=0)
    assert torch.equal(normal[skipped], torch.tensor([0.0, 0.0, 1.0]).expand(int(skipped.sum()), 3))
    assert torch.isfinite(point).all() and (full[skipped] > det.field_reach).all()
    for i in skipped.nonzero()[:40, 0].tolist():
        assert _nearest_on_surface(field, points[i].double().numpy(), cells=6) > det.field_reach
    assert (dist[skipped] - det.radius.max() > det.cutoff).all()  # beyond the cutoff: no row


def test_grids_narrower_than_the_window_and_nan_points(rough_scene):
    """A heightfield of 3 x 40 grid points (and 40 x 3): the search window is cut to the grid on the narrow axis only,
    and rows stay exact (against the independent closest point); a NaN probe does not stop the others' rows."""
    robot, model = rough_scene
    det = ContactRowDetector(robot, model)
    gen = np.random.default_rng(4)
    for shape in ((3, 40), (40, 3)):
        field = HeightField(gen.uniform(0.0, 0.3, size=shape), 0.1, -1.0, -1.0)
        det._search_field(field, det.cutoff)
        lo, hi = np.array([field.x0, field.y0]), np.array([field.x0, field.y0]) + 0.1 * (np.array(shape[::-1]) - 1)
        xy = gen.uniform(lo - 0.2, hi + 0.2, size=(150, 2))
        z = field.height_at(xy) + gen.uniform(0.0, 0.1, size=len(xy))
        points = torch.tensor(np.c_[xy, z], dtype=torch.float32)
        dist = det._field_pairs(points[:, None])[0][:, 0]
        ref = np.array([_nearest_on_surface(field, p, cells=6) for p in points.double().numpy()])
        near = ref < det.field_reach
        assert near.sum() > 50
        np.testing.assert_allclose(dist.numpy()[near], ref[near], atol=2e-5)
    points[0] = float("nan")
    dist, point, normal = det._field_pairs(points[:, None])
    assert torch.isfinite(dist[1:]).all() and torch.isfinite(point[1:]).all()
    assert torch.equal(det._field_height(points[:1]), torch.tensor([-math.inf]))  # off every grid


def test_rows_above_flat_patches_match_mujocos_surface(rough_scene):
    """Over the tiles' flat platforms (0.2 m or more from their edges, less than that above them) a sphere's distance is
    the gap straight down, which MuJoCo's ray cast onto the hfield measures. (`mj_geomDistance` is no reference on a
    heightfield: it reports distances to single prisms found by MPR, off by up to 15 cm here.)"""
    robot, model = rough_scene
    det = ContactRowDetector(robot, model)
    gen = np.random.default_rng(2)
    xy = tile_centers(rough_heightfield()).reshape(-1, 2).repeat(4, axis=0)
    xy = xy + gen.uniform(-0.3, 0.3, size=xy.shape)
    z = terrain_height("rough", xy) + gen.uniform(0.0, 0.15, size=len(xy))
    dist = det._field_pairs(torch.tensor(np.c_[xy, z], dtype=torch.float32)[:, None])[0][:, 0]  # (n,)
    data = mujoco.MjData(model)
    data.qpos[2] = 100.0  # the robot out of the rays' way
    mujoco.mj_forward(model, data)
    hit = np.zeros(1, dtype=np.int32)
    for i in range(len(xy)):
        down = mujoco.mj_ray(model, data, np.array([*xy[i], z[i] + 5.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1,
                             hit)
        assert model.geom(hit[0]).name in ("terrain_hfield", "floor")  # the deepest pit lies on the floor
        assert dist[i].item() == pytest.approx(down - 5.0, abs=2e-5)


def test_spawns_fall_on_the_tiles_half_of_them_on_the_platforms():
    xy = sample_spawn_xy("rough", 2000, torch.Generator().manual_seed(0))
    centers = tile_centers(rough_heightfield()).reshape(-1, 2)
    offset = np.abs(xy[:, None] - centers[None]).max(axis=2).min(axis=1)  # (n,) to the nearest tile centre
    assert (offset <= 0.375 * TILE + 1e-9).all()  # within the middle three quarters of a tile
    on_platform = (offset <= PLATFORM / 2).mean()
    assert 0.5 < on_platform < 0.7  # half start on a platform, and some of the wide half lands on one too
    nearest = centers[np.abs(xy[:, None] - centers[None]).max(axis=2).argmin(axis=1)]
    assert np.abs((xy - nearest).mean(axis=0)).max() < 0.1  # spread evenly around the centres


def test_anymal_stands_on_every_tile_of_the_rough_field_in_mujoco():
    robot = get_robot("anymal_c")
    platforms = tile_centers(rough_heightfield()).reshape(-1, 2)[::3]  # every third tile's platform: all rows, types
    centers = torch.as_tensor(platforms + np.random.default_rng(0).uniform(-0.05, 0.05, platforms.shape),
                              dtype=torch.float32)
    dyn = make_dynamics("mujoco", robot, len(centers), terrain="rough")
    qpos = torch.as_tensor(dyn.default_qpos(), dtype=torch.float32).repeat(len(centers), 1)
    qpos[:, :2] = centers
    qpos[:, 2] += torch.as_tensor(terrain_height("rough", centers.double().numpy()), dtype=torch.float32)
    dyn.reset(torch.arange(len(centers)), qpos, torch.zeros(len(centers), dyn.nv))
    start = qpos[:, 2].clone()
    for _ in range(50):
        dyn.step(torch.tensor(robot.default_joint_pos).repeat(len(centers), 1))
    state = dyn.state()
    assert (state.qpos[:, 2] > start - 0.2).all()  # standing, not fallen through
    assert (state.contact_force[:, -4:].sum(1) > 200).all()  # on its feet
    dyn.close()


def test_capsule_rows_against_the_heightfield(rough_scene):
    """Capsules clear of the surface: exactly their distance (the least over 1001 points along the segment, each
    nearest to the triangles, can only be larger, by at most the spacing); capsules into it: negative, as deep as
    the deepest of those points to within a centimetre (the detector finds it from 9 samples)."""
    from pathlib import Path

    hound = get_robot(str(Path(__file__).parent / "assets" / "hound" / "hound.yaml"))
    det = ContactRowDetector(hound, build_scene(hound, "rough"))
    field = rough_heightfield()
    gen = np.random.default_rng(0)
    n = 120
    middle = gen.uniform([-17.0, -14.0], [17.0, 14.0], size=(n, 2))
    axis = gen.normal(size=(n, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    half = gen.uniform(0.025, 0.1, size=(n, 1))
    center = np.c_[middle, field.height_at(middle) + gen.uniform(-0.05, 0.15, size=n)]
    a = torch.tensor(center - half * axis, dtype=torch.float32)[:, None]  # (n, 1, 3)
    b = torch.tensor(center + half * axis, dtype=torch.float32)[:, None]
    dist, point, normal, t = det._field_segment_pairs(a, b)
    samples = a + torch.linspace(0, 1, 1001)[None, :, None] * (b - a)  # (n, 1001, 3)
    dense = torch.stack([det._field_pairs(samples[i:i + 1])[0][0].min() for i in range(n)])  # (n,)
    clear, into = dense > 1e-3, dense < -1e-3
    assert clear.sum() > 30 and into.sum() > 30
    assert (dist[clear, 0] <= dense[clear] + 1e-6).all() and (dist[clear, 0] >= dense[clear] - 3e-4).all()
    assert (dist[into, 0] < 0).all() and torch.allclose(dist[into, 0], dense[into], atol=0.01)
    gap = torch.linalg.norm(a[:, 0] + t[:, :1] * (b - a)[:, 0] - point[:, 0], dim=-1)  # segment point to surface
    assert torch.allclose(gap[clear], dist[clear, 0], atol=1e-5)  # the row's point is where the distance is
    assert torch.allclose(torch.linalg.norm(normal[:, 0], dim=-1), torch.ones(n), atol=1e-5)


ROUGH = "FlashNeRD-Velocity-Rough-Anymal-C-v0"


def test_the_rough_task_starts_every_robot_on_its_tile_with_a_height_scan():
    import gymnasium as gym

    import flashnerd_tasks  # noqa: F401

    env = gym.make(ROUGH, num_envs=12).unwrapped
    obs, _ = env.reset()
    assert obs["policy"].shape == (12, 48 + 17 * 11) and obs["critic"].shape == (12, 48 + 17 * 11)
    levels = env.trackers["terrain"]
    qpos = env.state.qpos
    assert ((qpos[:, :2] - levels.origins[:, :2]).abs() <= 0.5 + 1e-6).all()  # on its tile's platform
    ground = terrain_height("rough", qpos[:, :2].double().numpy())
    assert np.allclose(qpos[:, 2].numpy() - ground, get_robot("anymal_c").init_base_height, atol=1e-5)
    assert set(levels.column.tolist()) == set(range(len(TYPES)))  # every sub-terrain has robots
    # the scan: base height over the terrain at 17 x 11 points 0.1 m apart, turned with the heading, less 0.5 m
    scan = obs["critic"][:, -17 * 11:].numpy()
    w, x, y, z = qpos[:, 3:7].double().numpy().T
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    gx, gy = np.meshgrid(np.linspace(-0.8, 0.8, 17), np.linspace(-0.5, 0.5, 11), indexing="ij")
    gx, gy = gx.ravel(), gy.ravel()  # x-major, as the scan orders its points
    for i in range(12):
        px = qpos[i, 0].item() + np.cos(yaw[i]) * gx - np.sin(yaw[i]) * gy
        py = qpos[i, 1].item() + np.sin(yaw[i]) * gx + np.cos(yaw[i]) * gy
        want = np.clip(qpos[i, 2].item() - terrain_height("rough", np.c_[px, py]) - 0.5, -1.0, 1.0)
        np.testing.assert_allclose(scan[i], want, atol=1e-4)


def test_the_terrain_curriculum_moves_walkers_up_and_idlers_down():
    import gymnasium as gym

    import flashnerd_tasks  # noqa: F401

    env = gym.make(ROUGH, num_envs=6).unwrapped
    levels = env.trackers["terrain"]
    levels.level[:] = torch.tensor([0, 1, 2, 3, 4, 2])
    levels._place(torch.arange(6))
    env.command_manager.command[:, :2] = torch.tensor([1.0, 0.0])
    env.episode_length_buf[:] = 10
    qpos, qvel = env.state.qpos.clone(), torch.zeros_like(env.state.qvel)
    qpos[:, :2] = levels.origins[:, :2]
    qpos[[0, 1, 4], 0] += TILE / 2 + 0.5  # walked past half a tile
    env.dyn.reset(torch.arange(6), qpos, qvel)
    before = levels.level.clone()
    levels.reset(torch.arange(6))
    assert levels.level[:2].tolist() == [1, 2]  # up a level
    assert levels.level[2:4].tolist() == [1, 2] and levels.level[5] == 1  # idled: down a level
    assert 0 <= levels.level[4] < LEVELS and before[4] == LEVELS - 1  # past the hardest: a random level
    play = gym.make(ROUGH.replace("-v0", "-Play-v0")).unwrapped.trackers["terrain"]
    assert not play.curriculum
    # where a run ended: the mean level over every world (what bench ppo reports as a run's terrain level)
    assert env.tracker_state() == {"Curriculum/terrain_levels": pytest.approx(levels.level.float().mean().item())}


def test_the_rough_task_runs_on_mjwarp_and_on_a_rows_model_fitted_on_rough_terrain(tmp_path):
    import dataclasses

    import gymnasium as gym

    import flashnerd_tasks  # noqa: F401
    from flashnerd.data.record import record
    from flashnerd.training.fit import FitConfig, Fitter

    robot = get_robot("anymal_c")
    data = tmp_path / "rough.h5"
    info = record(robot, num_worlds=6, steps=40, out=data, traj_len=20, seed=3, progress=False, terrain="rough")
    assert info["trajectories"] == 12
    ckpt = tmp_path / "rough.safetensors"
    cfg = dataclasses.replace(FitConfig(), contacts="rows", max_steps=3, batch_size=8, ar_batch_size=4, window=8,
                              eval_every=2, contact_head_steps=0)
    Fitter(data, cfg).fit(ckpt, progress=False)
    for dynamics, extra in (("mjwarp", {}), ("flashnerd", {"checkpoint": str(ckpt)})):
        env = gym.make(ROUGH, num_envs=4, dynamics=dynamics, **extra).unwrapped
        for _ in range(3):
            obs, reward, *_ = env.step(torch.zeros(4, 12))
        assert torch.isfinite(obs["policy"]).all() and torch.isfinite(reward).all(), dynamics
        if dynamics == "flashnerd":
            assert env.dyn.probes.field is not None  # the model's contact rows see the heightfield


def test_bench_ppo_on_the_rough_task_ends_at_max_seconds_and_reports_the_terrain_level(tmp_path, capsys):
    from flashnerd.cli.main import main

    out = tmp_path / "bench"
    argv = ["bench", "ppo", "--task", ROUGH, "--dynamics", "mujoco", "--num_envs", "4", "--max_iterations", "3",
            "--max_seconds", "1e-6", "--eval_episodes", "1", "--out_dir", str(out)]
    assert main(argv) == 0
    data = json.loads((out / "bench_ppo.json").read_text())
    run = data["backends"]["mujoco"]
    assert data["max_seconds"] == 1e-6 and run["iterations"] == len(run["curve"]) == 1
    run_dir = out / "bench_ppo" / "mujoco"
    assert (run_dir / "model_0.pt").is_file() and not (run_dir / "model_2.pt").exists()
    assert 0.0 <= run["tracker_state"]["Curriculum/terrain_levels"] <= LEVELS - 1
    assert run["machine"] == describe_machine("cpu")  # every run names its machine: --resume may add runs from others


def test_restored_terrain_levels_place_every_world_on_its_saved_tile_and_bad_ones_are_refused():
    import gymnasium as gym

    import flashnerd_tasks  # noqa: F401

    env = gym.make(ROUGH, num_envs=4).unwrapped
    levels = env.trackers["terrain"]
    for _ in range(3):  # steps into an episode: restoring still moves no level
        env.step(torch.zeros(4, 12))
    saved = {"terrain": {"level": [4, 0, 3, 4]}}
    env.restore_trackers(saved)
    assert levels.level.tolist() == [4, 0, 3, 4] and env.tracker_checkpoint() == saved
    tiles = levels.centers[levels.level, levels.column]  # (4, 2) the saved levels' tile centres
    assert torch.allclose(levels.origins[:, :2], tiles)
    assert (env.state.qpos[:, :2] - tiles).norm(dim=1).max() < TILE / 2  # every robot starts on its tile
    assert env.episode_length_buf.eq(0).all()  # a fresh episode there
    env.restore_trackers({"terrain": {"level": [2, 1, 0]}})  # a run of another world count: its levels in turn
    assert levels.level.tolist() == [2, 1, 0, 2]
    for bad in ({"terrain": {"level": []}}, {"terrain": {"level": [4, 0, 3, LEVELS]}},
                {"terrain": {"level": [4, 0, 3, True]}}, {"terrain": {"level": [4, 0, 3, 1.0]}},
                {"terrain": {"level": [-1]}}, {"terrain": "x"}):
        with pytest.raises(ValueError, match="not a list of levels in 0-"):
            env.restore_trackers(bad)
    with pytest.raises(ValueError, match="not a mapping"):
        env.restore_trackers([1, 2])
    assert levels.level.tolist() == [2, 1, 0, 2]  # a refused state changes nothing
    env.close()


def test_a_resumed_run_continues_the_terrain_curriculum_where_its_checkpoint_left_it(tmp_path):
    """Each world's level goes with every policy checkpoint: a run that had finished training reports the levels it
    ended on (not a fresh env's), and one that trains further starts each world on its saved level."""
    from flashnerd.envs.registry import task_cfgs
    from flashnerd.envs.rsl_rl import train_policy

    env_cfg, agent_cfg = task_cfgs(ROUGH, num_envs=4, seed=5)
    agent_cfg.num_steps_per_env, agent_cfg.max_iterations, agent_cfg.save_interval = 3, 2, 1
    log_dir = tmp_path / "stage"
    runner, _ = train_policy(ROUGH, env_cfg, agent_cfg, str(log_dir), 2)
    last = log_dir / "model_1.pt"
    ckpt = torch.load(last, weights_only=True)
    ended = runner.tracker_state["Curriculum/terrain_levels"]
    assert np.mean(ckpt["infos"]["trackers"]["terrain"]["level"]) == pytest.approx(ended) != 3.75
    ckpt["infos"]["trackers"]["terrain"]["level"] = [4, 4, 4, 3]  # levels no fresh env of this seed starts on
    torch.save(ckpt, last)
    runner, _ = train_policy(ROUGH, env_cfg, agent_cfg, str(log_dir), 2, resume=True)  # nothing left to train
    assert runner.resumed_at == 2 and runner.tracker_state["Curriculum/terrain_levels"] == pytest.approx(3.75)
    train_policy(ROUGH, env_cfg, agent_cfg, str(log_dir), 3, resume=True)  # 3 steps: no episode ends
    resumed = torch.load(log_dir / "model_2.pt", weights_only=True)["infos"]["trackers"]["terrain"]["level"]
    assert resumed == [4, 4, 4, 3]
