"""The benchmark's table (terminal and markdown) and bar chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpuft.bench.compare import score
from cpuft.bench.spec import configs_for
from cpuft.bench.steal import BUSY_WARN, STEAL_WARN

COLUMNS = ("model", "configuration", "precision", "process", "samples/s", "tokens/s", "peak MB",
           "accuracy", "loss", "vs slowest stock")
ACCURACY_TOLERANCE = 0.002
"""cpuft's classifier accuracy may sit this far under trainer-best's (a fraction: 0.2 points)."""
NO_ACCURACY_TARGET = ("bert-base",)
"""Models whose accuracy says only that every way trains alike (random weights, few steps)."""
SLOWEST_STOCK = ("stock-2021", "plain-fp32")
"""The configuration each ratio in the table is against, the first a model has."""


def _loss(c: dict[str, Any]) -> str:
    if "eval_loss" in c:
        return f"{c['eval_loss']:.4f} (eval)"
    return f"{c['train_loss']:.4f} (train)" if "train_loss" in c else "-"


def process(c: dict[str, Any]) -> str:
    """How a configuration's process ran: "tcmalloc, 2 threads, pinned to 0-1"."""
    cpus = c.get("cpus") or []
    where = (f"pinned to {cpu_list(cpus)}" if c.get("pinned") else
             f"unpinned on {cpu_list(cpus)}" if cpus else "unpinned")
    return f"{c['allocator']}, {c['threads']} threads, {where}"


def cpu_list(cpus: list[int]) -> str:
    """0,1,2,3,8 as "0-3,8"."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


def _accuracy(c: dict[str, Any]) -> str:
    if "mean_accuracy" in c:
        return f"{c['mean_accuracy']:.4f} (mean of {len(c['rounds_accuracy'])} seeds)"
    return f"{c['accuracy']:.4f}" if "accuracy" in c else "-"


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
            out.append([model, name, c["precision"], process(c),
                        f"{c['samples_per_second']:.1f}", f"{c['tokens_per_second']:.0f}",
                        f"{c['peak_memory_mb']:.0f}", _accuracy(c), _loss(c), ratio])
    return out


def verdicts(report: dict[str, Any]) -> list[str]:
    lines = []
    for model, entry in report["models"].items():
        targets = {**report["targets"], **report.get("model_targets", {}).get(model, {})}
        busy = entry.get("busy_rounds", [])
        for key, target in targets.items():
            if key in entry:
                ok = "met" if entry[key] >= target else "NOT met"
                lines.append(f"{model}: cpuft {key.replace('_', ' ')} = {entry[key]:.2f}x "
                             f"(target {target}x: {ok}){busy_mark(busy, entry)}")
        if model not in NO_ACCURACY_TARGET:
            lines += [f"{model}: {line}" for line in accuracy_lines(entry)]
        if "gain_over_variant" in entry:
            lines.append(f"{model}: {gains_line(entry)}")
        if "eval_loss_change_vs_trainer_best" in entry:
            change, tolerance = entry["eval_loss_change_vs_trainer_best"], \
                report["eval_loss_tolerance"]
            ok = "met" if abs(change) <= tolerance else "NOT met"
            over = " (means over seeds)" if "mean_eval_loss" in entry["configs"]["cpuft"] else ""
            lines.append(f"{model}: cpuft eval loss {change:+.2%} against trainer-best's after the "
                         f"same steps{over} (target within {tolerance:.0%}: {ok})")
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
    return lines + peak_lines(report)


def accuracy_lines(entry: dict[str, Any]) -> list[str]:
    """cpuft's accuracy (and test accuracy) against trainer-best's, with the target."""
    lines = []
    for name in ("accuracy", "test_accuracy"):
        delta = entry.get(f"{name}_delta_vs_trainer_best")
        if delta is None or delta != delta:  # none, or NaN
            continue
        ok = "met" if delta >= -ACCURACY_TOLERANCE else "NOT met"
        over = " (means over seeds)" if f"mean_{name}" in entry["configs"]["cpuft"] else ""
        what = name.replace("_", " ")
        lines.append(f"cpuft {what} {delta * 100:+.2f} points against trainer-best's{over} "
                     f"(target at least -{ACCURACY_TOLERANCE * 100:.1f}: {ok})")
    return lines


def peak_lines(report: dict[str, Any]) -> list[str]:
    """The peaks the utilisation figures are divided by, and how each was made."""
    gf, peaks = report["matmul_gflops"], report["peak_gflops"]
    lines = [f"measured peak (best matmul, square 2048 or the models' shapes): bf16 "
             f"{peaks['bf16']:.0f} GFLOP/s, fp32 {peaks['fp32']:.0f} (square: bf16 "
             f"{gf['bf16']:.0f}, fp32 {gf['fp32']:.0f})"]
    for fmt, basis in report.get("theoretical_peak_basis", {}).items():
        theory = report["theoretical_peak_gflops"][fmt]
        lines.append(f"theoretical {fmt} peak {theory:.0f} GFLOP/s: {basis}")
        if peaks[fmt] > theory:
            lines.append(f"the measured {fmt} peak is {peaks[fmt] / theory:.2f}x the theoretical "
                         "one: the cores run above the clock read (a boost clock the VM does not "
                         "show), so the theoretical figures read that much high")
    return lines


def gains_line(entry: dict[str, Any]) -> str:
    """What each setting gives: cpuft's speed over cpuft with that one setting changed, and the
    accuracy that changes with it where it changes the math."""
    configs, parts = entry["configs"], []
    for name, gain in entry["gain_over_variant"].items():
        what = name.removeprefix("cpuft-").replace("-", " ")
        part = f"{what} {gain:.2f}x"
        ours, theirs = configs["cpuft"], configs[name]
        if "accuracy" in ours and "accuracy" in theirs:
            delta = score(theirs, "accuracy") - score(ours, "accuracy")
            if abs(delta) >= 0.0005:
                part += f" (accuracy {delta * 100:+.2f} points)"
        parts.append(part)
    return ("cpuft's speed over cpuft with one setting changed (above 1x: what it gives): "
            + ", ".join(parts))


def busy_mark(busy: list[int], entry: dict[str, Any]) -> str:
    """" - measured on a busy machine" where other processes took a share of the machine in
    the rounds a ratio comes from."""
    if not busy:
        return ""
    rounds = max(len(c.get("rounds_others_fraction", [0])) for c in entry["configs"].values())
    which = "every round" if len(busy) == rounds else \
        "round " + ", ".join(str(i + 1) for i in busy) + f" of {rounds}"
    return (f" - measured on a busy machine ({which}: other processes took "
            f"{BUSY_WARN:.0%} or more of the CPU time)")


def utilisation_line(entry: dict[str, Any]) -> str:
    """cpuft's FLOP figures and the peak each is divided by: executed FLOPs against the measured
    peak (and the theoretical one), then the model's nominal FLOPs. A rate above the measured
    peak says the probe read low; no figure is given against it then."""
    theory = (f", {entry['hfu_theoretical']:.1%} of the theoretical"
              if "hfu_theoretical" in entry else "")
    nominal = (f"nominal model FLOPs {entry['mfu']:.1%}" if entry["mfu"] <= 1
               else "nominal model FLOPs above the measured peak")
    if "mfu_theoretical" in entry:
        nominal += f" ({entry['mfu_theoretical']:.1%} of the theoretical)"
    if "hfu" not in entry:
        return f"cpuft {nominal}"
    skipped = entry.get("skipped_flops_fraction", 0.0)
    skip = (f"; cpuft skips {skipped:.0%} of them" if skipped > 0.005
            else f"; cpuft runs {-skipped:.0%} more" if skipped < -0.005 else "")
    if entry.get("above_measured_peak"):
        return (f"cpuft executes {entry['executed_gflops']:.0f} GFLOP/s, above the measured "
                f"peak: the matmul probe read low (a slow moment of the machine?), so no "
                f"utilisation against it is given{theory}{skip}")
    return (f"cpuft runs at {entry['hfu']:.1%} of the measured peak (executed FLOPs)"
            f"{theory}; {nominal}{skip}")


def markdown(report: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(report)]
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {v}" for v in verdicts(report)) + "\n"


def speedup_lines(entry: dict[str, Any]) -> list[str]:
    """cpuft's speed-up over each other way, with the spread over rounds where there were
    several: "cpuft 1.58x trainer-best (1.20-1.61)"."""
    configs, lines = entry["configs"], []
    for other in ("stock-2021", "trainer-best", "trainer-compile", "plain-fp32", "plain-best"):
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
               "cpuft-compile": "#f2b48a", "trainer-compile": "#9bb7dc",
               "plain-fp32": "#9e9e9e", "plain-best": "#5c8ac4"}
    for ax, model in zip(grid.flat, models, strict=False):
        configs = report["models"][model]["configs"]
        names = [n for n in configs_for(model) if n in configs]
        unit = "images" if model == "cnn" else "tokens"
        speeds = [configs[n]["tokens_per_second"] for n in names]
        bars = ax.bar(names, speeds, color=[colours.get(n, "#c9c9c9") for n in names])
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
        if len(names) > 4:  # ablation runs: many bars, names slanted to stay readable
            ax.tick_params(axis="x", labelrotation=40, labelsize=7)
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
