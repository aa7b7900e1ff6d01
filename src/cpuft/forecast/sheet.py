"""``cpuft plan``'s answer: the job on each K, the cheapest K that meets the deadline, the K
past which a node stops paying, every assumption; as a document, a table and a chart."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cpuft.durations import duration
from cpuft.errors import CpuftError
from cpuft.forecast.calibration import Calibrated
from cpuft.forecast.model import Forecast, Job, Target, cheapest_within, forecast, last_paying
from cpuft.forecast.preemption import Preemption


def parse_nodes(text: str) -> list[int]:
    try:
        nodes = sorted({int(n) for n in text.split(",") if n.strip()})
    except ValueError:
        raise CpuftError(f"--nodes {text!r}: give node counts such as 1,2,4,8") from None
    if not nodes or nodes[0] < 1:
        raise CpuftError(f"--nodes {text!r}: every node count must be at least 1")
    return nodes


def _row(f: Forecast, job: Job) -> dict[str, Any]:
    # JSON has no infinity: a spot run that never ends has no wall time and no cost.
    row = {k: (None if isinstance(v, float) and math.isinf(v) else v)
           for k, v in asdict(f).items()}
    return {**row, "spot_ends": math.isfinite(f.spot_wall_seconds),
            "global_batch": job.global_batch, "steps": job.steps}


def preemption_note(p: Preemption | None) -> str:
    if p is None:
        return "spot nodes never taken back (give --preemptions-per-hour for the spot column)"
    return (f"spot nodes taken back {p.per_node_hour:g} times a node-hour; each loss costs "
            f"half the checkpoint interval ({duration(p.checkpoint_every_s)}, so "
            f"{duration(p.checkpoint_every_s / 2)} of work) and {duration(p.restart_s)} to "
            "restart, on every node")


def plan_sheet(cal: Calibrated, target: Target, job_of: Callable[[int], Job], nodes: list[int],
               *,
               deadline_s: float | None, min_gain: float, notes: list[str],
               preemption: Preemption | None = None) -> dict[str, Any]:
    """The document: ``job_of(k)`` is the job on k nodes (its global batch may grow with k);
    the spot column counts ``preemption``'s losses."""
    runs = [forecast(cal.calibration, target, job_of(k), k, preemption) for k in nodes]
    sheet: dict[str, Any] = {
        "target": {"name": target.name, "cores": target.cores, "isa": target.isa,
                   "link_gbit": target.link.gbit, "latency_us": target.link.latency_s * 1e6,
                   "on_demand_per_hour": target.on_demand_per_hour,
                   "spot_per_hour": target.spot_per_hour},
        "recipe": cal.recipe, "model": cal.model,
        "calibration": asdict(cal.calibration),
        "measured": cal.measured,
        "assumed": [*cal.assumed, *notes, preemption_note(preemption)],
        "preemption": None if preemption is None else asdict(preemption),
        "nodes": [_row(f, job_of(f.nodes)) for f in runs],
        "min_gain": min_gain,
        "last_paying_nodes": last_paying(runs, min_gain).nodes,
    }
    if deadline_s is not None:
        sheet["deadline_seconds"] = deadline_s
        best = cheapest_within(runs, deadline_s)
        if best is None:
            fastest = min(runs, key=lambda f: f.wall_seconds)
            raise CpuftError(f"no node count in {','.join(map(str, nodes))} ends by the "
                             f"deadline ({duration(deadline_s)}): the fastest, {fastest.nodes} "
                             f"node(s), takes {duration(fastest.wall_seconds)}")
        sheet["cheapest_within_deadline"] = best.nodes
    return sheet


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _spot(f: dict[str, Any], preempted: bool) -> list[str]:
    if not f["spot_ends"]:
        return ["never", "-", "never"]
    if not preempted:
        return [_money(f["cost_spot"])]
    return [duration(f["spot_wall_seconds"]), f"{f['spot_preemptions']:.1f}",
            _money(f["cost_spot"])]


def table_rows(sheet: dict[str, Any]) -> list[list[str]]:
    preempted = sheet["preemption"] is not None
    return [[str(f["nodes"]), str(f["global_batch"]), duration(f["wall_seconds"]),
             f"{f['step_seconds']:.3f}s", f"{f['comm_seconds']:.3f}s",
             f"{f['efficiency']:.0%}", _money(f["cost_on_demand"]), *_spot(f, preempted)]
            for f in sheet["nodes"]]


COLUMNS = ("nodes", "global batch", "wall time", "step", "comm (before hiding)", "efficiency",
           "on-demand")


def columns(sheet: dict[str, Any]) -> tuple[str, ...]:
    if sheet["preemption"] is None:
        return (*COLUMNS, "spot")
    return (*COLUMNS, "spot wall time", "preemptions", "spot")


def verdicts(sheet: dict[str, Any]) -> list[str]:
    lines = []
    if "cheapest_within_deadline" in sheet:
        lines.append(f"cheapest within {duration(sheet['deadline_seconds'])}: "
                     f"{sheet['cheapest_within_deadline']} node(s)")
    lines.append(f"past {sheet['last_paying_nodes']} node(s) another node adds less than "
                 f"{sheet['min_gain']:.0%} of one node's speed")
    lines += [f"measured: {m}" for m in sheet["measured"]]
    lines += [f"assumed: {a}" for a in sheet["assumed"]]
    return lines


def chart(sheet: dict[str, Any], path: Path) -> None:
    """Wall time and cost against the number of nodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [f["nodes"] for f in sheet["nodes"]]
    walls = [f["wall_seconds"] for f in sheet["nodes"]]
    longest = max(walls)
    unit, per = ("hours", 3600) if longest >= 7200 else ("minutes", 60)
    fig, ax = plt.subplots(figsize=(7, 4.8))
    ax.plot(nodes, [w / per for w in walls], "o-", color="#e07b39", label="wall time")
    if sheet.get("preemption"):
        spot_walls = [(k, f["spot_wall_seconds"] / per) for k, f in zip(nodes, sheet["nodes"],
                                                                          strict=True)
                      if f["spot_ends"]]
        if spot_walls:
            ax.plot(*zip(*spot_walls, strict=True), "o--", color="#e07b39",
                    label="wall time, spot")
    ax.set_xscale("log", base=2)
    ax.set_xticks(nodes, [str(n) for n in nodes])
    ax.set_xlabel("nodes")
    ax.set_ylabel(f"wall time ({unit})", color="#e07b39")
    top = longest / per * 1.25
    if "deadline_seconds" in sheet:
        deadline = sheet["deadline_seconds"] / per
        if deadline <= top * 1.5:  # a far deadline would flatten the curve: it is named only
            ax.axhline(deadline, color="#e07b39", linestyle=":", label="deadline")
            top = max(top, deadline * 1.1)
    ax.set_ylim(0, top)
    chosen = sheet.get("cheapest_within_deadline")
    if isinstance(chosen, int) and chosen in nodes:
        at = nodes.index(chosen)
        ax.plot([float(chosen)], [walls[at] / per], marker="*", markersize=16, color="#2a9d4b",
                linestyle="none", label=f"cheapest within {duration(sheet['deadline_seconds'])}:"
                f" {chosen} node(s)")
    costs = [(f["cost_on_demand"], f["cost_spot"]) for f in sheet["nodes"]]
    if all(c[0] is not None for c in costs):
        money = ax.twinx()
        money.plot(nodes, [c[0] for c in costs], "s-", color="#5c8ac4", label="cost on-demand")
        spot = [(k, c[1]) for k, c in zip(nodes, costs, strict=True)
                if c[1] is not None and math.isfinite(c[1])]
        if spot:  # a spot run that never ends has no point
            money.plot(*zip(*spot, strict=True), "s--", color="#5c8ac4", label="cost spot")
        money.set_ylabel("cost (US$)", color="#5c8ac4")
        money.set_ylim(bottom=0)
    fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False)
    name = Path(str(sheet["model"] or sheet["recipe"])).name  # a path's folder name alone
    ax.set_title(f"{name} on {sheet['target']['name']}: time and cost against nodes",
                 fontsize=10, wrap=True)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
