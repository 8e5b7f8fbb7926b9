"""Record trajectories from the analytical backend into an HDF5 dataset.

Two sources of controls, one file format:
- exploration (`ExplorationSource`): each trajectory starts from a randomized pose and velocity and runs `traj_len`
  control steps of PD targets around the default pose with a per-trajectory amplitude and random hold times;
- a policy (`PolicySource`): a trained policy drives a task environment on an analytical backend with per-world
  Gaussian action noise, so the data covers the states a policy visits (gaits at commanded velocities). Worlds run
  on across trajectories; a trajectory during which its world was reset (a fall) is dropped, not cut, and in its
  place the `traj_len` steps that end in the fall are kept, the state the world fell into included (they begin in
  the previous batch, and replace that batch's trajectory of the world where they overlap it), so the data holds
  the states that lead to falls and the falls themselves, not only the walks that never fell. A batch of a
  continuous source is written once the next one has taken out the trajectories its falls replace.

The file layout and attributes are documented once, in docs/reference/dataset.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import h5py
import numpy as np
import torch
from tqdm import tqdm

from flashnerd.contacts import contact_features
from flashnerd.data.dataset import concat_files, dataset_attrs, plain_attr, sane_trajectories, write_arrays
from flashnerd.dynamics import REFERENCE_BACKEND, backend_info, check_backend, make_dynamics
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.robots import RobotSpec
from flashnerd.sim.scene import actuator_ctrl_limits
from flashnerd.sim.terrain import sample_spawn_xy, terrain_height
from flashnerd.utils.atomic import write_text_atomic
from flashnerd.utils.math import quat_from_euler_xyz


def _sample_initial_state(dyn, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random states around the default pose (n worlds): joint positions default + U[-1, 1] * init_joint_noise,
    velocities U[-1, 1] * init_vel_noise; a floating base also gets a random height, roll/pitch and heading."""
    robot = dyn.robot
    qpos = torch.as_tensor(dyn.default_qpos(), dtype=torch.float32).repeat(n, 1)  # (n, nq)
    u = lambda *shape: torch.rand(*shape, generator=gen)  # noqa: E731
    q0 = 0
    if robot.floating_base:
        q0 = 7
        lo, hi = robot.init_height_range
        qpos[:, 2] = robot.init_base_height + lo + (hi - lo) * u(n)
        rp = (u(n, 2) - 0.5) * 2 * robot.init_tilt
        qpos[:, 3:7] = quat_from_euler_xyz(rp[:, 0], rp[:, 1], (u(n) - 0.5) * 2 * math.pi)
    noise = torch.as_tensor(robot.init_joint_noise, dtype=torch.float32)  # () or (nj,)
    qpos[:, q0:] += (u(n, dyn.nq - q0) - 0.5) * 2 * noise
    qvel = (u(n, dyn.nv) - 0.5) * 2 * robot.init_vel_noise  # (n, nv)
    return qpos, qvel


class ExplorationController:
    """PD targets = default + amplitude * U[-1, 1] (within the actuators' ctrlrange), each actuator held for a random
    1-10 steps (batched); the amplitude is drawn per trajectory up to the robot's `explore_amplitude`."""

    def __init__(self, robot: RobotSpec, n: int, gen: torch.Generator,
                 ctrl_range: torch.Tensor | None = None) -> None:
        self.default = torch.tensor(robot.default_joint_pos)
        self.n, self.nj, self.gen = n, robot.num_joints, gen
        self.max_amplitude = robot.explore_amplitude
        inf = torch.full((self.nj,), math.inf)
        self.low, self.high = (-inf, inf) if ctrl_range is None else (ctrl_range[:, 0], ctrl_range[:, 1])
        self.amplitude = torch.zeros(n, 1)
        self.target = self.default.repeat(n, 1)
        self.hold = torch.zeros(n, self.nj, dtype=torch.long)

    def reset(self) -> None:
        u = torch.rand(self.n, 1, generator=self.gen)  # (n, 1) per trajectory
        self.amplitude = self.max_amplitude * (0.0625 + 0.9375 * u)  # ANYmal (0.8): 0.05 + 0.75 u
        self.hold.zero_()

    def __call__(self) -> torch.Tensor:
        redraw = self.hold <= 0  # (n, nj)
        fresh = self.default + self.amplitude * (2 * torch.rand(self.n, self.nj, generator=self.gen) - 1)
        fresh = torch.maximum(torch.minimum(fresh, self.high), self.low)  # (n, nj)
        self.target = torch.where(redraw, fresh, self.target)
        self.hold = torch.where(redraw, torch.randint(1, 11, (self.n, self.nj), generator=self.gen), self.hold - 1)
        return self.target.clone()


class ExplorationSource:
    """Random initial states and `ExplorationController` targets on an analytical backend of `num_worlds` worlds."""

    kind = "exploration"
    continuous = False  # every trajectory starts from a state of its own

    def __init__(self, robot: RobotSpec, num_worlds: int, gen: torch.Generator, nthread: int | None = None,
                 backend: str = REFERENCE_BACKEND, device: str = "cpu", terrain: str = "flat") -> None:
        check_backend(backend, what="recording", analytical=True)
        if terrain != "flat" and not robot.floating_base:
            raise ValueError(f"robot '{robot.name}' has a fixed base; record it on the flat terrain")
        kwargs = {"nthread": nthread} if "nthread" in backend_info(backend).options() else {}
        self.dyn = make_dynamics(backend, robot, num_worlds, device=device, terrain=terrain, **kwargs)
        self.terrain = terrain
        ctrl_range = torch.as_tensor(actuator_ctrl_limits(self.dyn.scene), dtype=torch.float32)  # (nu, 2)
        self.controller = ExplorationController(robot, num_worlds, gen, ctrl_range)
        self.n, self.gen = num_worlds, gen
        self.identity = {"backend": backend}  # what the data depends on besides the robot and the recording's shape

    def start_trajectory(self) -> None:
        qpos, qvel = _sample_initial_state(self.dyn, self.n, self.gen)
        if self.terrain != "flat":  # anywhere on the terrain, above its surface
            xy = sample_spawn_xy(self.terrain, self.n, self.gen)  # (n, 2)
            qpos[:, 0:2] = torch.as_tensor(xy, dtype=torch.float32)
            qpos[:, 2] += torch.as_tensor(terrain_height(self.terrain, xy), dtype=torch.float32)
        self.dyn.reset(torch.arange(self.n), qpos, qvel)
        self.controller.reset()

    def step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance one control step; returns the applied targets (N, nu) and which worlds were reset (N,)."""
        ctrl = self.controller()  # (N, nu) on the CPU, where the generator lives
        self.dyn.step(ctrl.to(self.dyn.device))
        return ctrl, torch.zeros(self.n, dtype=torch.bool)

    def close(self) -> None:
        self.dyn.close()


class PolicySource:
    """A policy drives a task env (analytical backend, no interval pushes) with per-world action noise.

    Each world draws its noise std uniformly from [0, action_noise] at every trajectory start, so the data holds
    clean gaits and perturbed ones. `policy` maps the env's observation dict to actions (N, na); `identity` names
    what the data depend on besides the robot and the recording's shape (task, the policy's digest, overrides), which
    a resumed recording must repeat.
    """

    kind = "policy"
    continuous = True  # worlds walk on from one trajectory into the next

    def __init__(self, env, policy, action_noise: float, gen: torch.Generator, identity: dict | None = None) -> None:
        self.env, self.policy, self.action_noise, self.gen = env, policy, action_noise, gen
        self.identity = {**(identity or {}), "action_noise": action_noise, "backend": env.cfg.dynamics}
        env.keep_final_state = True  # the state a fall ended in, before the reset: the step into it is data
        self.terrain = env.cfg.terrain
        self.dyn, self.n = env.dyn, env.num_envs
        self.noise_std = torch.zeros(env.num_envs, 1)
        self._started = False

    def start_trajectory(self) -> None:
        if not self._started:  # worlds keep walking across trajectories; only the first start resets them
            self.env.reset()
            self._started = True
        self.noise_std = self.action_noise * torch.rand(self.n, 1, generator=self.gen)  # (N, 1)

    @torch.no_grad()
    def step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance one control step; returns the applied targets (N, nu) and which worlds were reset (N,)."""
        env = self.env
        actions = self.policy(env.get_observations()).to(torch.float32)  # (N, na)
        noise = self.noise_std * torch.randn(actions.shape, generator=self.gen)  # (N, na) drawn on the CPU generator
        actions = actions + noise.to(actions.device)
        _, _, terminated, truncated, _ = env.step(actions)
        ctrl = env.targets_sent  # (N, nu) what the backend received, within the control ranges (before resets)
        return ctrl, terminated | truncated

    @property
    def final_state(self):
        """After a step with resets, the `RobotState` every world ended that step in (a reset world's before its
        reset); None after a step without."""
        return self.env.final_state

    def close(self) -> None:
        self.env.close()


def _chunk_seed(seed: int, chunk: int) -> int:
    """Each trajectory batch draws from its own stream, so a resumed exploration recording repeats the uninterrupted
    one (a policy-driven one starts its worlds afresh: their walk across batches is not kept)."""
    return (seed * 1_000_003 + chunk * 7_919) % (2**63)


def partial_path(out: str | Path) -> Path:
    """The folder an unfinished recording of `out` keeps its complete batches in."""
    out = Path(out)
    return out.with_name(out.name + ".parts")


def record(robot: RobotSpec, num_worlds: int, steps: int, out: str | Path, traj_len: int = 100, seed: int = 0,
           nthread: int | None = None, progress: bool = True, source=None, resume: bool = False,
           backend: str = REFERENCE_BACKEND, device: str = "cpu", terrain: str = "flat") -> dict:
    """Record `num_worlds` worlds for `steps` control steps each, cut into `traj_len`-step trajectories.

    `source` supplies the controls (default: `ExplorationSource` on `backend`/`device`/`terrain`); it is closed when
    recording ends. Each batch of trajectories is written to its own file in `<out>.parts/` (renamed into place when
    complete); at the end they are concatenated into `out` and the folder is removed. An error deletes the folder;
    Ctrl-C or a killed process (SIGKILL included) leaves it holding every complete batch, and `resume=True`
    continues from there.
    """
    if num_worlds < 1 or steps < 1 or traj_len < 1:
        raise ValueError("num_worlds, steps and traj_len must be positive")
    out = Path(out)
    parts = partial_path(out)
    if resume and not parts.is_dir():
        raise ValueError(f"--resume: no unfinished recording '{parts}' to continue"
                         + ("" if not out.exists() else f" ('{out}' is complete)"))
    gen = torch.Generator().manual_seed(seed)
    if source is None:
        source = ExplorationSource(robot, num_worlds, gen, nthread=nthread, backend=backend, device=device,
                                   terrain=terrain)
    dyn = source.dyn
    probes = contact_features(robot, dyn.scene)
    rep = StateRepresentation.for_robot(robot, dyn.scene, probes.dim)
    n_chunks = math.ceil(steps / traj_len)
    nq, nv, nu, nb, npb = dyn.nq, dyn.nv, dyn.nu, len(robot.all_contact_bodies), probes.num_probes
    identity = {"robot": robot.name, "model_hash": robot.model_hash(), "num_worlds": num_worlds, "steps": steps,
                "traj_len": traj_len, "seed": seed, "source": source.kind, "terrain": source.terrain,
                "variant": json.dumps(robot.variant.describe(), sort_keys=True) if robot.variant else "",
                **getattr(source, "identity", {})}
    attrs = {**dataset_attrs(robot, nq, nv, nu), **identity, "state_layout": json.dumps(rep.layout()),
             "contact_bodies": json.dumps(list(robot.all_contact_bodies))}
    widths = {"qpos": (traj_len + 1, nq), "qvel": (traj_len + 1, nv), "ctrl": (traj_len, nu),
              "torque": (traj_len, nu), "contact_force": (traj_len, nb), "probe_distance": (traj_len + 1, npb)}
    try:
        done = _resume_parts(parts, identity) if resume else _fresh_parts(parts, identity)
    except BaseException:
        source.close()
        raise
    pending = None
    try:
        bar = tqdm(total=n_chunks * traj_len * num_worlds, initial=done * traj_len * num_worlds, desc="record",
                   unit="step", disable=None if progress else True)
        continuous = getattr(source, "continuous", False)  # worlds walk on across batches (falls reach back)
        previous = None  # a continuous source's last batch: every world's arrays and resets
        # (`pending`, its rows) is written once this batch has taken out the trajectories its fall-ending ones overlap
        for chunk in range(done, n_chunks):
            source.gen.manual_seed(_chunk_seed(seed, chunk))
            buf = {k: np.zeros((num_worlds, *w), dtype=np.float32) for k, w in widths.items()}
            source.start_trajectory()
            s = dyn.state()
            buf["qpos"][:, 0], buf["qvel"][:, 0] = s.qpos.cpu().numpy(), s.qvel.cpu().numpy()
            buf["probe_distance"][:, 0] = probes.signed_distance(s.qpos.cpu()).numpy()
            resets = np.zeros((num_worlds, traj_len), dtype=bool)  # (N, T) the world was reset by step t
            for t in range(traj_len):
                ctrl, reset = source.step()
                resets[:, t] = reset.cpu().numpy()
                s = dyn.state()
                if continuous and resets[:, t].any():  # a reset world's step ends in the state its fall ended in
                    s = _end_of_step(s, source.final_state, reset)
                buf["ctrl"][:, t], buf["torque"][:, t] = ctrl.cpu().numpy(), s.joint_torque.cpu().numpy()
                buf["contact_force"][:, t] = s.contact_force.cpu().numpy()
                buf["qpos"][:, t + 1], buf["qvel"][:, t + 1] = s.qpos.cpu().numpy(), s.qvel.cpu().numpy()
                buf["probe_distance"][:, t + 1] = probes.signed_distance(s.qpos.cpu()).numpy()
                bar.update(num_worlds)
            good = ~resets.any(axis=1)  # (N,)
            batch = {"chunk": chunk, "rows": {k: b[good] for k, b in buf.items()}, "worlds": np.nonzero(good)[0],
                     "counts": {"interrupted": int((~good).sum()), "fall_ending": 0, "replaced": 0}}
            if continuous and previous is not None:
                falls, fall_worlds, overlap = fall_ending(*previous, buf, resets)
                batch["rows"] = {k: np.concatenate([v, falls[k]]) for k, v in batch["rows"].items()}
                batch["worlds"] = np.concatenate([batch["worlds"], np.full(len(fall_worlds), -1)])  # not clean
                batch["counts"]["fall_ending"] = len(fall_worlds)
                if pending is not None:  # a fall-ending trajectory replaces the clean one it overlaps
                    overlapped = np.isin(pending["worlds"], fall_worlds[overlap])  # (k,)
                    pending["rows"] = {k: v[~overlapped] for k, v in pending["rows"].items()}
                    pending["worlds"] = pending["worlds"][~overlapped]
                    pending["counts"]["replaced"] = int(overlapped.sum())
            if pending is not None:
                _write_batch(parts, pending)
            pending = None
            if continuous:
                previous, pending = (buf, resets), batch
            else:
                _write_batch(parts, batch)
        if pending is not None:
            _write_batch(parts, pending)
            pending = None
        bar.close()
    except KeyboardInterrupt:  # keep every complete batch for --resume
        if pending is not None:
            _write_batch(parts, pending)
        source.close()
        raise
    except BaseException:  # an error: leave no half-written dataset behind (a resumed one keeps its earlier batches)
        source.close()
        if not resume:
            shutil.rmtree(parts, ignore_errors=True)
        raise
    source.close()
    return _assemble(parts, out, n_chunks, attrs, traj_len)


def _end_of_step(state, final, reset: torch.Tensor):
    """`state` with the rows of the worlds `reset` (N,) taken from `final`, the state they ended the step in."""
    if final is None:
        raise RuntimeError("a continuous recording source reset worlds without reporting the state they ended in")
    pick = reset.to(state.qpos.device)[:, None]  # (N, 1)
    rows = {k: torch.where(pick, getattr(final, k), getattr(state, k))
            for k in ("qpos", "qvel", "joint_torque", "contact_force")}  # (N, ...) each
    return dataclasses.replace(state, **rows)


def fall_ending(prev: dict[str, np.ndarray], prev_resets: np.ndarray, buf: dict[str, np.ndarray],
                resets: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The T steps that end in each world's first fall of this batch, where the world ran that long since its last
    reset. `prev`/`buf` hold every world's arrays of the previous/this batch (state arrays (N, T+1, ...), step
    arrays (N, T, ...); this batch's first state is the previous one's last, and the state after a resetting step is
    the state the world fell into, not its reset state); `prev_resets`/`resets` (N, T) which steps reset a world.

    A world whose first reset here is at step r falls into state r+1, so its window is states r+1..T of the previous
    batch and 1..r+1 of this one; no state of it may follow a reset, so the previous batch must have none at step r
    or later. Returns the windows' arrays of each kind for the k worlds kept ((k, T+1, ...) and (k, T, ...)), those
    worlds (k,), and which windows overlap the world's previous trajectory (k,) bool (all but r = T-1, whose
    window is this batch's trajectory itself)."""
    n, t = resets.shape
    first = np.where(resets.any(axis=1), resets.argmax(axis=1), t)  # (N,) step of the first reset (T: none)
    late = (prev_resets & (np.arange(t)[None] >= first[:, None])).any(axis=1)  # (N,) a reset since step r before
    worlds = np.nonzero((first < t) & ~late)[0]  # (k,)
    start = first[worlds][:, None] + 1  # (k, 1) the window's first state, in the previous batch's indices
    out = {}
    for key, now in buf.items():
        span = now.shape[1]  # T+1 for states, T for steps
        i = start + np.arange(span)[None]  # (k, span) the index into previous ++ this batch's new entries
        from_prev = i < span  # (k, span)
        # this batch's entries after the previous batch's last: states from 1 (0 repeats it), steps from 0
        cur = np.clip(i - span + (span == t + 1), 0, span - 1)  # (k, span)
        prev_i = np.minimum(i, span - 1)  # (k, span)
        w = worlds[:, None]  # (k, 1)
        picked_prev, picked_now = prev[key][w, prev_i], now[w, cur]  # (k, span, ...) each
        mask = from_prev.reshape(*from_prev.shape, *([1] * (now.ndim - 2)))
        out[key] = np.where(mask, picked_prev, picked_now)
    return out, worlds, start[:, 0] < t


def _write_batch(parts: Path, batch: dict) -> None:
    """A batch's finite rows to its own file, renamed into place when complete: a kill at any point leaves only
    whole batches."""
    rows = batch["rows"]
    finite = sane_trajectories(rows["qpos"], rows["qvel"], rows["torque"])
    write_arrays(parts / f"chunk_{batch['chunk']:06d}.h5", {k: b[finite] for k, b in rows.items()},
                 {"dropped": int((~finite).sum()), **batch["counts"]}, compress=False)


def _chunk_files(parts: Path) -> list[Path]:
    return sorted(parts.glob("chunk_*.h5"))


def stopped_batches(out: str | Path) -> int:
    """Complete batches a stopped recording of `out` keeps in `partial_path(out)` (0 where there is none)."""
    return len(_chunk_files(partial_path(out)))


def finished_recording(out: str | Path, expected: dict) -> bool:
    """Whether `out` is a complete recording (no `partial_path(out)` beside it) made with the `expected` settings
    (attribute -> value); a complete one made with others is a one-line error. Under torchrun a stopped recording can
    leave one rank's shard complete and another's unfinished: `--resume` keeps the complete one."""
    out = Path(out)
    if not out.is_file() or partial_path(out).exists():
        return False
    try:
        with h5py.File(out, "r") as f:
            saved = {k: plain_attr(f.attrs.get(k)) for k in expected}  # an array attribute compares as a list
    except OSError as err:
        raise ValueError(f"complete recording '{out}' is truncated or corrupt ({str(err).splitlines()[0][:100]}); "
                         "delete it and record again") from err
    _refuse_other_settings(f"complete recording '{out}'", saved, expected, expected)
    return True


def _refuse_other_settings(what: str, saved: dict, now: dict, keys) -> None:
    """One-line error naming each of `keys` whose value in the recording's `saved` settings differs from `now`."""
    differ = [k for k in keys if saved.get(k) != now[k]]
    if differ:
        shown = ", ".join(f"{k}={saved.get(k)!r} (now {now[k]!r})" for k in differ)
        raise ValueError(f"{what} was made with other settings: {shown}; rerun with those settings or delete it")


CORE_IDENTITY = frozenset({"robot", "model_hash", "num_worlds", "steps", "traj_len", "seed", "source", "terrain",
                           "variant"})  # in every unfinished recording's settings.json


def _fresh_parts(parts: Path, identity: dict) -> int:
    """Start a recording in an empty `parts` folder that names its settings; returns 0 batches done."""
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    write_text_atomic(parts / "settings.json", json.dumps(identity))
    return 0


def _resume_parts(parts: Path, identity: dict) -> int:
    """Batches already complete in an unfinished recording; refuse one made with other settings."""
    try:
        saved = json.loads((parts / "settings.json").read_text())
        if not isinstance(saved, dict):
            raise ValueError("not a mapping")
    except (OSError, ValueError, RecursionError) as err:
        raise ValueError(f"unfinished recording '{parts}' has no readable settings.json; delete it and record "
                         "again") from err
    # the source's own settings are compared where the file has them (an older recording's lacks them)
    _refuse_other_settings(f"unfinished recording '{parts}'", saved, identity,
                           [k for k in identity if k in saved or k in CORE_IDENTITY])
    for stale in parts.glob("*.tmp"):  # a batch that was being written when the process died
        stale.unlink()
    files = _chunk_files(parts)
    if [f.name for f in files] != [f"chunk_{i:06d}.h5" for i in range(len(files))]:
        raise ValueError(f"unfinished recording '{parts}' is missing batches; delete it and record again")
    return len(files)


def _assemble(parts: Path, out: Path, n_chunks: int, attrs: dict, traj_len: int) -> dict:
    """Concatenate the batch files into `out` (temp file, then rename) and remove the folder."""
    files = _chunk_files(parts)
    counts = {"dropped": 0, "interrupted": 0, "fall_ending": 0, "replaced": 0}
    kept = 0
    for path in files:
        with h5py.File(path, "r") as f:
            kept += int(f["qpos"].shape[0])
            for k in counts:
                counts[k] += int(f.attrs.get(k, 0))  # a batch an older flashnerd wrote has no fall_ending
    if kept == 0:
        shutil.rmtree(parts, ignore_errors=True)
        raise ValueError(f"every trajectory was dropped ({counts['dropped']} diverged, {counts['interrupted']} "
                         "interrupted by a reset); nothing written")
    concat_files(files, out, {**attrs, **counts, "num_trajectories": kept, "chunks_done": n_chunks})
    shutil.rmtree(parts, ignore_errors=True)
    return {"out": str(out), "trajectories": kept, **counts, "traj_len": traj_len, "transitions": kept * traj_len}


def merge_recordings(parts: list[Path], out: str | Path, seeds: list[int]) -> dict:
    """Concatenate shard files of one recording (same robot and layout) into `out` (temp file, then rename).

    Counters are summed; `shard_seeds` lists each shard's seed. The shards are deleted once `out` is in place.
    """
    totals = {"num_trajectories": 0, "dropped": 0, "interrupted": 0, "fall_ending": 0, "replaced": 0}
    worlds = 0
    for part in parts:
        with h5py.File(part, "r") as src:
            counts = {k: plain_attr(src.attrs.get(k, 0)) for k in totals}  # an older shard lacks fall_ending
            counts["num_worlds"] = plain_attr(src.attrs.get("num_worlds"))
        bad = [k for k, v in counts.items() if isinstance(v, bool) or not isinstance(v, int) or v < 0]
        if bad:
            raise ValueError(f"recording shard '{part}' has a corrupt {bad[0]} attribute ({counts[bad[0]]!r:.40}); "
                             "delete it and record again")
        for k in totals:
            totals[k] += counts[k]
        worlds += counts["num_worlds"]
    concat_files(parts, out, {**totals, "num_worlds": worlds, "shard_seeds": seeds})
    for part in parts:
        Path(part).unlink(missing_ok=True)
    return {"out": str(out), "trajectories": totals["num_trajectories"], "dropped": totals["dropped"],
            "interrupted": totals["interrupted"], "fall_ending": totals["fall_ending"],
            "replaced": totals["replaced"], "shards": len(parts)}
