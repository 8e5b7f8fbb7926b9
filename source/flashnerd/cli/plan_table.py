"""`flashnerd plan-table`: the climbing table over planner seeds (the seed's Table II as counts over seeds) from the
JSON files of several `flashnerd plan --out` runs that differ only in `--seed`, optionally joining the backends of an
earlier table (a backend run in a later session, whose per-seed files of the other backends are gone)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from flashnerd.cli.common import CLIError, check_writable, write_json
from flashnerd.cli.plan import PLAN_SETTINGS, SETTING_DEFAULTS, entry_sha256, is_backend_result, same_checkpoint
from flashnerd.utils.hints import finite_number
from flashnerd.utils.machine import machines_of

# what runs of one table share: every plan setting but the seed, and the thread count (planning times are compared)
TABLE_SETTINGS = (*(k for k in PLAN_SETTINGS if k != "seed"), "threads")


def _setting(run: dict, key: str):
    """A run's or table's setting; a file written before a setting existed holds its default."""
    return run.get(key, SETTING_DEFAULTS.get(key))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan-table", help="climbs per platform and planning time over the seeds of several plan runs")
    p.add_argument("runs", nargs="+", help="JSON files written by `flashnerd plan --out`, one per planner seed")
    p.add_argument("--out", required=True, help="the table's JSON (e.g. docs/results/climb_seeds_<name>.json)")
    p.add_argument("--table", default=None,
                   help="an earlier plan-table JSON whose backends are kept; the runs add other backends planned with "
                        "the same settings on the same platforms (it may be --out itself)")
    p.add_argument("--replace", action="store_true",
                   help="with --table: the runs' backends replace the table's rows of the same backends (a backend "
                        "measured over more seeds in a later session; pass all of its runs)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    """Read every run, check that they differ only in their seed, and write the table over seeds."""
    check_writable("out", args.out)
    runs = [_read(Path(path)) for path in args.runs]
    table = merge_runs(runs, [str(p) for p in args.runs])
    if args.replace and not args.table:
        raise CLIError("--replace replaces rows of the table given with --table; add --table FILE, or drop it")
    if args.table:
        table = join_table(_read_table(Path(args.table)), table, args.table, replace=args.replace)
    write_json(Path(args.out), table)
    print(json.dumps({b: {k: r[k] for k in ("seeds", "climbs_per_seed", "median_planning_ms")}
                      for b, r in table["backends"].items()}))
    return table


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as err:
        raise CLIError(f"'{path}' is not a readable `flashnerd plan --out` JSON ({err}); pass those files") from None
    if not (isinstance(data, dict) and isinstance(data.get("backends"), dict) and isinstance(data.get("seed"), int)):
        raise CLIError(f"'{path}' is not a `flashnerd plan --out` JSON (no seed and backends); pass those files")
    if bad := [b for b, r in data["backends"].items() if not is_backend_result(r)]:
        raise CLIError(f"'{path}': backend '{bad[0]}' is not a plan result (per_platform entries with lane, height, "
                       "climbed and planning_ms); pass files written by `flashnerd plan --out`")
    return data


def _read_table(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as err:
        raise CLIError(f"--table '{path}' is not a readable `flashnerd plan-table` JSON ({err}); pass one") from None
    if not (isinstance(data, dict) and isinstance(data.get("backends"), dict) and _ints(data.get("seeds"))
            and len(set(data["seeds"])) == len(data["seeds"])
            and isinstance(data.get("runs"), list) and all(isinstance(run, str) for run in data["runs"])
            and isinstance(data.get("platforms"), list)
            and all(isinstance(p, dict) and isinstance(p.get("lane"), int) and finite_number(p.get("height"))
                    for p in data["platforms"])):
        raise CLIError(f"--table '{path}' is not a `flashnerd plan-table` JSON (seeds, runs, platforms and backends); "
                       "pass a file that command wrote")
    lanes = [str(p["lane"]) for p in data["platforms"]]
    if len(set(lanes)) != len(lanes):
        raise CLIError(f"--table '{path}' lists platform lanes {lanes}, one of them twice; pass a file `flashnerd "
                       "plan-table` wrote")
    if bad := [b for b, r in data["backends"].items() if not _is_table_backend(r, lanes, data["seeds"])]:
        raise CLIError(f"--table '{path}': backend '{bad[0]}' is not a table row (seeds, climbs and planning times per "
                       "seed, per_platform counts of every platform); pass a file `flashnerd plan-table` wrote")
    return data


def _ints(x) -> bool:
    return isinstance(x, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in x)


def _is_table_backend(r, lanes: list[str], seeds: list[int]) -> bool:
    """Whether `r` has the shape of a backend's row in a plan-table JSON: one entry per seed (distinct, among the
    table's `seeds`), every platform counted, no count above what it counts from, and the counts per platform adding
    up to the counts per seed (both count the same climbs)."""
    if not (isinstance(r, dict) and _ints(r.get("seeds")) and _ints(r.get("climbs_per_seed"))
            and _ints(r.get("platforms_per_seed")) and finite_number(r.get("median_planning_ms"))
            and isinstance(r.get("median_planning_ms_per_seed"), list)
            and all(finite_number(ms) for ms in r["median_planning_ms_per_seed"])
            and isinstance(r.get("per_platform"), dict) and sorted(r["per_platform"]) == sorted(lanes)):
        return False
    n = len(r["seeds"])
    per_seed = (r["climbs_per_seed"], r["platforms_per_seed"], r["median_planning_ms_per_seed"])
    return (n > 0 and len(set(r["seeds"])) == n and set(r["seeds"]) <= set(seeds)
            and all(len(x) == n for x in per_seed)
            and all(0 <= c <= p <= len(lanes) for c, p in zip(r["climbs_per_seed"], r["platforms_per_seed"]))
            and all(_ints(c) and len(c) == 2 and 0 <= c[0] <= c[1] <= n for c in r["per_platform"].values())
            and sum(c[0] for c in r["per_platform"].values()) == sum(r["climbs_per_seed"])
            and sum(c[1] for c in r["per_platform"].values()) == sum(r["platforms_per_seed"]))


def join_table(earlier: dict, table: dict, name: str, replace: bool = False) -> dict:
    """An earlier plan-table's backends joined with `table`'s (both from `merge_runs`): the same settings and
    platforms (lanes and heights) are required, a backend in both is refused (which of its seeds to keep is the
    user's call) unless `replace`, where `table`'s row replaces the earlier one whole."""
    if differ := [k for k in TABLE_SETTINGS if _setting(earlier, k) != _setting(table, k)]:
        raise CLIError(f"--table '{name}' was planned with other {', '.join(differ)} than the runs; a table over seeds "
                       "needs one planner setting")
    if earlier["platforms"] != table["platforms"]:
        raise CLIError(f"--table '{name}' holds platforms {[p['lane'] for p in earlier['platforms']]}, the runs "
                       f"{[p['lane'] for p in table['platforms']]}; run the same platforms")
    if (both := [b for b in table["backends"] if b in earlier["backends"]]) and not replace:
        raise CLIError(f"--table '{name}' already has backend '{both[0]}'; pass --replace with all its runs, or "
                       "only other backends' runs")
    kept = {b: r for b, r in earlier["backends"].items() if b not in table["backends"]}
    seeds = [s for s in earlier["seeds"] if any(s in r["seeds"] for r in kept.values())]  # a replaced row's seeds go
    joined = dict(table)
    joined.update(seeds=seeds + [s for s in table["seeds"] if s not in seeds],
                  runs=list(dict.fromkeys(earlier["runs"] + table["runs"])), backends={**kept, **table["backends"]})
    return joined


def merge_runs(runs: list[dict], names: list[str]) -> dict:
    """Plan runs (one per seed, same settings otherwise) -> per backend: the seeds it ran on, climbs per seed and in
    total, climbs per platform counted over seeds, and the median planning time over all its decisions (and per
    seed). A run of other settings or thread count, a seed given twice, a backend planned with another checkpoint, on
    other platforms, or whose run is incomplete are one-line errors naming the file."""
    first = runs[0]
    seeds: list[int] = []
    for run, name in zip(runs, names):
        differ = [k for k in TABLE_SETTINGS if _setting(run, k) != _setting(first, k)]
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
            mine = entry_sha256(r)  # once per run: a run written before digests is hashed from its file
            entry = backends.setdefault(backend, {"checkpoint": r.get("checkpoint"), "checkpoint_sha256": mine,
                                                  "runs": []})
            if not same_checkpoint({**r, "checkpoint_sha256": mine}, entry):
                theirs = entry["checkpoint_sha256"]
                raise CLIError(f"'{name}': backend '{backend}' planned with checkpoint {r.get('checkpoint')}"
                               f"{f' (sha256 {mine[:12]})' if mine else ''}, another run with {entry['checkpoint']}"
                               f"{f' (sha256 {theirs[:12]})' if theirs else ''}; a table over seeds needs one model "
                               "per backend")
            entry["checkpoint_sha256"] = entry["checkpoint_sha256"] or mine
            planned = sorted(p["lane"] for p in r["per_platform"])
            if entry["runs"] and planned != entry["lanes"]:
                raise CLIError(f"'{name}': backend '{backend}' planned platforms {planned}, another run "
                               f"{entry['lanes']}; a table over seeds needs the same platforms on every seed")
            entry["lanes"] = planned
            entry["runs"].append((run["seed"], r["per_platform"]))
            lanes.update({p["lane"]: p["height"] for p in r["per_platform"]})
    order = sorted(lanes)
    out = {k: _setting(first, k) for k in TABLE_SETTINGS}
    out.update(seeds=seeds, runs=names,
               platforms=[{"lane": lane, "height": lanes[lane]} for lane in order], backends={})
    for backend, entry in backends.items():
        per_seed = [{p["lane"]: p for p in platforms} for _, platforms in entry["runs"]]
        times = [[ms for p in platforms for ms in p["planning_ms"]] for _, platforms in entry["runs"]]
        out["backends"][backend] = {
            "checkpoint": entry["checkpoint"],
            **({"checkpoint_sha256": entry["checkpoint_sha256"]} if entry["checkpoint_sha256"] else {}),
            "seeds": [seed for seed, _ in entry["runs"]],
            "climbs_per_seed": [sum(p["climbed"] for p in run.values()) for run in per_seed],
            "platforms_per_seed": [len(run) for run in per_seed],
            # lane -> [climbed on it, planned on it] over the seeds
            "per_platform": {str(lane): [sum(run[lane]["climbed"] for run in per_seed if lane in run),
                                         sum(lane in run for run in per_seed)] for lane in order},
            "median_planning_ms": float(np.median([ms for t in times for ms in t])),
            "median_planning_ms_per_seed": [float(np.median(t)) for t in times],
        }
        # the machines its platforms were planned on, where recorded (a run may span sessions on other machines)
        if machines := machines_of([p for run in per_seed for p in run.values()]):
            out["backends"][backend]["machines"] = machines
    return out


__all__ = ["add_parser", "join_table", "merge_runs", "run"]
