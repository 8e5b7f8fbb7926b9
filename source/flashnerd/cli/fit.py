"""`flashnerd fit`: fit a FlashNeRD or NeRD model on a recorded dataset."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from flashnerd.cli.common import (
    CLIError,
    add_robot_file_arg,
    check_device,
    check_positive,
    check_writable,
    load_robot_file_arg,
    refuse_unless,
)
from flashnerd.contacts import CONTACT_MODES
from flashnerd.models import MODEL_KINDS
from flashnerd.models.checkpoint import CheckpointError, export_for_inference, read_checkpoint
from flashnerd.training.contact_head import add_contact_head
from flashnerd.training.fit import FitConfig, Fitter, check_fit_config
from flashnerd.utils.distributed import init_distributed, shutdown
from flashnerd.utils.hints import nesting_depth

INIT_PATIENCE = 5  # early stopping by default when adapting a model (--init)
INIT_LR = 3e-4  # a fitted model adapts to a robot's data at a lower learning rate (docs/results.md, the reality gap)


def adapt_model(data: str | Path | list, init: str | Path, out: Path, time_budget_s: float, seed: int, device: str,
                mix_data: tuple[str, ...] = (), mix: float = 0.0,
                contact_head_steps: int = FitConfig.contact_head_steps,
                patience: int = INIT_PATIENCE) -> tuple[Fitter, dict]:
    """`fit --init`: the checkpoint `init` (its kind, size, contact rows and ensemble) fitted further on `data` for
    `time_budget_s` seconds at the adaptation learning rate, stopping early after `patience` validations without a
    lower held-out loss (0: no early stopping, the whole budget), its contact head refitted for `contact_head_steps`
    (0: none), written to `out` with the held-out NRMSE before and after on its card. Returns the fitter and
    {"fit_steps", "fit_seconds", "nrmse_card", "actuators"} (the identified actuators' card, or why none; and
    "best_step", "stopped_early" with early stopping)."""
    ckpt = read_checkpoint(init)
    fit_cfg = ckpt.get("fit_config", {})
    cfg = dataclasses.replace(FitConfig(), model=ckpt["kind"], size=fit_cfg.get("size", FitConfig.size),
                              contacts=fit_cfg.get("contacts", FitConfig.contacts),
                              max_rows=ckpt["representation"].get("max_rows", FitConfig.max_rows),  # bounded on read
                              ensemble=ckpt.get("ensemble", 1), ensemble_shared=ckpt.get("ensemble_shared", 0),
                              max_steps=10**9, time_budget_s=time_budget_s, init=str(init), mix_data=tuple(mix_data),
                              mix=mix, lr=INIT_LR, patience=patience, seed=seed,
                              contact_head_steps=contact_head_steps)
    fitter = Fitter(data, cfg, device=device)
    fitter.init_from(init)
    fit = fitter.fit(out, log_dir=str(out.parent / "fit"), progress=False)
    card = fitter.adaptation_report(init, out)
    return fitter, {"fit_steps": fit["steps"], "fit_seconds": fit["train_seconds"], "nrmse_card": card,
                    "actuators": fit["actuators"], **{k: fit[k] for k in ("best_step", "stopped_early") if k in fit}}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit", help="fit a learned dynamics model")
    p.add_argument("--data", required=True, nargs="+", help="one or more datasets written by `flashnerd record`")
    p.add_argument("--model", default=FitConfig.model, choices=MODEL_KINDS, help="model kind")
    p.add_argument("--out", required=True, help="checkpoint path (.safetensors)")
    p.add_argument("--size", default="cpu", help="size class: cpu, paper_small, paper")
    p.add_argument("--max_steps", type=int, default=FitConfig.max_steps, help="optimizer steps")
    p.add_argument("--time_budget", type=float, default=0.0, help="stop after this many training seconds")
    p.add_argument("--batch_size", type=int, default=FitConfig.batch_size, help="windows per step")
    p.add_argument("--ar_batch_size", type=int, default=FitConfig.ar_batch_size,
                   help="autoregressive rollouts per step")
    p.add_argument("--lr", type=float, default=None,
                   help=f"peak learning rate (default {FitConfig.lr}; {INIT_LR} with --init, which starts from a "
                        "fitted model)")
    p.add_argument("--ar_weight", type=float, default=FitConfig.ar_weight, help="weight of the autoregressive loss")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--contacts", default=FitConfig.contacts, choices=CONTACT_MODES,
                   help="contact input: fixed ground probes (NeRD) or variable contact rows (flashnerd only)")
    p.add_argument("--max_rows", type=int, default=None,
                   help=f"contact rows per frame (--contacts rows; default {FitConfig.max_rows})")
    p.add_argument("--ensemble", type=int, default=FitConfig.ensemble,
                   help="members trained together, each from its own initialization and batches, stored in one "
                        "checkpoint and stepped as one model; their disagreement measures model error (default 1)")
    p.add_argument("--ensemble_shared", type=int, default=FitConfig.ensemble_shared,
                   help="FlashNeRD blocks the ensemble's members share (with the frame embedding), run once per "
                        "step: a cheaper ensemble whose members differ in their later blocks and readouts only "
                        "(default 0: independent members)")
    p.add_argument("--contact_head_steps", type=int, default=FitConfig.contact_head_steps,
                   help="steps of the contact head fitted after the model (outside --time_budget; about 10 s per "
                        "1000 on a CPU) on the data's contact sensors: the learned backends' contact forces for "
                        "rewards and terminations (0: none, contacts then come from the probes; default "
                        f"{FitConfig.contact_head_steps})")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--log_dir", default=None, help="TensorBoard folder (default: logs/fit/<out stem>)")
    p.add_argument("--resume", action="store_true", help="continue from --out if it exists")
    p.add_argument("--init", default="",
                   help="start from this checkpoint's weights and normalizers (same model settings; new optimizer "
                        "and schedule), e.g. to refit a model on more data or adapt it to a robot's own data; the "
                        "held-out NRMSE before and after goes into the checkpoint")
    p.add_argument("--mix_data", nargs="+", default=(),
                   help="datasets trained on beside --data (e.g. the simulation data of --init), never validated on")
    p.add_argument("--mix", type=float, default=None,
                   help=f"share of every batch drawn from --mix_data (default {FitConfig.mix})")
    p.add_argument("--patience", type=int, default=None,
                   help=f"stop after this many validations without a lower held-out loss; --out keeps the best step "
                        f"(default {INIT_PATIENCE} with --init, else 0: off)")
    add_robot_file_arg(p)
    p.set_defaults(func=run)
    e = sub.add_parser("export-model", help="strip a fitting checkpoint to what inference needs (to ship it)")
    e.add_argument("--checkpoint", required=True, help="checkpoint written by `flashnerd fit`")
    e.add_argument("--out", required=True, help="where to write the slim checkpoint")
    e.add_argument("--metrics", default=None, help="JSON printed by `flashnerd evaluate-model`, stored inside")
    e.set_defaults(func=run_export)
    h = sub.add_parser("fit-contact-head", help="fit the contact head of a fitted checkpoint on recorded contacts")
    h.add_argument("--checkpoint", required=True, help="checkpoint written by `flashnerd fit`")
    h.add_argument("--data", required=True, nargs="+", help="datasets with contact labels (`flashnerd record`)")
    h.add_argument("--out", required=True, help="where to write the checkpoint with its new head")
    h.add_argument("--steps", type=int, default=FitConfig.contact_head_steps, help="optimizer steps of the head")
    h.add_argument("--seed", type=int, default=0, help="random seed (batches, initialization, held-out split)")
    add_robot_file_arg(h)
    h.set_defaults(func=run_contact_head)



def run(args: argparse.Namespace) -> dict:
    load_robot_file_arg(args)
    check_positive("max_steps", args.max_steps)
    refuse_unless(bool(args.mix_data), args, ("mix",), "sets the share of --mix_data; add --mix_data, or drop --mix")
    args.mix = FitConfig.mix if args.mix is None else args.mix
    args.patience = (INIT_PATIENCE if args.init else 0) if args.patience is None else args.patience
    args.lr = (INIT_LR if args.init else FitConfig.lr) if args.lr is None else args.lr
    check_positive("batch_size", args.batch_size)
    check_positive("ar_batch_size", args.ar_batch_size)
    refuse_unless(args.contacts == "rows", args, ("max_rows",), "applies to --contacts rows only; add it, or drop "
                  "--max_rows")
    args.max_rows = FitConfig.max_rows if args.max_rows is None else args.max_rows
    check_positive("max_rows", args.max_rows)
    check_device(args.device)
    check_writable("out", args.out)
    if args.log_dir:
        check_writable("log_dir", args.log_dir)
    cfg = dataclasses.replace(FitConfig(), model=args.model, size=args.size, max_steps=args.max_steps,
                              time_budget_s=args.time_budget, batch_size=args.batch_size,
                              ar_batch_size=args.ar_batch_size, lr=args.lr,
                              ar_weight=args.ar_weight, seed=args.seed, contacts=args.contacts,
                              max_rows=args.max_rows, init=args.init, mix_data=tuple(args.mix_data), mix=args.mix,
                              patience=args.patience, ensemble=args.ensemble, ensemble_shared=args.ensemble_shared,
                              contact_head_steps=args.contact_head_steps)
    check_fit_config(cfg)
    out = Path(args.out)
    if args.resume and not out.is_file():
        raise CLIError(f"--resume given but '{out}' does not exist; give the --out of the stopped fit, or start "
                       "without --resume")
    if not args.resume and out.is_file():
        _refuse_stopped_fit(out)
    if args.init and not Path(args.init).is_file():
        raise CLIError(f"--init '{args.init}' does not exist; give a checkpoint written by `flashnerd fit`")
    info, device = init_distributed(args.device)  # under torchrun: one process group, one device per rank
    try:
        fitter = Fitter(args.data, cfg, device=device, dist=info)
        if args.resume:  # with --init too: an adaptation from it, stopped (the checkpoint says which)
            fitter.resume(out)
        elif args.init:
            fitter.init_from(args.init)
        log_dir = args.log_dir or str(Path("logs") / "fit" / out.stem)
        result = fitter.fit(out, log_dir=log_dir, progress=info.is_main)
        if args.init:
            result["adaptation"] = fitter.adaptation_report(args.init, out)
    finally:
        shutdown()
    result["world_size"] = info.world_size
    if info.is_main:
        print(json.dumps(result))
    return result


def _refuse_stopped_fit(out: Path) -> None:
    """A fit started afresh would write over the steps a stopped one kept in `out`: refuse, naming --resume. A
    finished fit, an exported model (it cannot be resumed) or a file that is no fit's checkpoint is written over as
    any output."""
    try:
        ckpt = read_checkpoint(out)
    except CheckpointError:
        return
    if ckpt.get("fit_complete") is False and "optimizer" in ckpt:
        raise CLIError(f"'{out}' holds a fit stopped at step {ckpt.get('step')}; add --resume to continue it, or "
                       "delete it (or give another --out) to fit afresh")


def run_export(args: argparse.Namespace) -> dict:
    metrics = None
    if args.metrics:
        try:
            metrics = json.loads(Path(args.metrics).read_text().strip().splitlines()[-1])
            # evaluate-model's JSON nests a few levels; far deeper is no card, and would overflow the writer's stack
            card = isinstance(metrics, dict) and isinstance(metrics.get("nrmse"), dict)
            if not card or nesting_depth(metrics) > 16:
                raise ValueError("no nrmse")
        except (OSError, ValueError, IndexError, RecursionError) as err:
            raise CLIError(f"--metrics '{args.metrics}' is not the JSON of `flashnerd evaluate-model`") from err
    check_writable("out", args.out)
    result = export_for_inference(args.checkpoint, args.out, metrics)
    print(json.dumps(result))
    return result


def run_contact_head(args: argparse.Namespace) -> dict:
    load_robot_file_arg(args)
    check_positive("steps", args.steps)
    if not Path(args.checkpoint).is_file():
        raise CLIError(f"--checkpoint '{args.checkpoint}' does not exist; give a checkpoint written by `flashnerd fit`")
    check_writable("out", args.out)
    card = add_contact_head(args.checkpoint, args.data, args.out, steps=args.steps, seed=args.seed)
    result = {"out": str(args.out), **card}
    print(json.dumps(result))
    return result
