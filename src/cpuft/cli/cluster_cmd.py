"""``cpuft cluster check``: what is wrong with a cluster, host by host, before a long run."""

from __future__ import annotations

import argparse
from typing import Any

from cpuft.cli.output import emit, findings_table


def register(sub: Any) -> None:
    p = sub.add_parser("cluster", help="check every host of a cluster")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    c = verbs.add_parser(
        "check", help="reachability, versions, ISA, routes, port, then a short all-reduce",
        description="Through the launcher's remote shell, for every host: reachable, same lock "
                    "hash (differing packages side by side), ISA class, the interface that "
                    "routes to the master, the rendezvous port free; then a short gloo "
                    "all-reduce across all hosts. Exit code 1 when anything fails.")
    c.add_argument("--hostfile", required=True)
    c.add_argument("--remote-shell", default=None,
                   help="default: 'ssh -o BatchMode=yes -- {host} {command}'")
    c.add_argument("--master-addr", default=None)
    c.add_argument("--master-port", type=int, default=29500)
    c.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from cpuft.doctor.cluster import check_cluster
    from cpuft.launch.request import LaunchRequest, build_launch

    request = LaunchRequest(nproc_per_node="1", hostfile=args.hostfile, launcher="ssh",
                            master_addr=args.master_addr, master_port=args.master_port,
                            remote_shell=args.remote_shell)
    cfg = build_launch(request, check_network=False)
    return emit(check_cluster(cfg, master_given=bool(args.master_addr)), args.json, print_report)


def print_report(rep: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 110))
    console.print(findings_table(f"cluster check (master {rep['master_addr']})",
                                 rep["findings"], with_host=True))
    if rep["allreduce"]:
        ar = Table(title=f"gloo all-reduce across {rep['allreduce']['world_size']} hosts")
        for col in ("message", "latency", "bus bandwidth"):
            ar.add_column(col, justify="right")
        for row in rep["allreduce"]["rows"]:
            ar.add_row(f"{row['bytes'] / 1024:.0f} KiB", f"{row['seconds'] * 1e3:.2f} ms",
                       f"{row['bus_gb_per_s']:.2f} GB/s")
        console.print(ar)
    console.print("all good" if rep["ok"] else "problems found: see the fixes above",
                  highlight=False)
