"""``cpuft report``'s markdown and its pictures: the runs side by side, their loss and
throughput curves, and each run's speed-up against the first, as the 2021 tables laid it out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpuft.report.runs import RunRecord

COLUMNS = ("run", "recipe", "model", "precision", "nodes", "samples/s", "quality", "time", "cost")


def _time(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.2f}h"


def _cost(run: RunRecord, price: float | None) -> str:
    return "-" if price is None else f"${run.train_seconds / 3600 * run.nodes * price:,.2f}"


def _quality(run: RunRecord) -> str:
    if run.quality is None:
        return "-"
    name, value = run.quality
    return f"{name} {value:.2f}" if name == "perplexity" else f"{name} {value:.4f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(r) + " |" for r in rows]]


def markdown(runs: list[RunRecord], price: float | None, pictures: dict[str, str]) -> str:
    first = runs[0]
    lines = ["# Training runs", ""]
    lines += _table(list(COLUMNS), [
        [r.name, r.recipe, Path(r.model).name or r.model, r.precision, str(r.nodes),
         f"{r.samples_per_second:.1f}", _quality(r), _time(r.train_seconds), _cost(r, price)]
        for r in runs])
    if price is None:
        lines += ["", "Cost: pass --price-per-node-hour to price the runs."]
    else:
        lines += ["", f"Cost at ${price:g} a node an hour, for the training time."]
    lines += ["", f"## Speed-up against {first.name}", ""]
    lines += _table(["nodes", "run", "time", "speed-up"], [
        [str(r.nodes), r.name, _time(r.train_seconds),
         f"{r.samples_per_second / first.samples_per_second:.2f}x"] for r in runs])
    changed = [r for r in runs if r.membership]
    if changed:
        lines += ["", "## Changes of membership (elastic jobs)", ""]
        lines += _table(["run", "time", "step", "ranks", "steps trained again"], [
            [r.name, str(c.get("time", "-")), str(c["step"]),
             f"{c['world_size_before']} → {c['world_size_after']}",
             str(c["steps_trained_again"])] for r in changed for c in r.membership])
    for title, file in pictures.items():
        lines += ["", f"## {title}", "", f"![{title}]({file})"]
    return "\n".join(lines) + "\n"


def _curves(runs: list[RunRecord], path: Path, x: str, y: str, xlabel: str,
            ylabel: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [(r, [s for s in r.steps if x in s and y in s]) for r in runs]
    drawn = [(r, steps) for r, steps in drawn if steps]
    if not drawn:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for run, steps in drawn:
        line, = ax.plot([s[x] for s in steps], [s[y] for s in steps],
                        marker="." if len(steps) < 40 else None,
                        label=f"{run.name} ({run.nodes} node{'s' if run.nodes > 1 else ''})")
        if x == "step":  # where an elastic job's world changed, and to what
            for change in run.membership:
                ax.axvline(change["step"], color=line.get_color(), linestyle=":", alpha=0.7)
                ax.annotate(f"{change['world_size_before']}→{change['world_size_after']}",
                            (change["step"], 1), xycoords=("data", "axes fraction"),
                            textcoords="offset points", xytext=(2, -10), fontsize=7,
                            color=line.get_color())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


FILES = ("report.md", "loss.png", "throughput.png")
"""All a report folder holds."""


def write_report(runs: list[RunRecord], out: Path, price: float | None) -> list[Path]:
    """report.md, loss.png and throughput.png in ``out``; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    pictures: dict[str, Any] = {}
    if _curves(runs, out / "loss.png", "step", "loss", "step", "training loss"):
        pictures["Loss"] = "loss.png"
    if _curves(runs, out / "throughput.png", "seconds", "samples_per_second",
               "seconds since the start of training", "samples/s (all ranks)"):
        pictures["Throughput"] = "throughput.png"
    (out / "report.md").write_text(markdown(runs, price, pictures))
    return [out / "report.md", *(out / f for f in pictures.values())]
