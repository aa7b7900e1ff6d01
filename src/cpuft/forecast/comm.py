"""What one training step sends between nodes, and how long that takes on a link.

DDP averages dense gradients with a ring all-reduce: each node sends, and receives, 2(K-1)/K of
the gradient bytes, in 2(K-1) hops that each pay the link's latency. gloo reduces a sparse
gradient (a word embedding's used rows) by gathering every node's rows: (K-1) nodes' worth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cpuft.errors import CpuftError


@dataclass(frozen=True, slots=True)
class Link:
    """A node's network link as the model sees it."""

    gbit: float
    """Usable bandwidth, Gbit/s, each way."""
    latency_s: float
    """Seconds a message of a few bytes takes from node to node."""
    source: str
    """Where the figures come from: measured (cluster check) or assumed."""


def ring_allreduce_seconds(nbytes: float, nodes: int, link: Link) -> float:
    """Seconds for a ring all-reduce of ``nbytes`` over ``nodes`` nodes."""
    if nodes <= 1 or nbytes <= 0:
        return 0.0
    hops = 2 * (nodes - 1)
    return hops / nodes * nbytes * 8 / (link.gbit * 1e9) + hops * link.latency_s


def allgather_seconds(nbytes_per_node: float, nodes: int, link: Link) -> float:
    """Seconds for every node to receive the other nodes' ``nbytes_per_node``."""
    if nodes <= 1 or nbytes_per_node <= 0:
        return 0.0
    return (nodes - 1) * (nbytes_per_node * 8 / (link.gbit * 1e9) + link.latency_s)


def link_from_cluster_check(report: Mapping[str, Any]) -> Link:
    """The link ``cpuft cluster check --json`` measured: bandwidth from its largest all-reduce
    (bus bandwidth, which counts the ring's 2(K-1)/K), latency from its smallest."""
    allreduce = report.get("allreduce") or {}
    rows: Sequence[Mapping[str, float]] = allreduce.get("rows") or []
    if not rows:
        raise CpuftError("the cluster check report has no all-reduce measurement: run "
                         "`cpuft cluster check --json` on a cluster whose hosts all answer")
    world = int(allreduce.get("world_size", 2))
    largest = max(rows, key=lambda r: r["bytes"])
    smallest = min(rows, key=lambda r: r["bytes"])
    hops = 2 * max(world - 1, 1)
    return Link(gbit=largest["bus_gb_per_s"] * 8, latency_s=smallest["seconds"] / hops,
                source=f"measured by cpuft cluster check on {world} hosts")
