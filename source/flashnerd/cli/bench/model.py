"""`flashnerd bench model`: model-only streaming throughput of learned models at several batch sizes (JSON), each with
its roofline: the achieved FLOP rate as a fraction of the fp32 matmul rate at the model's own shapes."""

from __future__ import annotations

import argparse
import json

import torch

from flashnerd.cli.common import CLIError, check_device, check_positive
from flashnerd.contacts import contact_features
from flashnerd.dynamics.representation import StateRepresentation
from flashnerd.models import FLASHNERD_KIND, MAX_MEMBERS, NERD_KIND, check_ensemble_shared
from flashnerd.robots import get_robot
from flashnerd.sim.scene import build_scene
from flashnerd.training.benchmark import model_roofline, model_steps_per_second
from flashnerd.utils.machine import describe_machine


def add_parser(bsub: argparse._SubParsersAction) -> None:
    m = bsub.add_parser("model", help="model-only streaming throughput, FlashNeRD vs NeRD (and ensembles)")
    m.add_argument("--robot", default="anymal_c", help="robot whose input/output sizes the models take")
    m.add_argument("--batch", default="16,1024,16384", help="comma-separated batch sizes")
    m.add_argument("--models", default="flashnerd,nerd", help="comma-separated model kinds")
    m.add_argument("--size", default="cpu", help="size class of both models: cpu, paper_small, paper")
    m.add_argument("--ensemble", type=int, default=1,
                   help="also time an ensemble of this many members of each kind, and its cost over one model's")
    m.add_argument("--ensemble_shared", type=int, default=0,
                   help="blocks the ensemble's members share (FlashNeRD; `fit --ensemble_shared`), run once per step")
    m.add_argument("--device", default="cpu", help="torch device")
    m.add_argument("--min_seconds", type=float, default=1.0, help="timed seconds per measurement (at least)")
    m.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Steps x worlds per second of each model at each batch, and FlashNeRD's ratio to NeRD."""
    check_device(args.device)
    robot = get_robot(args.robot)
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError as err:
        raise CLIError(f"--batch must be comma-separated integers, got '{args.batch}'") from err
    for b in batches:
        check_positive("batch", b)
    kinds = args.models.split(",")
    if not 1 <= args.ensemble <= MAX_MEMBERS:
        raise CLIError(f"--ensemble must be 1 (no ensemble) to {MAX_MEMBERS} members, got {args.ensemble}")
    for kind in kinds:  # before any timing
        check_ensemble_shared(kind, args.size, args.ensemble, args.ensemble_shared, model_flag="--models")
    scene = build_scene(robot)
    rep = StateRepresentation.for_robot(robot, scene, contact_features(robot, scene).dim)
    results: dict[str, dict[str, float]] = {}
    members: dict[str, dict[str, float]] = {}  # with --ensemble: one step of all members
    roofline: dict[str, dict[str, dict]] = {}
    for kind in kinds:
        results[kind], members[kind], roofline[kind] = {}, {}, {}
        for b in batches:  # one model, then its ensemble, batch by batch: machine noise hits both alike
            for k, table in ((1, results), (args.ensemble, members)) if args.ensemble > 1 else ((1, results),):
                shared = args.ensemble_shared if k > 1 else 0
                table[kind][str(b)] = round(model_steps_per_second(kind, rep.input_dim, rep.target_dim, b, args.size,
                                                                   args.device, args.min_seconds, ensemble=k,
                                                                   ensemble_shared=shared), 1)
            # right after the model's own timing, so the matmul rate it is compared with sees the same machine
            roofline[kind][str(b)] = model_roofline(kind, rep.input_dim, rep.target_dim, b, results[kind][str(b)],
                                                    args.size, args.device, args.min_seconds)
    out = {"robot": robot.name, "device": args.device, "size": args.size, "threads": torch.get_num_threads(),
           "machine": describe_machine(args.device), "steps_per_s": results, "roofline": roofline}
    if FLASHNERD_KIND in results and NERD_KIND in results:
        out["ratio"] = {b: round(results[FLASHNERD_KIND][b] / results[NERD_KIND][b], 2) for b in results[NERD_KIND]}
    if args.ensemble > 1:
        out["ensemble"] = {"members": args.ensemble, "shared_blocks": args.ensemble_shared, "steps_per_s": members,
                           "cost_over_one_model": {k: {b: round(results[k][b] / members[k][b], 2) for b in members[k]}
                                                   for k in kinds}}
    print(json.dumps(out))
    return out
