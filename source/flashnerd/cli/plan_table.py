"""`flashnerd plan-table`: the climbing table over planner seeds (the seed's Table II as counts over seeds) from the
JSON files of several `flashnerd plan --out` runs that differ only in `--seed`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from flashnerd.cli.common import CLIError, check_writable, write_json
from flashnerd.cli.plan import PLAN_SETTINGS, SETTING_DEFAULTS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan-table", help="climbs per platform and planning time over the seeds of several plan runs")
    p.add_argument("runs", nargs="+", help="JSON files written by `flashnerd plan --out`, one per planner seed")
    p.add_argument("--out", required=True, help="the table's JSON (e.g. docs/results/climb_seeds_<name>.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Read every run, check that they differ only in their seed, and write the table over seeds."""
    check_writable("out", args.out)
    runs = [_read(Path(path)) for path in args.runs]
    table = merge_runs(runs, [str(p) for p in args.runs])
    write_json(Path(args.out), table)
    print(json.dumps({b: {k: r[k] for k in ("seeds", "climbs_per_seed", "median_planning_ms")}
                      for b, r in table["backends"].items()}))
    return table


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CLIError(f"'{path}' is not a readable `flashnerd plan --out` JSON ({err}); pass those files") from None
    if not (isinstance(data, dict) and isinstance(data.get("backends"), dict) and isinstance(data.get("seed"), int)):
        raise CLIError(f"'{path}' is not a `flashnerd plan --out` JSON (no seed and backends); pass those files")
    if bad := [b for b, r in data["backends"].items() if not _is_backend_result(r)]:
        raise CLIError(f"'{path}': backend '{bad[0]}' is not a plan result (per_platform entries with lane, height, "
                       "climbed and planning_ms); pass files written by `flashnerd plan --out`")
    return data


def _is_backend_result(r) -> bool:
    """Whether `r` has the shape of a backend's entry in a plan JSON (what `merge_runs` reads of it)."""
    number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)  # noqa: E731
    return isinstance(r, dict) and isinstance(r.get("per_platform"), list) and all(
        isinstance(p, dict) and isinstance(p.get("lane"), int) and number(p.get("height"))
        and isinstance(p.get("climbed"), bool) and isinstance(p.get("planning_ms", []), list)
        and all(number(ms) for ms in p.get("planning_ms", [])) for p in r["per_platform"])


def merge_runs(runs: list[dict], names: list[str]) -> dict:
    """Plan runs (one per seed, same settings otherwise) -> per backend: the seeds it ran on, climbs per seed and in
    total, climbs per platform counted over seeds, and the median planning time over all its decisions (and per
    seed). A run of other settings or thread count, a seed given twice, a backend planned with another checkpoint, on
    other platforms, or whose run is incomplete are one-line errors naming the file."""
    settings = [k for k in PLAN_SETTINGS if k != "seed"] + ["threads"]  # threads: planning times are compared
    first = runs[0]
    value = lambda run, key: run.get(key, SETTING_DEFAULTS.get(key))  # noqa: E731 (files from before a setting existed)
    seeds: list[int] = []
    for run, name in zip(runs, names):
        differ = [k for k in settings if value(run, k) != value(first, k)]
        if differ:
            raise CLIError(f"'{name}' was planned with other {', '.join(differ)} than '{names[0]}'; a table over seeds "
                           "needs runs that differ only in --seed")
        if run["seed"] in seeds:
            raise CLIError(f"'{name}' repeats seed {run['seed']}; pass one run per seed")
        seeds.append(run["seed"])
    lanes: dict[int, float] = {}
    backends: dict[str, dict] = {}
    for run, name in zip(runs, names):
        for backend, r in run["backends"].items():
            if not r.get("complete") or any("planning_ms" not in p for p in r["per_platform"]):
                raise CLIError(f"'{name}': backend '{backend}' is incomplete ({r.get('platforms')} platforms) or "
                               "lacks planning times; finish it with `flashnerd plan --resume --out` or leave it out")
            entry = backends.setdefault(backend, {"checkpoint": r.get("checkpoint"), "runs": []})
            if r.get("checkpoint") != entry["checkpoint"]:
                raise CLIError(f"'{name}': backend '{backend}' planned with checkpoint {r.get('checkpoint')}, another "
                               f"run with {entry['checkpoint']}; a table over seeds needs one model per backend")
            planned = sorted(p["lane"] for p in r["per_platform"])
            if entry["runs"] and planned != entry["lanes"]:
                raise CLIError(f"'{name}': backend '{backend}' planned platforms {planned}, another run "
                               f"{entry['lanes']}; a table over seeds needs the same platforms on every seed")
            entry["lanes"] = planned
            entry["runs"].append((run["seed"], r["per_platform"]))
            lanes.update({p["lane"]: p["height"] for p in r["per_platform"]})
    order = sorted(lanes)
    out = {k: value(first, k) for k in ("task", *settings)}
    out.update(seeds=seeds, runs=names,
               platforms=[{"lane": lane, "height": lanes[lane]} for lane in order], backends={})
    for backend, entry in backends.items():
        per_seed = [{p["lane"]: p for p in platforms} for _, platforms in entry["runs"]]
        times = [[ms for p in platforms for ms in p["planning_ms"]] for _, platforms in entry["runs"]]
        out["backends"][backend] = {
            "checkpoint": entry["checkpoint"],
            "seeds": [seed for seed, _ in entry["runs"]],
            "climbs_per_seed": [sum(p["climbed"] for p in run.values()) for run in per_seed],
            "platforms_per_seed": [len(run) for run in per_seed],
            # lane -> [climbed on it, planned on it] over the seeds
            "per_platform": {str(lane): [sum(run[lane]["climbed"] for run in per_seed if lane in run),
                                         sum(lane in run for run in per_seed)] for lane in order},
            "median_planning_ms": float(np.median([ms for t in times for ms in t])),
            "median_planning_ms_per_seed": [float(np.median(t)) for t in times],
        }
    return out


__all__ = ["add_parser", "merge_runs", "run"]
