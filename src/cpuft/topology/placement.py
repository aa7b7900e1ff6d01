"""Where each rank of a node runs: its cores, its threads, and the environment that pins it.

A pure planner (no torch, no processes): ``plan_node(topology, nproc, ...)`` gives one
RankPlacement per local rank. Each rank pins itself at start from ``CPUFT_RANK_CORES``, and
starts its communication threads on its ``CPUFT_COMM_CORES`` (see cpuft.distributed.group).
"""

from __future__ import annotations

from dataclasses import dataclass

from cpuft.errors import CpuftError
from cpuft.topology.cpu import Topology

RANK_CORES_ENV = "CPUFT_RANK_CORES"
COMM_CORES_ENV = "CPUFT_COMM_CORES"


@dataclass(frozen=True, slots=True)
class RankPlacement:
    local_rank: int
    cores: tuple[int, ...]
    """Logical CPUs for this rank's compute threads (one per physical core)."""
    comm_cores: tuple[int, ...] = ()
    """Cores kept free of compute threads, for gloo's communication threads."""

    @property
    def threads(self) -> int:
        return len(self.cores)


def auto_nproc(topo: Topology) -> int:
    """One rank per NUMA node."""
    return max(1, topo.numa_nodes)


def plan_node(topo: Topology, nproc: int, comm_cores: int = 0) -> list[RankPlacement]:
    """Split the physical cores among ``nproc`` ranks, keeping ranks inside NUMA nodes.

    When ranks divide the NUMA nodes evenly each rank gets cores of one node (or a node's
    share); otherwise cores are dealt out in node order.
    """
    if nproc < 1:
        raise CpuftError("--nproc-per-node must be at least 1")
    if comm_cores < 0:
        raise CpuftError("--comm-cores must be 0 or more")
    nodes = sorted({c.node for c in topo.cpus})
    per_node = [topo.first_thread_per_core(node=n) for n in nodes]
    ordered = [c for cores in per_node for c in cores]
    if nproc > len(ordered):
        raise CpuftError(
            f"--nproc-per-node {nproc} is more than the {len(ordered)} physical cores here"
        )
    if nproc % len(nodes) == 0 and all(len(c) >= nproc // len(nodes) for c in per_node):
        share = nproc // len(nodes)
        groups = [chunk for cores in per_node for chunk in _split(cores, share)]
    else:
        groups = _split(ordered, nproc)
    placements = []
    for rank, cores in enumerate(groups):
        if comm_cores and len(cores) <= comm_cores:
            raise CpuftError(
                f"rank {rank} has {len(cores)} core(s): too few to keep {comm_cores} for "
                "communication and compute on the rest"
            )
        keep = len(cores) - comm_cores
        placements.append(RankPlacement(
            local_rank=rank, cores=tuple(cores[:keep]), comm_cores=tuple(cores[keep:])
        ))
    return placements


def _split(items: list[int], parts: int) -> list[list[int]]:
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def cpu_list(cores: tuple[int, ...] | list[int]) -> str:
    """'0-3,8,10-11' for [0, 1, 2, 3, 8, 10, 11]."""
    out: list[str] = []
    values = sorted(cores)
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


def parse_cpu_list(text: str) -> list[int]:
    cores: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cores.extend(range(int(lo), int(hi or lo) + 1))
    return cores


def node_env(placements: list[RankPlacement]) -> dict[str, str]:
    """Environment shared by a node's ranks; each rank picks its cores by LOCAL_RANK."""
    threads = {p.threads for p in placements}
    env = {
        RANK_CORES_ENV: ";".join(cpu_list(p.cores) for p in placements),
        # Read by the OpenMP runtime when torch loads: libgomp (torch's wheels) and Intel's.
        "OMP_NUM_THREADS": str(min(threads)),
        "OMP_SCHEDULE": "STATIC",
        "OMP_PROC_BIND": "CLOSE",
        "KMP_AFFINITY": "granularity=fine,compact,1,0",
        "KMP_BLOCKTIME": "1",
    }
    if any(p.comm_cores for p in placements):
        env[COMM_CORES_ENV] = ";".join(cpu_list(p.comm_cores) for p in placements)
    if len(placements) == 1:
        env["GOMP_CPU_AFFINITY"] = cpu_list(placements[0].cores)
    return env


def cores_for_local_rank(value: str, local_rank: int, name: str = RANK_CORES_ENV) -> list[int]:
    """This rank's cores from ``CPUFT_RANK_CORES`` or ``CPUFT_COMM_CORES`` (``'0-3;4-7'``)."""
    groups = value.split(";")
    if local_rank >= len(groups):
        raise CpuftError(f"{name} has no cores for local rank {local_rank}")
    return parse_cpu_list(groups[local_rank])
