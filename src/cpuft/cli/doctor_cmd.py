"""``cpuft doctor``: this node's hardware and software, cpuft's choices, problems and fixes."""

from __future__ import annotations

import argparse
from typing import Any

from cpuft.cli.output import emit, findings_table


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check this node before a long run",
                       description="What this node has, what cpuft will choose on it and why, "
                                   "and each problem with its fix. Exit code 1 when something "
                                   "would stop a run.")
    p.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from cpuft.doctor.checks import report
    from cpuft.doctor.facts import gather

    return emit(report(gather()), args.json, print_report)


def print_report(rep: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 100))
    node, topo = rep["node"], rep["node"]["topology"]
    table = Table(title="this node", show_header=False)
    for key, value in (
        ("CPU", topo["cpu"]),
        # The class cpuft plan and summary.json name; then the features behind it
        ("ISA", f"{topo['isa_class']}" + (f" ({' '.join(topo['isa'])})" if topo["isa"] else "")),
        ("sockets / NUMA nodes", f"{topo['sockets']} / {topo['numa_nodes']}"),
        ("physical cores / logical CPUs", f"{topo['physical_cores']} / {topo['logical_cpus']}"),
        ("affinity mask", f"{topo['affinity_cores']} physical core(s)"),
        ("cgroup CPU quota", "none" if topo["cpu_quota"] is None
         else f"{topo['cpu_quota']:g} CPUs"),
        ("cores used", topo["cpu_bound"]),
        ("memory", f"{node['memory_gib']:.1f} GiB"),
        ("transparent huge pages", node["transparent_hugepages"]),
        ("python", node["python"]),
        *((pkg, ver or "not installed") for pkg, ver in node["packages"].items()),
        ("allocators", ", ".join(node["allocators"]) or "none"),
    ):
        table.add_row(key, str(value))
    console.print(table)
    c = rep["choices"]
    console.print(f"cpuft will use: {c['precision']} ({c['precision_reason']}); "
                  f"{c['ranks_per_node']} rank(s) per node x {c['threads_per_rank']} threads "
                  f"({c['ranks_reason']}); allocator {c['allocator']}", highlight=False)
    console.print(findings_table("checks", rep["findings"]))
