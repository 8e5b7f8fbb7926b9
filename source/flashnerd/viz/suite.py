"""Table I and Fig. 4 of the seed, drawn from `flashnerd bench suite` JSON: NRMSE and throughput per robot and model.

Radar plot: one polar panel per robot, one spoke per metric — accuracy A_H = 1 / NRMSE_H at each horizon and
throughput Q_B at each batch. Per spoke every value is divided by the best model's, and the radius is logarithmic
(`decades` decades from the centre to the rim), so the better model touches the rim and a larger radius is better.
Rim labels give the FlashNeRD-to-NeRD ratio (NRMSE_NeRD / NRMSE_FlashNeRD for accuracy, Q_FlashNeRD / Q_NeRD for
throughput), coloured by the favoured model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from flashnerd.models import FLASHNERD_KIND, MODEL_KINDS, MODEL_LABELS, NERD_KIND
from flashnerd.utils.atomic import write_text_atomic
from flashnerd.viz.figure import save_figure

COLORS = dict(zip(MODEL_KINDS, ("#1b9e77", "#d95f02", "#7570b3")))  # one colour per model kind, in order


def _batch_label(key: str, model: dict) -> str:
    batch = model["max_batch"] if key == "max" else int(key)
    return f"{batch:,}"


def _spokes(robot: dict) -> list[tuple[str, str, str]]:
    """(kind, key, label) per spoke: accuracy at each horizon, throughput at each batch."""
    first = next(iter(robot["models"].values()))
    spokes = [("acc", h, f"A H={h}") for h in first["nrmse"]]
    return spokes + [("speed", b, f"Q B={_batch_label(b, first)}") for b in first["steps_per_s"]]


def _value(model: dict, kind: str, key: str) -> float:
    """Larger is better on every spoke: 1/NRMSE or steps per second."""
    if kind == "acc":
        e = model["nrmse"][key]
        return 1.0 / e if e > 0 and math.isfinite(e) else 0.0
    return model["steps_per_s"][key]


def suite_table(data: dict) -> str:
    """Markdown in the shape of Table I: NRMSE at each horizon and steps/s at each batch, per robot and model."""
    horizons = [str(h) for h in data["horizons"]]
    batches = [str(b) for b in data["batches"]]
    rows = [f"Device `{data['device']}` ({data['machine']}, {data['threads']} threads), model size class "
            f"`{data['size']}`. E_H: recursive-rollout NRMSE at horizon H (lower is better); Q_B: model-only "
            "streaming steps x worlds per second at batch B (higher is better).", "",
            "| robot | model | " + " | ".join(f"E{h}" for h in horizons) + " | "
            + " | ".join("Q max" if b == "max" else f"Q {int(b):,}" for b in batches) + " | fit (s) |",
            "|---" * (3 + len(horizons) + len(batches)) + "|"]
    for robot, r in data["robots"].items():
        for kind, m in r["models"].items():
            acc = " | ".join(f"{m['nrmse'][h]:.3g}" for h in horizons)
            speed = " | ".join(f"{m['steps_per_s'][b]:,.0f}" + (f" (B={m['max_batch']:,})" if b == "max" else "")
                               for b in batches)
            rows.append(f"| {robot} | {MODEL_LABELS.get(kind, kind)} | {acc} | {speed} | {m['train_seconds']:.0f} |")
        if FLASHNERD_KIND in r["models"] and NERD_KIND in r["models"]:
            f, n = r["models"][FLASHNERD_KIND], r["models"][NERD_KIND]
            acc = " | ".join(f"{n['nrmse'][h] / f['nrmse'][h]:.2f}x" for h in horizons)
            speed = " | ".join(f"{f['steps_per_s'][b] / n['steps_per_s'][b]:.1f}x" for b in batches)
            rows.append(f"| {robot} | *FlashNeRD vs NeRD* | {acc} | {speed} | |")
    rows += ["", "Ratio rows: NRMSE_NeRD / NRMSE_FlashNeRD and Q_FlashNeRD / Q_NeRD, so above 1x favours FlashNeRD."]
    return "\n".join(rows)


def plot_radar(data: dict, path: str | Path, decades: float = 2.0) -> None:
    """Fig. 4: one polar panel per robot (log radius, best model per spoke on the rim, FlashNeRD/NeRD rim labels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    robots = list(data["robots"])
    fig, axes = plt.subplots(1, len(robots), subplot_kw={"projection": "polar"}, figsize=(4.6 * len(robots), 4.8),
                             squeeze=False)
    for ax, robot in zip(axes[0], robots):
        r = data["robots"][robot]
        spokes = _spokes(r)
        angles = [2 * math.pi * i / len(spokes) for i in range(len(spokes))]
        best = [max(_value(m, k, key) for m in r["models"].values()) for k, key, _ in spokes]
        for kind, m in r["models"].items():
            radius = [max(0.0, 1.0 + math.log10(max(_value(m, k, key), 1e-30) / b) / decades) if b > 0 else 0.0
                      for (k, key, _), b in zip(spokes, best)]
            color = COLORS.get(kind)
            label = MODEL_LABELS.get(kind, kind)
            ax.plot(angles + angles[:1], radius + radius[:1], color=color, linewidth=1.8, label=label)
            ax.fill(angles + angles[:1], radius + radius[:1], color=color, alpha=0.12)
        ax.set_xticks(angles)
        ax.set_xticklabels([label for *_, label in spokes], fontsize=7)
        ax.tick_params(axis="x", pad=10)
        ax.set_ylim(0, 1.2)
        ax.set_yticks([1.0 - i / decades for i in range(int(decades))])
        ax.set_yticklabels([f"1e-{i}" if i else "1" for i in range(int(decades))], fontsize=6)
        if FLASHNERD_KIND in r["models"] and NERD_KIND in r["models"]:
            f, n = r["models"][FLASHNERD_KIND], r["models"][NERD_KIND]
            for angle, (k, key, _) in zip(angles, spokes):
                ratio = _value(f, k, key) / max(_value(n, k, key), 1e-30)
                color = COLORS[FLASHNERD_KIND] if ratio >= 1 else COLORS[NERD_KIND]
                ax.text(angle, 1.1, f"{ratio:.2g}x", color=color, fontsize=8, ha="center", va="center",
                        fontweight="bold")
        ax.set_title(robot, pad=18, fontsize=11)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), fontsize=9, ncol=len(labels),
               frameon=False)
    fig.suptitle("Model-only accuracy (A = 1/NRMSE) and throughput (Q), log radius, best model = rim; "
                 "rim labels: FlashNeRD / NeRD", fontsize=9)
    fig.tight_layout(rect=(0.0, 0.1, 1.0, 0.95))
    save_figure(fig, path, dpi=110)


def write_outputs(results: dict, out_dir: str | Path, name: str) -> dict:
    """Write `<name>.json`, the Table-I Markdown `<name>.md` and the Fig.-4 radar plot `<name>.png` into out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / f"{name}.json", "table": out_dir / f"{name}.md", "plot": out_dir / f"{name}.png"}
    for key, text in (("json", json.dumps(results, indent=1) + "\n"), ("table", suite_table(results) + "\n")):
        write_text_atomic(paths[key], text)
    plot_radar(results, paths["plot"])
    return {k: str(v) for k, v in paths.items()}
