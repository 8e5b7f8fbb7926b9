"""Variable contacts: terrain scenes, contact rows against MuJoCo's collision pipeline, the contact encoder, and the
variable-contact FlashNeRD from fitting to the learned backend on another terrain."""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np
import pytest
import torch

from flashnerd.contacts import ContactRowDetector, contact_features
from flashnerd.contacts.rows import DISTANCE_SCALE, POINT_SCALE
from flashnerd.models import FlashNeRD, FlashNeRDConfig
from flashnerd.models.contact_encoder import ContactEncoder
from flashnerd.sim.scene import build_scene, build_scene_spec, default_qpos
from flashnerd.sim.terrain import PLATFORM_HEIGHTS, Box, surface_height, terrain_boxes
from flashnerd.utils.math import quat_apply, quat_from_euler_xyz

CUTOFF = 0.05


def test_terrains_build_and_unknown_is_one_line_error(anymal):
    model = build_scene(anymal, "platforms")
    tops = [model.geom_pos[g][2] + model.geom_size[g][2] for g in range(model.ngeom)
            if model.geom(g).name.startswith("terrain_")]
    np.testing.assert_allclose(sorted(tops), PLATFORM_HEIGHTS, atol=1e-9)
    assert max(tops) == pytest.approx(0.181)
    assert terrain_boxes("blocks") == terrain_boxes("blocks")  # a fixed field: recordings agree with the model
    with pytest.raises(ValueError, match="unknown terrain 'lava'; choose one of"):
        build_scene(anymal, "lava")
    box = Box((1.0, 0.0, 0.05), (0.5, 0.5, 0.05))
    np.testing.assert_allclose(surface_height([box], np.array([[1.2, 0.1], [2.0, 0.0]])), [0.1, 0.0])


def _states_near_platforms(anymal, model, n: int, seed: int) -> torch.Tensor:
    """Standing poses with joint noise, random lane, position, heading and height, so feet touch, hover near and
    press into platform tops, edges and sides as well as the ground."""
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: torch.rand(*s, generator=g)  # noqa: E731
    qpos = torch.as_tensor(default_qpos(anymal, model), dtype=torch.float32).repeat(n, 1)
    lane = torch.randint(0, len(PLATFORM_HEIGHTS), (n,), generator=g)
    qpos[:, 0] = 0.2 + 1.0 * u(n)  # base over the near edge (x = 0.75) give or take the body length
    qpos[:, 1] = lane * 3.0 + (u(n) - 0.5)
    qpos[:, 2] = 0.5 + 0.25 * u(n)
    qpos[:, 3:7] = quat_from_euler_xyz(0.2 * (u(n) - 0.5), 0.4 * (u(n) - 0.5), 2 * torch.pi * u(n))
    qpos[:, 7:] += 0.6 * (u(n, qpos.shape[1] - 7) - 0.5)
    return qpos


def _mujoco_foot_contacts(anymal, model, qpos: np.ndarray) -> list[tuple[str, float, np.ndarray, np.ndarray]]:
    """(foot body, distance, point, normal from the scene to the foot) of every foot-scene contact MuJoCo reports
    within CUTOFF."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_forward(model, data)
    out = []
    for c in data.contact[:data.ncon]:
        b1, b2 = model.geom_bodyid[c.geom1], model.geom_bodyid[c.geom2]
        names = model.body(b1).name, model.body(b2).name
        foot = [i for i in (0, 1) if names[i].endswith("_FOOT")]
        if len(foot) != 1 or (b2 if foot[0] == 0 else b1) != 0:  # foot against the world body (floor, terrain)
            continue
        normal = np.array(c.frame[:3]) * (-1.0 if foot[0] == 0 else 1.0)  # MuJoCo's normal points geom1 -> geom2
        if c.dist < CUTOFF:
            out.append((names[foot[0]], float(c.dist), np.array(c.pos), normal))
    return out


def test_contact_rows_match_mujoco_collisions_with_platforms(anymal):
    spec = build_scene_spec(anymal, "platforms")
    for geom in spec.geoms:  # MuJoCo then reports every pair closer than the cutoff (margins set before compiling,
        geom.margin = CUTOFF  # so its bounding volumes include them)
    model = spec.compile()
    det = ContactRowDetector(anymal, model, max_rows=64, cutoff=CUTOFF)
    qpos = _states_near_platforms(anymal, model, 200, seed=0)
    rows = det.detect(qpos, torch.zeros(qpos.shape[0], model.nv))
    feet = [f"{leg}_FOOT" for leg in ("LF", "RF", "LH", "RH")]
    bodies = list(dict.fromkeys(p.body for p in anymal.probes))
    compared = edges = 0
    for i in range(qpos.shape[0]):
        expected = _mujoco_foot_contacts(anymal, model, qpos[i].double().numpy())
        r = rows.rows[i, rows.mask[i]]  # (n, F)
        body = [bodies[j] for j in r[:, :len(bodies)].argmax(dim=1).tolist()]
        mine = [k for k, b in enumerate(body) if b in feet]
        assert len(mine) == len(expected), (i, len(mine), len(expected))  # count
        quat = qpos[i, 3:7].expand(len(r), 4)
        point = (qpos[i, :3] + quat_apply(quat, r[:, len(bodies):len(bodies) + 3] * POINT_SCALE)).double().numpy()
        normal = quat_apply(quat, r[:, len(bodies) + 3:len(bodies) + 6]).double().numpy()
        dist = (r[:, len(bodies) + 6] * DISTANCE_SCALE).double().numpy()
        for name, d, pos, n in expected:
            cand = [k for k in mine if body[k] == name]
            k = min(cand, key=lambda k: abs(dist[k] - d))
            assert abs(dist[k] - d) < 2e-5, (i, name, dist[k], d)
            np.testing.assert_allclose(normal[k], n, atol=1e-4)
            # MuJoCo places the point midway between the surfaces; the row holds the point on the scene's surface
            np.testing.assert_allclose(point[k] + 0.5 * d * normal[k], pos, atol=1e-4)
            compared += 1
            edges += abs(n[2]) < 0.99  # contacts on a platform's side or edge, not a flat top
    assert compared > 300 and edges > 10, (compared, edges)  # the sample reaches edges and sides, not just tops


def test_boxes_far_from_the_batch_are_skipped_without_changing_the_rows(anymal):
    """A planning batch around one platform tests its spheres against that platform only, with the same rows."""
    model = build_scene(anymal, "platforms")
    qpos = _states_near_platforms(anymal, model, 64, seed=3)
    qpos[:, 1] = 2 * 3.0 + (qpos[:, 1] - qpos[:, 1].round())  # every state on lane 2
    qvel = 0.3 * torch.randn(64, model.nv, generator=torch.Generator().manual_seed(4))
    det = ContactRowDetector(anymal, model)
    near = det._near_boxes(det._ends(qpos))
    assert near is not None and near.tolist() == [2]  # platform 2 alone
    assert det._near_boxes(det._ends(_states_near_platforms(anymal, model, 64, seed=3))) is None
    pruned, dist = det._detect(qpos, qvel)
    det._near_boxes = lambda centers: None  # every box
    full, full_dist = det._detect(qpos, qvel)
    assert int(full.mask.sum()) > 64  # feet on and near the platform
    torch.testing.assert_close(pruned.packed(), full.packed(), atol=0, rtol=0)
    close = full_dist < det.cutoff
    torch.testing.assert_close(dist[close], full_dist[close], atol=0, rtol=0)


def test_compiled_contact_features_match_eager_ones(anymal):
    """`compile=True` (planning) changes the speed, not the features: rows, probes and kinematics as in eager mode."""
    from flashnerd.planning.climb import ClimbPlanCfg, ClimbReward

    model = build_scene(anymal, "platforms")
    qpos = _states_near_platforms(anymal, model, 32, seed=5)
    qpos[:, 1] = 3 * 3.0 + (qpos[:, 1] - qpos[:, 1].round())  # one lane, as in a planning batch
    qvel = 0.3 * torch.randn(32, model.nv, generator=torch.Generator().manual_seed(6))
    for mode in ("rows", "probes"):
        eager = contact_features(anymal, model, mode=mode)
        fused = contact_features(anymal, model, mode=mode, compile=True)
        (f0, d0), (f1, d1) = eager.features_and_distance(qpos, qvel), fused.features_and_distance(qpos, qvel)
        assert (f0 != 0).sum() > 32  # contacts are there to compare
        # velocities are finite differences over 1 ms: float rounding of the fused positions shows up as ~1e-3 m/s
        torch.testing.assert_close(f1, f0, atol=3e-3, rtol=0)
        torch.testing.assert_close(d1, d0, atol=1e-5, rtol=0)
    cfg = ClimbPlanCfg()
    fused, eager = ClimbReward(cfg, anymal, model, lane=3), ClimbReward(dataclasses.replace(cfg, compile=False),
                                                                       anymal, model, lane=3)
    for t in (0.0, 0.13, 0.37):  # swinging and standing feet
        r0, r1 = fused(qpos, qvel, t), eager(qpos, qvel, t)
        assert r0.shape == (32,) and bool((r0 != r0[0]).any())
        torch.testing.assert_close(r0, r1, atol=1e-4, rtol=1e-5)


def test_a_compiled_learned_backend_steps_as_the_eager_one(anymal):
    """`compile=True` also fuses the input frame and the integration of the increment around the model call (the
    planning step); states and torques follow the eager backend's to float rounding over a few steps."""
    from flashnerd.dynamics import make_dynamics

    model = build_scene(anymal, "platforms")
    qpos = _states_near_platforms(anymal, model, 8, seed=7)
    gen = torch.Generator().manual_seed(8)
    qvel = 0.3 * torch.randn(8, model.nv, generator=gen)
    backends = [make_dynamics("flashnerd", anymal, 8, terrain="platforms", compile=c) for c in (False, True)]
    ctrls = torch.tensor(anymal.default_joint_pos) + 0.3 * torch.randn(4, 8, anymal.num_joints, generator=gen)
    for dyn in backends:
        dyn.reset(torch.arange(8), qpos, qvel)
    for ctrl in ctrls:
        for dyn in backends:
            dyn.step(ctrl)
        eager, fused = (dyn.state() for dyn in backends)
        torch.testing.assert_close(fused.qpos, eager.qpos, atol=2e-4, rtol=0)
        torch.testing.assert_close(fused.qvel, eager.qvel, atol=5e-3, rtol=0)
        torch.testing.assert_close(fused.joint_torque, eager.joint_torque, atol=2e-2, rtol=1e-4)
    assert float((eager.qpos - qpos).abs().max()) > 1e-2  # the worlds moved


def test_rows_are_nearest_first_and_overflow_counts_what_was_cut(anymal):
    model = build_scene(anymal, "flat")
    qpos = torch.as_tensor(default_qpos(anymal, model), dtype=torch.float32)[None].repeat(2, 1)
    qpos[1, 2] += 1.0  # in the air: no contacts
    full = ContactRowDetector(anymal, model, max_rows=16).detect(qpos, torch.zeros(2, model.nv))
    cut = ContactRowDetector(anymal, model, max_rows=2).detect(qpos, torch.zeros(2, model.nv))
    n_full = int(full.mask[0].sum())
    assert n_full >= 4 and full.mask[1].sum() == 0 and torch.all(full.rows[1] == 0)
    assert cut.overflow.tolist() == [n_full - 2, 0]
    d = full.rows[0, :n_full, -5]  # distance column, nearest first
    assert torch.all(d[1:] >= d[:-1])
    torch.testing.assert_close(cut.rows[0, :, -5], d[:2])  # the two nearest were kept (feet tie, so compare distances)


def test_rows_carry_the_velocity_of_the_contact_sphere(anymal):
    model = build_scene(anymal, "flat")
    det = ContactRowDetector(anymal, model)
    qpos = torch.as_tensor(default_qpos(anymal, model), dtype=torch.float32)[None]
    qvel = torch.zeros(1, model.nv)
    qvel[0, 0] = 0.7  # the whole robot slides forward: every sphere moves at 0.7 m/s along the base x axis
    r = det.detect(qpos, qvel)
    vel = r.rows[0, r.mask[0], -4:-1]  # (n, 3) relative velocity columns
    torch.testing.assert_close(vel, torch.tensor([0.7, 0.0, 0.0]).expand_as(vel), atol=2e-3, rtol=0)


def test_encoder_is_permutation_invariant_and_ignores_padding_exactly():
    torch.manual_seed(0)
    enc = ContactEncoder(row_dim=6, n_embd=16, slots=3).eval()
    rows = torch.randn(4, 8, 6)
    mask = torch.rand(4, 8) < 0.6
    mask[0] = False  # a frame without contacts
    out = enc(rows, mask)
    perm = torch.randperm(8)
    torch.testing.assert_close(enc(rows[:, perm], mask[:, perm]), out, atol=1e-6, rtol=0)
    garbage = torch.where(mask[..., None], rows, torch.full_like(rows, 1e4))
    garbage[0, 0] = float("nan")  # even NaN in a padded row changes nothing
    assert torch.equal(enc(garbage, mask), out)
    assert torch.equal(out[0], enc(torch.zeros(1, 8, 6), torch.zeros(1, 8, dtype=torch.bool))[0])
    some = mask.clone()
    some[1, mask[1].nonzero()[0]] = False  # dropping a real contact does change the embedding
    assert not torch.allclose(enc(rows, some)[1], out[1])


def test_encoder_compiles_to_one_graph_and_matches_the_eager_trimmed_result():
    """Under torch.compile(fullgraph=True) the encoder has no host sync (a graph break would raise); it encodes every
    row there, and the result equals the eager CPU path, which skips the trailing rows empty in every frame."""
    torch.manual_seed(0)
    enc = ContactEncoder(row_dim=6, n_embd=16, slots=3).eval()
    rows = torch.randn(5, 8, 6)
    mask = torch.zeros(5, 8, dtype=torch.bool)
    mask[:, :3] = torch.rand(5, 3) < 0.7  # rows 3..7 are empty everywhere: eager trims them
    compiled = torch.compile(enc, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(rows, mask), enc(rows, mask), atol=1e-6, rtol=0)


def test_variable_contact_flashnerd_streams_like_its_training_forward():
    torch.manual_seed(0)
    R, F = 5, 4
    cfg = FlashNeRDConfig(7 + R * (F + 1), 5, n_layer=2, n_head=2, n_embd=16, span=3, readout_hidden=16,
                          contact_rows=R, contact_row_dim=F, contact_slots=2)
    model = FlashNeRD(cfg).eval()
    rows = torch.randn(2, 12, R, F)
    mask = torch.rand(2, 12, R) < 0.5
    x = torch.cat((torch.randn(2, 12, 7), torch.cat((rows * mask[..., None], mask[..., None].float()), -1)
                   .flatten(-2)), dim=-1)  # (B, T, 7 + R (F + 1))
    with torch.no_grad():
        full = model(x)
        cache = model.init_cache(2)
        streamed = torch.stack([model.step(x[:, t], cache) for t in range(12)], dim=1)
        moved = x.clone()
        moved[..., 7:] = x[..., 7:].unflatten(-1, (R, F + 1)).flip(-2).flatten(-2)  # rows in another order
        flipped = model(moved)
    torch.testing.assert_close(streamed, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(flipped, full, atol=1e-5, rtol=0)


def test_fit_with_contact_rows_runs_on_another_terrain(tmp_path, anymal):
    from flashnerd.data.record import record
    from flashnerd.dynamics import make_dynamics
    from flashnerd.training.fit import FitConfig, Fitter

    data = tmp_path / "blocks.h5"
    record(anymal, 8, 24, data, traj_len=24, seed=0, progress=False, terrain="blocks")
    with pytest.raises(ValueError, match="need the flashnerd model"):
        Fitter(data, FitConfig(model="nerd", contacts="rows", max_steps=1))
    fitter = Fitter(data, FitConfig(contacts="rows", max_rows=8, max_steps=2, eval_every=1, ar_history=4,
                                    ar_steps=2, window=8))
    assert torch.all(fitter.x_norm.mean[-fitter.probes.dim:] == 0)  # packed rows are not re-normalized per slot
    fitter.fit(tmp_path / "rows.safetensors", progress=False)
    dyn = make_dynamics("flashnerd", anymal, 3, checkpoint=tmp_path / "rows.safetensors", terrain="platforms")
    assert dyn.contact_mode == "rows" and isinstance(dyn.probes, ContactRowDetector)
    qpos = torch.as_tensor(dyn.default_qpos(), dtype=torch.float32).repeat(3, 1)
    dyn.reset(torch.arange(3), qpos, torch.zeros(3, dyn.nv))
    dyn.step(torch.tensor(anymal.default_joint_pos).repeat(3, 1))
    assert torch.isfinite(dyn.state().qpos).all()
    probes = contact_features(anymal, build_scene(anymal, "platforms"))  # fixed mode: the ground plane only
    assert probes.dim == 8 * len(anymal.probes)
