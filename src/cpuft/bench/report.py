"""The benchmark's table (terminal and markdown) and bar chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpuft.bench.spec import configs_for
from cpuft.bench.steal import STEAL_WARN

COLUMNS = ("model", "configuration", "precision", "samples/s", "tokens/s", "peak MB", "accuracy",
           "loss", "vs slowest stock")
SLOWEST_STOCK = ("stock-2021", "plain-fp32")
"""The configuration each ratio in the table is against, the first a model has."""


def _loss(c: dict[str, Any]) -> str:
    if "eval_loss" in c:
        return f"{c['eval_loss']:.4f} (eval)"
    return f"{c['train_loss']:.4f} (train)" if "train_loss" in c else "-"


def rows(report: dict[str, Any]) -> list[list[str]]:
    out = []
    for model, entry in report["models"].items():
        configs = entry["configs"]
        stock = next((configs[n]["tokens_per_second"] for n in SLOWEST_STOCK if n in configs),
                     None)
        for name in configs_for(model):
            if name not in configs:
                continue
            c = configs[name]
            ratio = f"{c['tokens_per_second'] / stock:.2f}x" if stock else "-"
            out.append([model, name, c["precision"], f"{c['samples_per_second']:.1f}",
                        f"{c['tokens_per_second']:.0f}", f"{c['peak_memory_mb']:.0f}",
                        f"{c['accuracy']:.4f}" if "accuracy" in c else "-", _loss(c), ratio])
    return out


def verdicts(report: dict[str, Any]) -> list[str]:
    lines = []
    for model, entry in report["models"].items():
        targets = {**report["targets"], **report.get("model_targets", {}).get(model, {})}
        for key, target in targets.items():
            if key in entry:
                ok = "met" if entry[key] >= target else "NOT met"
                lines.append(f"{model}: cpuft {key.replace('_', ' ')} = {entry[key]:.2f}x "
                             f"(target {target}x: {ok})")
        if "eval_loss_change_vs_trainer_best" in entry:
            change, tolerance = entry["eval_loss_change_vs_trainer_best"], \
                report["eval_loss_tolerance"]
            ok = "met" if abs(change) <= tolerance else "NOT met"
            lines.append(f"{model}: cpuft eval loss {change:+.2%} against trainer-best's after the "
                         f"same steps (target within {tolerance:.0%}: {ok})")
            memory = entry["peak_memory_vs_trainer_best"]
            lines.append(f"{model}: cpuft peak memory {memory:.2f}x trainer-best's, "
                         f"{entry['train_peak_memory_vs_trainer_best']:.2f}x while training "
                         f"(target at most 1x: {'met' if memory <= 1 else 'NOT met'})")
        if "train_loss_change_vs_plain_best" in entry:
            lines.append(f"{model}: cpuft training loss over the last steps "
                         f"{entry['train_loss_change_vs_plain_best']:+.2%} against plain-best's "
                         "on the same batches")
        if "mfu" in entry:
            lines.append(f"{model}: {utilisation_line(entry)}")
        if "profile" in entry:
            share = entry["profile"]["share"]
            lines.append(f"{model}: cpuft step time: " + ", ".join(
                f"{name.replace('_', ' ')} {value:.0%}" for name, value in
                sorted(share.items(), key=lambda kv: -kv[1])))
        for name, c in entry["configs"].items():
            per_round = c.get("rounds_steal_fraction") or [c.get("steal_fraction", 0.0)]
            for i, steal in enumerate(per_round):
                if steal < STEAL_WARN:
                    continue
                where = f" in round {i + 1} of {len(per_round)}" if len(per_round) > 1 else ""
                advice = ("the median of the rounds' ratios damps it" if len(per_round) > 1
                          else "rerun, or use --rounds")
                lines.append(f"{model}: {name} lost {steal:.0%} of the CPU time to other guests "
                             f"of this VM (steal){where}, so that run's speed reads low: {advice}")
    gf = report["matmul_gflops"]
    lines.append(f"matmul 2048x2048: bf16 {gf['bf16']:.0f} GFLOP/s, fp32 {gf['fp32']:.0f} GFLOP/s")
    return lines


def utilisation_line(entry: dict[str, Any]) -> str:
    """cpuft's FLOP figures against the peak, none above it: the executed FLOPs', then the
    model's nominal ones' where they stay below the peak (work cpuft skips can put them
    above it, which says nothing of how busy the machine was)."""
    if "hfu" not in entry:
        return f"cpuft model FLOPs utilisation {entry['mfu']:.1%}"
    skipped = entry.get("skipped_flops_fraction", 0.0)
    nominal = (f"nominal model FLOPs {entry['mfu']:.1%}" if entry["mfu"] <= 1
               else "nominal model FLOPs above the peak")
    skip = (f"; cpuft skips {skipped:.0%} of them" if skipped > 0.005
            else f"; cpuft runs {-skipped:.0%} more" if skipped < -0.005 else "")
    return f"cpuft runs at {entry['hfu']:.1%} of the peak (executed FLOPs), {nominal}{skip}"


def markdown(report: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(report)]
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {v}" for v in verdicts(report)) + "\n"


def speedup_lines(entry: dict[str, Any]) -> list[str]:
    """cpuft's speed-up over each other way, with the spread over rounds where there were
    several: "cpuft 1.58x trainer-best (1.20-1.61)"."""
    configs, lines = entry["configs"], []
    for other in ("stock-2021", "trainer-best", "plain-fp32", "plain-best"):
        key = "speedup_vs_" + other.replace("-", "_")
        if key not in entry:
            continue
        ours = configs["cpuft"].get("rounds_tokens_per_second", [])
        theirs = configs[other].get("rounds_tokens_per_second", [])
        spread = ""
        if len(ours) > 1 and len(ours) == len(theirs):
            each = [a / b for a, b in zip(ours, theirs, strict=True)]
            spread = f" ({min(each):.2f}-{max(each):.2f})"
        lines.append(f"cpuft {entry[key]:.2f}x {other}{spread}")
    return lines


CHART_COLUMNS = 4
"""Models a row of bench.png: more wrap onto further rows, each panel kept readable."""


def bar_chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(report["models"])
    columns = min(len(models), CHART_COLUMNS)
    rows = -(-len(models) // columns)
    fig, grid = plt.subplots(rows, columns, figsize=(5 * columns, 4 * rows), squeeze=False)
    for ax in grid.flat[len(models):]:
        ax.axis("off")
    colours = {"stock-2021": "#9e9e9e", "trainer-best": "#5c8ac4", "cpuft": "#e07b39",
               "cpuft-compile": "#f2b48a", "plain-fp32": "#9e9e9e", "plain-best": "#5c8ac4"}
    for ax, model in zip(grid.flat, models, strict=False):
        configs = report["models"][model]["configs"]
        names = [n for n in configs_for(model) if n in configs]
        unit = "images" if model == "cnn" else "tokens"
        speeds = [configs[n]["tokens_per_second"] for n in names]
        bars = ax.bar(names, speeds, color=[colours[n] for n in names])
        for bar, n in zip(bars, names, strict=True):
            c = configs[n]
            below = f"\nacc {c['accuracy']:.3f}" if "accuracy" in c else f"\nloss {_loss(c)}"
            ax.annotate(f"{c['tokens_per_second']:.0f}{below}",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        shown = Path(model).name or model  # a model folder by its name, not its path
        ax.set_title(f"{shown}: training {unit}/s" + (" (not padding)" if unit == "tokens"
                                                      else ""))
        ratios = speedup_lines(report["models"][model])
        if ratios:  # the number a reader wants, where the eye finds it
            ax.text(0.02, 0.97, "\n".join(ratios), transform=ax.transAxes, va="top",
                    fontsize=9, fontweight="bold", color=colours["cpuft"])
        ax.set_ylim(0, max(speeds) * (1.25 + 0.12 * len(ratios)))
        ax.set_ylabel(f"{unit}/s (higher is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def scaling_chart(report: dict[str, Any], path: Path) -> None:
    """``bench --scaling`` at a glance: each run's samples/s, the 2-node bars split into compute
    and waiting on communication, against twice the best 1-node speed, the ceiling halving the
    batch leaves and the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = report["configs"]
    names = list(configs)
    speeds = [configs[n]["samples_per_second"] for n in names]
    waiting = [s * configs[n]["comm_fraction"] for n, s in zip(names, speeds, strict=True)]
    computing = [s - w for s, w in zip(speeds, waiting, strict=True)]
    ceiling = report["machine_ceiling"]
    best = 2 * report["best_one_node_samples_per_second"]
    fig, ax = plt.subplots(figsize=(3.5 + 1.6 * len(names), 4.2))
    ax.bar(names, computing, color="#e07b39", label="computing")
    ax.bar(names, waiting, bottom=computing, color="#9e9e9e",
           label="waiting on communication")
    for x, (n, s) in enumerate(zip(names, speeds, strict=True)):
        label = f"{s:.1f}" if configs[n]["nodes"] == 1 else f"{s:.1f}\n{s / best:.1%}"
        ax.annotate(label, (x, s), ha="center", va="bottom", fontsize=8)
    lines = [(best, "2x 1 node" + (" accumulating halves" if ceiling > 1 else ""), "-"),
             (best * report["target_efficiency"],
              f"target {report['target_efficiency']:.0%}", ":")]
    if ceiling < 1:
        lines.insert(1, (best * ceiling, "ceiling: the batch halved", "--"))
    for y, label, style in lines:
        ax.axhline(y, color="#5c8ac4", linestyle=style, linewidth=1, label=label)
    ax.set_ylim(0, best * 1.2)
    ax.set_ylabel("samples/s (higher is better)")
    ax.set_title(f"1 node vs 2 nodes, global batch {report['global_batch']}, "
                 f"links {report['rate']}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
