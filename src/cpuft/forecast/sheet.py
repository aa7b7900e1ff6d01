"""``cpuft plan``'s answer: the job on each K, the cheapest K that meets the deadline, the K
past which a node stops paying, every assumption; as a document, a table and a chart."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError
from cpuft.forecast.calibration import Calibrated
from cpuft.forecast.model import Job, Target, cheapest_within, forecast, last_paying

DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in ``30m``, ``2h``, ``1h30m``, ``90s`` or ``90``."""
    parts = DURATION.findall(text.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != text.strip().lower():
        raise CpuftError(f"--deadline {text!r}: give a duration such as 30m, 2h, 1h30m")
    seconds = sum(float(n) * UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise CpuftError(f"--deadline {text!r} must be longer than nothing")
    return seconds


def parse_nodes(text: str) -> list[int]:
    try:
        nodes = sorted({int(n) for n in text.split(",") if n.strip()})
    except ValueError:
        raise CpuftError(f"--nodes {text!r}: give node counts such as 1,2,4,8") from None
    if not nodes or nodes[0] < 1:
        raise CpuftError(f"--nodes {text!r}: every node count must be at least 1")
    return nodes


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds // 3600:.0f}h{seconds % 3600 / 60:02.0f}m"


def plan_sheet(cal: Calibrated, target: Target, job_of: Callable[[int], Job], nodes: list[int],
               *,
               deadline_s: float | None, min_gain: float, notes: list[str]) -> dict[str, Any]:
    """The document: ``job_of(k)`` is the job on k nodes (its global batch may grow with k)."""
    runs = [forecast(cal.calibration, target, job_of(k), k) for k in nodes]
    sheet: dict[str, Any] = {
        "target": {"name": target.name, "cores": target.cores, "isa": target.isa,
                   "link_gbit": target.link.gbit, "latency_us": target.link.latency_s * 1e6,
                   "on_demand_per_hour": target.on_demand_per_hour,
                   "spot_per_hour": target.spot_per_hour},
        "recipe": cal.recipe, "model": cal.model,
        "calibration": asdict(cal.calibration),
        "measured": cal.measured, "assumed": [*cal.assumed, *notes],
        "nodes": [{**asdict(f), "global_batch": job_of(f.nodes).global_batch,
                   "steps": job_of(f.nodes).steps} for f in runs],
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


def table_rows(sheet: dict[str, Any]) -> list[list[str]]:
    return [[str(f["nodes"]), str(f["global_batch"]), duration(f["wall_seconds"]),
             f"{f['step_seconds']:.3f}s", f"{f['comm_seconds']:.3f}s",
             f"{f['efficiency']:.0%}", _money(f["cost_on_demand"]), _money(f["cost_spot"])]
            for f in sheet["nodes"]]


COLUMNS = ("nodes", "global batch", "wall time", "step", "comm (before hiding)", "efficiency",
           "on-demand", "spot")


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
    longest = max(f["wall_seconds"] for f in sheet["nodes"])
    unit, per = ("hours", 3600) if longest >= 7200 else ("minutes", 60)
    fig, ax = plt.subplots(figsize=(7, 4.6))
    ax.plot(nodes, [f["wall_seconds"] / per for f in sheet["nodes"]], "o-", color="#e07b39",
            label="wall time")
    ax.set_xscale("log", base=2)
    ax.set_xticks(nodes, [str(n) for n in nodes])
    ax.set_xlabel("nodes")
    ax.set_ylabel(f"wall time ({unit})", color="#e07b39")
    if "deadline_seconds" in sheet:
        ax.axhline(sheet["deadline_seconds"] / per, color="#e07b39", linestyle=":",
                   label="deadline")
    ax.set_ylim(bottom=0)
    costs = [(f["cost_on_demand"], f["cost_spot"]) for f in sheet["nodes"]]
    if all(c[0] is not None for c in costs):
        money = ax.twinx()
        money.plot(nodes, [c[0] for c in costs], "s-", color="#5c8ac4", label="cost on-demand")
        if all(c[1] is not None for c in costs):
            money.plot(nodes, [c[1] for c in costs], "s--", color="#5c8ac4", label="cost spot")
        money.set_ylabel("cost (US$)", color="#5c8ac4")
        money.set_ylim(bottom=0)
    fig.legend(loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.subplots_adjust(bottom=0.2)
    ax.set_title(f"{sheet['model'] or sheet['recipe']} on {sheet['target']['name']}: time and "
                 "cost against nodes", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
