"""Results pages that rebuild themselves: tables and figures regenerated from the benchmark JSON in `docs/results/`.

A page marks each generated block with `<!-- report:NAME -->` ... `<!-- /report -->`; `NAME.json` in the results
folder says what goes there. The file-name prefix picks the renderer:

    bench_ppo_*      `flashnerd bench ppo` JSON -> table + reward-vs-time plot (NAME.png)
    bench_model_*    `flashnerd bench model` JSON -> throughput table
    model_eval_*     {model: `flashnerd evaluate-model` JSON} -> long-horizon accuracy table
    transfer_*       {trained_on: `flashnerd train` summary} -> returns in each backend, side by side
    fit_scaling_*    {processes: `flashnerd fit` JSON} -> data-parallel fitting throughput table
    model_suite*     `flashnerd bench suite` JSON -> Table I (NRMSE, throughput per robot) + radar plot (NAME.png)
    cube_reorient*   `flashnerd bench ppo` JSON of a goal task -> targets per episode + targets over time (NAME.png)
    microduck_finetune*, finetune_*  `flashnerd bench finetune` JSON -> wall time, success, return, falls per
                     backend + chart (NAME.png)
    platform_climb*  `flashnerd plan --out` JSON -> climbs and planning time per backend + base height over time
                     per platform (NAME.png)
    climb_seeds*     `flashnerd plan-table` JSON -> climbs per backend over planner seeds, per platform counted
    bench_plan*      `flashnerd bench plan` JSON -> planning time per decision per backend, ratio to the first
    reality_gap*     `flashnerd bench reality-gap` JSON -> every policy's return in the robot variant, the model's
                     held-out error per round + return against minutes of robot data (NAME.png); a run still going
                     shows its finished stages
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from flashnerd.dynamics import REFERENCE_BACKEND
from flashnerd.planning.climb import ClimbPlanCfg
from flashnerd.utils.hints import finite_number
from flashnerd.utils.machine import NOT_RECORDED, machines_of
from flashnerd.viz.figure import save_figure
from flashnerd.viz.suite import plot_radar, suite_table

BLOCK = re.compile(r"(<!-- report:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /report -->)", re.S)


def _line_axes():
    """A (figure, axes) pair for a per-backend line plot, on the non-interactive backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6.4, 4.0))


def _finish_line_plot(fig, ax, path: str | Path, xlabel: str, ylabel: str, title: str) -> None:
    """Label the axes, title and legend of a per-backend line plot and write it (`save_figure`)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def plot_ppo(backends: dict, path: str | Path, title: str) -> None:
    """Mean training return against accumulated training time per run; a diamond marks the final policy's MuJoCo
    evaluation, and a dotted line the saved policies' MuJoCo returns where the run has them (`--eval_every`)."""
    fig, ax = _line_axes()
    for backend, r in backends.items():
        t, rew = zip(*r["curve"])
        line, = ax.plot(t, rew, label=f"{backend} ({r['seconds_per_iteration']:.2f} s/it)")
        if r.get("mujoco_curve"):
            mt, mret = zip(*r["mujoco_curve"])
            ax.plot(mt, mret, linestyle=":", marker=".", color=line.get_color())
        ax.plot([t[-1]], [r["eval_mujoco"]["mean_return"]], marker="D", color=line.get_color(), markersize=8)
    note = "diamonds: final policy evaluated in MuJoCo"
    if any(r.get("mujoco_curve") for r in backends.values()):
        note += "; dotted: saved policies in MuJoCo"
    _finish_line_plot(fig, ax, path, "accumulated training time (s)", "mean episode return", f"{title}\n({note})")


def plot_targets(backends: dict, path: str | Path, title: str) -> None:
    """Fig. 8 analog: mean goals reached so far against episode time, one line per training backend, every policy
    evaluated in MuJoCo."""
    fig, ax = _line_axes()
    colors, styles, drawn = {}, ("-", "--", ":", "-."), Counter()
    for run, r in backends.items():  # runs of one backend (several seeds): one colour, a dash per seed
        group = _group(run, r)
        colors.setdefault(group, f"C{len(colors)}")
        dash = styles[drawn[group] % len(styles)]
        drawn[group] += 1
        e = r["eval_mujoco"]
        curve = e["targets_over_time"]
        ax.plot([e["step_dt"] * (i + 1) for i in range(len(curve))], curve, color=colors[group], linestyle=dash,
                label=f"trained on {run}: {r['targets_per_episode']:.2f} targets/episode")
    _finish_line_plot(fig, ax, path, "time in episode (s)", "targets reached (mean over episodes)",
                      f"{title}\n(every policy evaluated in MuJoCo)")


def plot_finetune(backends: dict, path: str | Path, title: str) -> None:
    """Fig. 6: mean wall time of the fine-tuning iterations per backend (bars), MuJoCo success rate on the labels (the
    return on a task without a success measure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(backends)
    seconds = [backends[b]["seconds_per_100_iterations"] for b in names]
    fig, ax = plt.subplots(figsize=(4.8, 3.6))
    bars = ax.bar(names, seconds, color=["#4c72b0", "#55a868", "#c44e52", "#8172b2"][:len(names)])
    for bar, b in zip(bars, names):
        success = backends[b].get("success_rate")
        outcome = (f"success {100 * success:.0f}%" if success is not None
                   else f"return {backends[b]['mean_return']:.1f}")
        ax.annotate(f"{bar.get_height():.0f} s\n{outcome}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("wall time of 100 PPO iterations (s)")
    ax.set_title(f"{title}\n(fine-tuned per backend, evaluated in MuJoCo)", fontsize=9)
    ax.margins(y=0.25)
    fig.tight_layout()
    save_figure(fig, path)


def plot_reality_gap(summary: dict, path: str | Path) -> None:
    """Return in the robot variant of the policy trained on the adapted model (its last round, and its first where
    there are several), against minutes of robot data; the baselines (nominal MuJoCo, domain randomization over the
    variant's ranges, the oracle on the variant) as horizontal lines, and as wide pale ones the safe policy fine-tuned
    without the model (on nominal MuJoCo, on the variant) where round 0 fine-tuned it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(6.4, 3.4 + 0.17 * (len(summary["baselines"]) + len(summary.get("fine_tuned", {}))
                                                      + 2)))
    budgets = summary["budgets"]
    rounds = summary.get("rounds_per_budget", 1)
    # at the robot time each policy's model had seen: the last round all of the budget, the first its first part
    spent = [b.get("robot_minutes", b["minutes"]) for b in budgets]
    ax.plot(spent, [b["eval_variant"]["mean_return"] for b in budgets], "o-", color="#55a868",
            label=f"PPO on {summary['model']} adapted to the robot's logs"
                  + (f" ({rounds} rounds of PPO, rollouts, refit)" if rounds > 1 else "") + _start_of_round_0(summary))
    first = [b["logged"]["robot_minutes"] for b in budgets] if rounds > 1 else []
    if first:
        ax.plot(first,
                [b["rounds"][0]["eval_variant"]["mean_return"] for b in budgets], "^:", color="#55a868", alpha=0.6,
                label="its first round (adapted to the safe policy's logs only)")
    styles = {"nominal": ("#4c72b0", "--", "PPO on nominal MuJoCo"),
              "oracle": ("#c44e52", ":", "oracle: PPO on the variant"),
              "randomized": ("#8172b2", "-.", "PPO on MuJoCo, randomized over the ranges")}
    safe = _safe_baseline(summary)
    for name, result in summary["baselines"].items():
        color, style, label = styles.get(name, ("#8172b2", "-.", name))
        label += " (the safe policy)" if name == safe else ""
        ax.axhline(result["eval_variant"]["mean_return"], color=color, linestyle=style, label=label)
    for name, result in summary.get("fine_tuned", {}).items():  # the safe policy fine-tuned without the model
        color, style, _ = styles[name]
        ax.axhline(result["eval_variant"]["mean_return"], color=color, linestyle=style, alpha=0.45, linewidth=2.5,
                   label=f"the safe policy + {result['iterations']} iterations on "
                         f"{'the variant' if name == 'oracle' else 'nominal MuJoCo'}")
    ax.set_xscale("log")
    ticks = sorted(set(spent + first))
    ax.set_xticks(ticks, [f"{m:.2g}" for m in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())  # only the budgets' minutes are labelled
    ax.set_xlabel("minutes of robot data (summed over robots)")
    ax.set_ylabel(f"return in the variant ({summary['eval_episodes']} episodes)")
    ax.set_title(f"{Path(summary['robot_variant']).stem}: the reality gap", fontsize=9)
    # below the axes: the labels are long, and a legend inside would hide the lines it names
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    fig.tight_layout()
    save_figure(fig, path)


def plot_improve(state: dict, path: str | Path) -> None:
    """`flashnerd improve`: each round's policies evaluated on their model and in the target system (return; falls
    on the labels), against the target-system minutes of data the model had seen when they were trained; one colour
    per lineage."""
    fig, ax = _line_axes()
    rounds = state["rounds"]
    minutes = [sum(x.get("target_seconds", 0.0) for done in rounds[:i] for x in done["lineages"]) / 60
               for i in range(len(rounds))]
    lineages = max((len(row["lineages"]) for row in rounds), default=0)
    several = lineages > 1
    for k in range(lineages):
        drawn = [(m, row["round"], row["lineages"][k]) for m, row in zip(minutes, rounds)
                 if len(row["lineages"]) > k and "eval" in row["lineages"][k]]
        name, tag, color = (f"lineage {k}, ", f"L{k} ", {"color": f"C{k}"}) if several else ("", "", {})
        for where, style in (("target", "o-"), ("model", "s--")):
            returns = [x["eval"][where]["mean_return"] for _, _, x in drawn]
            ax.plot([m for m, _, _ in drawn], returns, style, **color,
                    label=f"{name}on the {where}" + (" system" if where == "target" else ""))
            if where == "target":
                for (m, r, x), ret in zip(drawn, returns):
                    ax.annotate(f"{tag}round {r}: "
                                f"{100 * x['eval']['target']['fall_rate']:.0f}% falls", (m, ret),
                                fontsize=7, textcoords="offset points", xytext=(4, -10 - 9 * k))
    variant = state["settings"].get("robot_variant")
    target = f"MuJoCo, {Path(variant).stem}" if variant else "MuJoCo"
    _finish_line_plot(fig, ax, path, "minutes of target-system data in the model", "mean episode return",
                      f"flashnerd improve: {state['settings']['task']}\n(target system: {target})")


def _machines(runs: dict[str, dict]) -> list[str]:
    """Lines naming the machine each run was timed on (runs joined over sessions may differ), or none where no run
    recorded one (files from before machines were recorded)."""
    by_machine: dict[str, list[str]] = {}
    for key, r in runs.items():
        by_machine.setdefault(r.get("machine") or "", []).append(f"`{key}`")
    if list(by_machine) == [""]:
        return []
    if len(by_machine) == 1:
        return ["", f"Timed on {next(iter(by_machine))}."]
    return ["", "Timed on: " + "; ".join(f"{m or NOT_RECORDED} ({', '.join(keys)})"
                                          for m, keys in by_machine.items()) + "."]


def _bench_ppo(data: dict, name: str, folder: Path) -> str:
    plot_ppo(data["backends"], folder / f"{name}.png", data["task"])
    # SHAC's iterations are another unit (one window of its own worlds): PPO runs are compared with PPO runs
    fastest = min((r["seconds_per_iteration"] for r in data["backends"].values() if r.get("algo", "ppo") == "ppo"),
                  default=None)
    shac = data.get("shac")
    budget = data.get("max_seconds")
    # the env trackers' state at the end of training (e.g. the terrain curriculum's mean level), by name
    states = sorted({k for r in data["backends"].values() for k in r.get("tracker_state", {})})
    rows = [f"{data['num_envs']} envs, {data['iterations']} iterations per backend"
            + (f" or {budget:.0f} s of training, whichever ends first" if budget else "")
            + f", device `{data['device']}`"
            + (f"; SHAC runs (`backend:shac`): {shac['num_envs']} envs, {shac['iterations']} iterations of "
               f"{shac['horizon']} steps." if shac else "."), "",
            "| training run | " + ("iterations | training s | " if budget else "") + "s / iteration | "
            "collecting / updating | vs fastest | return in MuJoCo | MuJoCo lin-vel RMS | MuJoCo fall rate |"
            + "".join(f" {k.split('/')[-1].replace('_', ' ')} at the end |" for k in states),
            "|---" * (7 + 2 * bool(budget) + len(states)) + "|"]
    vs_fastest = lambda r: (f"{r['seconds_per_iteration'] / fastest:.2f}x"  # noqa: E731
                            if fastest and r.get("algo", "ppo") == "ppo" else "-")
    for backend, r in sorted(data["backends"].items(), key=lambda kv: kv[1]["seconds_per_iteration"]):
        e = r["eval_mujoco"]
        halves = (f"{r['collect_seconds_per_iteration']:.2f} / {r['learn_seconds_per_iteration']:.2f}"
                  if "collect_seconds_per_iteration" in r else "-")  # runs written before the halves were kept
        spent = f"{len(r['curve'])} | {r['total_seconds']:.0f} | " if budget else ""
        ends = "".join(f" {r['tracker_state'][k]:.2f} |" if k in r.get("tracker_state", {}) else " - |" for k in states)
        rows.append(f"| `{backend}` | {spent}{r['seconds_per_iteration']:.2f} | {halves} | "
                    f"{vs_fastest(r)} | {e['mean_return']:.1f} | {e['lin_vel_rms']:.3f} | "
                    f"{e['fall_rate']:.2f} |{ends}")
    rows += _machines(data["backends"])
    tt = data.get("time_to_target")
    if tt and tt["target_return"] is None:
        rows += ["", f"No time to target: {tt['reference']}'s final MuJoCo return ({tt['reference_return']:.1f}) "
                 "is not positive."]
    elif tt:
        rows += ["", f"Training time until the policy's MuJoCo return first reached {tt['fraction']:.0%} of "
                 f"{tt['reference']}'s final return ({tt['reference_return']:.1f}, so {tt['target_return']:.1f}), "
                 f"read off the policies saved every {data['eval_every']} PPO iterations"
                 + (" (SHAC's at the same fractions of its run)" if shac else "") + ":", "",
                 "| run | seconds to target |", "|---|---|"]
        rows += [f"| `{k}` | {'not reached' if t is None else f'{t:.0f}'} |" for k, t in tt["seconds"].items()]
    seconds = lambda t: "not reached" if t is None else f"{t:.0f}"  # noqa: E731
    no_gain = set(tt.get("no_gain", [])) if tt else set()

    def mean(r: dict) -> str:  # a backend whose every run gained nothing has no mean time either
        return "no gain" if r.get("keys") and set(r["keys"]) <= no_gain else seconds(r["own_seconds_mean"])

    def each(r: dict) -> str:  # per run; files from before `keys` was kept name no runs
        return ", ".join("no gain" if k in no_gain else seconds(t)
                         for k, t in zip(r.get("keys", [None] * r["runs"]), r["own_seconds"]))
    if tt and "by_backend" in tt and any(b["runs"] > 1 for b in tt["by_backend"].values()):
        rows += ["", f"Over seeds (the seed's Fig. 5 reading): each run's time to {tt['fraction']:.0%} of its own "
                 "final MuJoCo return, and the final returns' mean and spread:", "",
                 "| training backend | runs | final return, mean (lowest - highest) | seconds to its own target, "
                 "mean (each run) |", "|---|---|---|---|"]
        rows += [f"| `{b}` | {r['runs']} | {r['final_mean']:.1f} ({r['final_min']:.1f} - {r['final_max']:.1f}) | "
                 f"{mean(r)} ({each(r)}) |" for b, r in tt["by_backend"].items()]
        if no_gain:
            rows += ["", f"No gain: {', '.join(f'`{k}`' for k in sorted(no_gain))}: "
                     + ("each run" if len(no_gain) > 1 else "the run") + " ended no better in MuJoCo than the first "
                     "policy it saved, so has no time to its own target (a backend's mean is over its other runs)."]
    rows += ["", f"![PPO reward against accumulated training time](results/{name}.png)"]
    return "\n".join(rows)


def _on(data: dict) -> str:
    """', on <machine>' for a benchmark JSON that recorded its machine, else nothing."""
    return f", on {data['machine']}" if data.get("machine") else ""


def _bench_model(data: dict, name: str, folder: Path) -> str:
    models = list(data["steps_per_s"])
    batches = list(data["steps_per_s"][models[0]])
    rows = [f"Robot `{data['robot']}`, size class `{data['size']}`, device `{data['device']}`, "
            f"{data['threads']} threads{_on(data)}; steps x worlds per second.", "",
            "| batch | " + " | ".join(models) + " | FlashNeRD / NeRD |", "|---" * (len(models) + 2) + "|"]
    for b in batches:
        cells = " | ".join(f"{data['steps_per_s'][m][b]:,.0f}" for m in models)
        ratio = data.get("ratio", {}).get(b)
        rows.append(f"| {int(b):,} | {cells} | {f'{ratio:.1f}x' if ratio else '-'} |")
    if "roofline" in data:  # achieved FLOP rate over the matmul rate at the model's own shapes, same run
        rows += ["", "Roofline: the model's achieved GFLOP/s and its fraction of the fp32 matmul rate measured at the "
                 "model's own matrix shapes right after it.", "",
                 "| batch | " + " | ".join(f"{m} GFLOP/s (fraction)" for m in models) + " |",
                 "|---" * (len(models) + 1) + "|"]
        for b in batches:
            cells = " | ".join(f"{r['achieved_gflops']:.1f} ({r['fraction']:.0%})" if (r := data["roofline"][m].get(b))
                               else "-" for m in models)
            rows.append(f"| {int(b):,} | {cells} |")
    return "\n".join(rows)


def _model_eval(data: dict, name: str, folder: Path) -> str:
    horizons = list(next(iter(data.values()))["nrmse"])
    rows = ["| model | training time (s) | " + " | ".join(f"NRMSE H={h}" for h in horizons)
            + f" | base pos. error H={horizons[-2]} (m) |", "|---" * (len(horizons) + 3) + "|"]
    for model, r in data.items():
        nrmse = " | ".join(f"{r['nrmse'][h]:.3f}" for h in horizons)
        rows.append(f"| {model} | {r['train_seconds']} | {nrmse} | {r['base_pos_err_m'][horizons[-2]]:.2f} |")
    return "\n".join(rows)


def _transfer(data: dict, name: str, folder: Path) -> str:
    rows = ["| trained on | envs x iterations | training wall time (s) | return on its backend | return in MuJoCo | "
            "MuJoCo lin-vel RMS (m/s) | MuJoCo fall rate |", "|---|---|---|---|---|---|---|"]
    for trained_on, s in data.items():
        sim = s["eval"][REFERENCE_BACKEND]
        own = s["eval"].get(s["dynamics"], sim)
        rows.append(f"| `{trained_on}` | {s['num_envs']} x {s['iterations']} | {s['wall_time_s']:.0f} | "
                    f"{own['mean_return']:.1f} | {sim['mean_return']:.1f} | {sim['lin_vel_rms']:.3f} | "
                    f"{sim['fall_rate']:.2f} |")
    return "\n".join(rows)


def _fit_scaling(data: dict, name: str, folder: Path) -> str:
    """{global batch label: {processes: fit JSON}} -> one row per batch and process count."""
    rows = ["| global batch (windows + AR rollouts) | processes x threads | steps | windows / s | speed-up | "
            "final val loss |", "|---|---|---|---|---|---|"]
    for batch, runs in data.items():
        base = runs["1"]["windows_per_s"]
        for procs, r in runs.items():
            rows.append(f"| {batch} | {procs} x {r['threads']} | {r['steps']} | {r['windows_per_s']:,.1f} | "
                        f"{r['windows_per_s'] / base:.2f}x | {r['val_loss_final']:.4f} |")
    return "\n".join(rows)


def _model_suite(data: dict, name: str, folder: Path) -> str:
    """`flashnerd bench suite` JSON -> Table I (NRMSE and throughput per robot and model) + Fig. 4 radar plot."""
    plot_radar(data, folder / f"{name}.png")
    return suite_table(data) + f"\n\n![Accuracy and throughput per robot, radar plot](results/{name}.png)"


def _reorient(data: dict, name: str, folder: Path) -> str:
    """`flashnerd bench ppo` JSON of a goal task -> targets per episode in MuJoCo per training backend + targets over
    episode time (NAME.png)."""
    plot_targets(data["backends"], folder / f"{name}.png", data["task"])
    backends = data["backends"]
    groups: dict[str, list[dict]] = {}  # training run (backend, or backend:algo) -> its runs over seeds
    for run, r in backends.items():
        groups.setdefault(_group(run, r), []).append(r)
    mean = statistics.fmean
    ref_runs = groups.get(REFERENCE_BACKEND, [])
    ref = mean([r["targets_per_episode"] for r in ref_runs]) if ref_runs else None  # over the reference's seeds
    rows = [f"{data['num_envs']} envs, {data['iterations']} PPO iterations per backend, device `{data['device']}`; "
            "every policy evaluated in MuJoCo.", "",
            "| trained on | s / PPO iteration | targets per episode (MuJoCo) | vs `mujoco`-trained | cube dropped | "
            "episode length (s) | return (MuJoCo) |", "|---|---|---|---|---|---|---|"]
    for run, r in backends.items():
        e = r["eval_mujoco"]
        rel = f"{100 * r['targets_per_episode'] / ref:.0f}%" if ref else "-"
        rows.append(f"| `{run}` | {r['seconds_per_iteration']:.2f} | {r['targets_per_episode']:.2f} | {rel} | "
                    f"{100 * e['fall_rate']:.0f}% | {e['mean_episode_length_s']:.1f} | {e['mean_return']:.1f} |")
    rows += _machines(backends)
    if any(len(runs) > 1 for runs in groups.values()):
        spread = lambda values, fmt: f"{fmt(mean(values))} ({fmt(min(values))} - {fmt(max(values))})"  # noqa: E731
        pct = lambda x: f"{100 * x:.0f}%"  # noqa: E731
        rows += ["", "Over seeds (the seed's Fig. 8 reading): mean over each training backend's runs, lowest - "
                 "highest in brackets; the `mujoco` reference is its mean.", "",
                 "| trained on | runs | targets per episode | vs `mujoco`-trained | cube dropped | return (MuJoCo) |",
                 "|---|---|---|---|---|---|"]
        for group, runs in groups.items():
            targets = [r["targets_per_episode"] for r in runs]
            rel = spread([t / ref for t in targets], pct) if ref else "-"
            rows.append(f"| `{group}` | {len(runs)} | {spread(targets, lambda x: f'{x:.2f}')} | {rel} | "
                        f"{spread([r['eval_mujoco']['fall_rate'] for r in runs], pct)} | "
                        f"{spread([r['eval_mujoco']['mean_return'] for r in runs], lambda x: f'{x:.1f}')} |")
    rows += ["", f"![Targets reached over episode time per training backend](results/{name}.png)"]
    return "\n".join(rows)


def _group(key: str, run: dict) -> str:
    """The training run that `bench ppo`'s run `key` is a seed of (the key itself in files written before runs
    recorded their backend)."""
    return run_label(run) if "backend" in run else key


def run_label(run: dict) -> str:
    """A `bench ppo` run's name as --dynamics gives it (what its seeds have in common): its backend for PPO (runs
    written before SHAC had no algo), else backend:algo."""
    algo = run.get("algo", "ppo")
    return run["backend"] if algo == "ppo" else f"{run['backend']}:{algo}"


def _percent(share: float | None) -> str:
    """A share as a table cell; '-' where the run has no such figure (a task without success, a JSON written before
    falls were recorded) or it is not a number."""
    return f"{100 * share:.1f}%" if finite_number(share) else "-"


def _finetune(data: dict, name: str, folder: Path) -> str:
    """`flashnerd bench finetune` JSON -> wall time, MuJoCo success, return and falls per backend + bar chart."""
    backends = data["backends"]
    plot_finetune(backends, folder / f"{name}.png", data["task"])
    ref = backends.get(REFERENCE_BACKEND, {}).get("seconds_per_100_iterations")
    rows = [f"{data['iterations']} fine-tuning iterations x {data['seeds']} seeds per backend, "
            f"{data['num_envs']} envs, device `{data['device']}`{_on(data)}; every policy evaluated in MuJoCo.", "",
            "| fine-tuned on | s / 100 iterations | speed-up vs `mujoco` | success rate (MuJoCo) | return (MuJoCo) "
            "| falls (MuJoCo) |",
            "|---|---|---|---|---|---|"]
    for backend, r in backends.items():
        speed = f"{ref / r['seconds_per_100_iterations']:.2f}x" if ref else "-"
        rows.append(f"| `{backend}` | {r['seconds_per_100_iterations']:.1f} | {speed} | "
                    f"{_percent(r.get('success_rate'))} | {r['mean_return']:.1f} | {_percent(r.get('fall_rate'))} |")
    if "pretrained_eval" in data:
        e = data["pretrained_eval"]
        rows.append(f"| (pretrained, not fine-tuned) | - | - | {_percent(e.get('success_rate'))} | "
                    f"{e['mean_return']:.1f} | {_percent(e.get('fall_rate'))} |")
    rows += ["", f"![Fine-tuning wall time and MuJoCo outcome per backend](results/{name}.png)"]
    return "\n".join(rows)


def _climb_lanes(backends: dict) -> list[dict]:
    """The platforms of the backend that got furthest (an incomplete run of `flashnerd plan --out` has fewer)."""
    return max((r["per_platform"] for r in backends.values()), key=len)


def plot_climb(data: dict, path: str | Path) -> None:
    """Base height over time, one panel per platform, one line per planning backend (executed in MuJoCo)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends = data["backends"]
    lanes = _climb_lanes(backends)
    cols = min(3, len(lanes))
    rows = (len(lanes) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False, sharey=True)
    dt = data["episode_s"] / max(1, len(lanes[0]["base_path"]))
    for i, lane in enumerate(lanes):
        ax = axes[i // cols][i % cols]
        for backend, r in backends.items():
            p = next((p for p in r["per_platform"] if p["lane"] == lane["lane"]), None)
            if p is None:  # an incomplete run (flashnerd plan --out writes after every platform)
                continue
            z = [xyz[2] for xyz in p["base_path"]]
            ax.plot([dt * (k + 1) for k in range(len(z))], z, label=f"{backend} {'climbed' if p['climbed'] else '-'}")
        ax.axhline(lane["height"], color="gray", lw=0.8, ls=":")
        ax.set_title(f"platform {lane['lane']}: {lane['height']:.3f} m", fontsize=8)
        ax.legend(fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("time (s)", fontsize=8)
    for row in axes:
        row[0].set_ylabel("base height (m)", fontsize=8)
    fig.suptitle(f"{data['task']}: DIAL-MPC planning on each backend, executed in MuJoCo", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)


def _climb(data: dict, name: str, folder: Path) -> str:
    """`flashnerd plan --out` JSON -> climbs and median planning time per backend + base height plot (NAME.png)."""
    plot_climb(data, folder / f"{name}.png")
    backends = data["backends"]
    ref = backends.get(REFERENCE_BACKEND, {}).get("median_planning_ms")
    lanes = _climb_lanes(backends)
    heads = " | ".join(f"{p['height']:.3f} m" for p in lanes)
    rows = [f"{data['num_samples']} samples, horizon {data['horizon']}, {data['iterations']} iterations per control "
            f"step, {data['episode_s']:.0f} s per platform, {data['threads']} threads, device `{data['device']}`; "
            + ("" if data["lookahead_in_stance"] else "feet reference looks ahead in swing only; ")
            + ("stands at the goal; " if data["stand_at_goal"] else "")
            + "".join(f"reward weight {k} {v:g}; " for k, v in data["weights"].items()
                      if v != ClimbPlanCfg().weights.get(k))
            + "every chosen action executed in MuJoCo.", "",
            f"| planning backend | climbs | median planning time per decision (ms) | vs `mujoco` | {heads} |",
            "|---|---|---|---|" + "---|" * len(lanes)]
    for backend, r in backends.items():
        rel = f"{r['median_planning_ms'] / ref:.2f}x" if ref else "-"
        done = {p["lane"]: p["climbed"] for p in r["per_platform"]}
        marks = " | ".join({True: "yes", False: "no", None: "-"}[done.get(p["lane"])] for p in lanes)
        climbs = f"{r['climbs']}/{r['platforms']}" + ("" if r["complete"] else " (incomplete)")
        rows.append(f"| `{backend}` | {climbs} | {r['median_planning_ms']:.0f} | {rel} | {marks} |")
    rows += _machines({b: {"machine": " and ".join(machines_of(r["per_platform"]))} for b, r in backends.items()})
    rows += ["", f"![Base height over time per platform and planning backend](results/{name}.png)"]
    return "\n".join(rows)


def _climb_seeds(data: dict, name: str, folder: Path) -> str:
    """`flashnerd plan-table` JSON -> climbs per backend over planner seeds (per seed and per platform, counted)."""
    lanes = data["platforms"]
    heads = " | ".join(f"{p['height']:.3f} m" for p in lanes)
    refine = f", {data['grad_steps']} gradient steps (lr {data['grad_lr']:g})" if data.get("grad_steps") else ""
    rows = [f"Planner seeds {', '.join(str(s) for s in data['seeds'])}; {data['num_samples']} samples, horizon "
            f"{data['horizon']}, {data['iterations']} iterations per control step{refine}, {data['episode_s']:.0f} s "
            "per platform; every chosen action executed in MuJoCo. Each platform's cell counts the seeds it was "
            "climbed on.", "",
            f"| planning backend | seeds | climbs (per seed) | mean per seed | median ms per decision | {heads} |",
            "|---|---|---|---|---|" + "---|" * len(lanes)]
    for backend, r in data["backends"].items():
        total, planned = sum(r["climbs_per_seed"]), sum(r["platforms_per_seed"])
        cells = " | ".join("{}/{}".format(*r["per_platform"][str(p["lane"])]) for p in lanes)
        rows.append(f"| `{backend}` | {', '.join(str(s) for s in r['seeds'])} | {total}/{planned} "
                    f"({', '.join(str(c) for c in r['climbs_per_seed'])}) | "
                    f"{total / len(r['seeds']):.1f} | {r['median_planning_ms']:.0f} | {cells} |")
    rows += _machines({b: {"machine": " and ".join(r.get("machines", []))} for b, r in data["backends"].items()})
    return "\n".join(rows)


def _bench_plan(data: dict, name: str, folder: Path) -> str:
    """`flashnerd bench plan` JSON -> planning time per decision per backend, and the ratio to the first."""
    ratio = next(v for k, v in data.items() if k.startswith("ratio_to_"))
    first = next(iter(data["backends"]))
    rows = [f"Platform {data['platform']} ({data['height']:.3f} m), {data['num_samples']} samples, horizon "
            f"{data['horizon']}, {data['iterations']} iterations per decision, torch.compile "
            f"{'on' if data['compile'] else 'off'}, {data['threads']} threads, device `{data['device']}`{_on(data)}; "
            f"{data['decisions']} timed decisions per backend in {data['turns']} turns.", "",
            f"| planning backend | median ms per decision | p10 | p90 | vs `{first}` |", "|---|---|---|---|---|"]
    rows += [f"| `{b}` | {r['median_planning_ms']:.0f} | {r['p10_ms']:.0f} | {r['p90_ms']:.0f} | {ratio[b]:.2f}x |"
             for b, r in data["backends"].items()]
    return "\n".join(rows)


def _start_of_round_0(data: dict) -> str:
    """How a `bench reality-gap` run's round 0 began, where it did not begin from scratch (runs from before
    --start_policy did)."""
    if data.get("settings", {}).get("start_policy", "scratch") == "scratch":
        return ""
    return " (round 0 fine-tunes the safe policy)"


def _safe_baseline(summary: dict) -> str:
    """The baseline whose policy logged a `bench reality-gap` run's first data (runs from before --safe_policy: the
    nominal one)."""
    return summary.get("settings", {}).get("safe_policy", "nominal")


def _reality_gap(data: dict, name: str, folder: Path) -> str:
    """Every policy of a `bench reality-gap` run in the variant (baselines, each budget's rounds), each fitted
    model's error on the held-out logs, and the plot once the baselines and a budget are done."""
    safe = _safe_baseline(data)
    labels = {"nominal": "PPO on nominal MuJoCo", "oracle": "oracle: PPO on the variant",
              "randomized": "PPO on MuJoCo randomized over the ranges"}
    labels[safe] += " (the safe policy)"
    rows = [f"Robot variant `{data['robot_variant']}`; {data['rounds_per_budget']} round(s) of "
            f"{data['iterations_per_round']} "
            f"PPO iterations per budget{_start_of_round_0(data)}, baselines {data['baseline_iterations']}; "
            f"{data['eval_episodes']} episodes per evaluation in the variant.", "",
            "| policy | robot time its model saw (min) | PPO wall (s) | return in the variant | of the oracle's | "
            "falls | lin-vel RMS | on its model |",
            "|---|---|---|---|---|---|---|---|"]
    oracle = data["baselines"].get("oracle", {}).get("eval_variant", {}).get("mean_return")

    def row(label: str, minutes: str, r: dict) -> str:
        e = r["eval_variant"]
        on_model = f"{r['eval_model']['mean_return']:.1f}" if "eval_model" in r else "-"
        # issue 26's bar reads a share of the oracle's return, which means nothing unless that return is positive
        share = f"{e['mean_return'] / oracle:.0%}" if oracle is not None and oracle > 0 else "-"
        return (f"| {label} | {minutes} | {r['train_wall_s']:.0f} | {e['mean_return']:.1f} | {share} | "
                f"{e['fall_rate']:.0%} | {e['lin_vel_rms']:.2f} | {on_model} |")

    # `evaluated_here`: figures of this robot, for a policy first trained in a run of another variant
    rows += [row(labels.get(k, k) + (" (reused, first trained for another variant)" if r.get("evaluated_here") else
                                      " (reused)" if "reused_from" in r else ""), "-", r)
             for k, r in data["baselines"].items()]
    tuned = {"nominal": "the safe policy fine-tuned on nominal MuJoCo", "oracle": "oracle: the safe policy "
             "fine-tuned on the variant"}
    rows += [row(f"{tuned.get(k, k)} (+{r['iterations']} iterations)", "-", r)
             for k, r in data.get("fine_tuned", {}).items()]
    reused = sorted({r["reused_from"] for r in data["baselines"].values() if "reused_from" in r})
    elsewhere = any(r.get("evaluated_here") for r in data["baselines"].values())
    note = ["", f"Baselines marked reused were trained once, for the run in `{', '.join(reused)}` (the same "
            f"{'' if elsewhere else 'robot, '}task, seed, PPO worlds, evaluation episodes and iterations: "
            "`--baselines_from`)" + ("; one first trained for another variant of the robot is the nominal policy "
                                     "(it never saw a variant), evaluated in this robot." if elsewhere else ".")
            ] if reused else []
    errors = ["", "NRMSE at H = 1 / 15 / 100 on held-out logs of the safe policy (no fit saw them):", "",
              "| model | robot time in its data (min) | the shipped model | this model |", "|---|---|---|---|"]

    def error_row(label: str, minutes: float, report: dict) -> str:
        cells = [" / ".join(f"{report[k][h]:.3f}" for h in ("1", "15", "100") if h in report[k])
                 for k in ("nrmse_before", "nrmse_after")]
        return f"| {label} | {minutes:.1f} | {cells[0]} | {cells[1]} |"

    logs = ["", "The robot's logs: minutes spent, minutes kept as trajectories, trajectories a fall interrupted, and "
            "those kept up to a fall in their place (`-`: a run from before they were kept):", "",
            "| logs | robot time (min) | kept (min) | interrupted | kept up to the fall |", "|---|---|---|---|---|"]

    def log_row(label: str, log: dict) -> str:
        kept = log["import"]
        return (f"| {label} | {log['robot_minutes']:.1f} | {kept['minutes']:.1f} | {kept.get('interrupted', '-')} | "
                f"{kept.get('fall_ending', '-')} |")

    for b in data["budgets"]:
        if "logged" not in b:
            continue
        logs.append(log_row(f"{b['minutes']:g}-min budget: the safe policy", b["logged"]))
        logs += [log_row(f"{b['minutes']:g}-min budget: round {r['round']}'s policy", r["rollouts"])
                 for r in b["rounds"] if "rollouts" in r]
        seen = b["logged"]["robot_minutes"]
        if "nrmse_held_out" in b:
            errors.append(error_row(f"adapted ({b['minutes']:g}-min budget)", seen, b["nrmse_held_out"]))
        for r in b["rounds"]:
            if "eval_variant" in r:
                rows.append(row(f"{data['model']}, {b['minutes']:g}-min budget, round {r['round']}", f"{seen:.1f}", r))
            if "rollouts" in r:
                seen += r["rollouts"]["robot_minutes"]
            if "nrmse_held_out" in r:
                errors.append(error_row(f"refitted after round {r['round']} ({b['minutes']:g}-min budget)", seen,
                                        r["nrmse_held_out"]))
    done = [b for b in data["budgets"] if "eval_variant" in b]
    if done and {safe, "oracle"} <= set(data["baselines"]):
        plot_reality_gap({**data, "budgets": done}, folder / f"{name}.png")
        errors += ["", f"![Return in the robot variant against minutes of robot data](results/{name}.png)"]
    return "\n".join(rows + note + errors + (logs if len(logs) > 5 else []))


RENDERERS: dict[str, Callable[[dict, str, Path], str]] = {
    "bench_ppo_": _bench_ppo, "bench_model_": _bench_model, "model_eval_": _model_eval, "transfer_": _transfer,
    "fit_scaling_": _fit_scaling, "model_suite": _model_suite, "cube_reorient": _reorient,
    "microduck_finetune": _finetune, "finetune_": _finetune, "platform_climb": _climb, "climb_seeds": _climb_seeds,
    "bench_plan": _bench_plan, "reality_gap": _reality_gap,
}


def render_block(name: str, folder: Path) -> str:
    """The Markdown of block `name` from `folder/name.json` (and any figure it writes next to it)."""
    path = folder / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"report block '{name}' needs {path}; run the command that writes it")
    renderer = next((fn for prefix, fn in RENDERERS.items() if name.startswith(prefix)), None)
    if renderer is None:
        raise ValueError(f"report block '{name}': no renderer for that name; prefixes: {', '.join(RENDERERS)}")
    try:
        return renderer(json.loads(path.read_text()), name, folder).rstrip() + "\n"
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as err:
        raise ValueError(f"{path} is not the JSON that block '{name}' expects ({type(err).__name__}: "
                         f"{str(err)[:100]}); write it again with the command named on the page") from err


def rebuild(page: str | Path, folder: str | Path) -> tuple[str, list[str]]:
    """Page text with every report block regenerated, and the names of the blocks."""
    page, folder = Path(page), Path(folder)
    text = page.read_text()
    names = []

    def fill(m: re.Match) -> str:
        names.append(m["name"])
        return m.group(1) + render_block(m["name"], folder) + m.group(4)

    return BLOCK.sub(fill, text), names
