"""Read this machine's topology from /proc and sysfs (no subprocess, no torch)."""

from __future__ import annotations

import os
from pathlib import Path

from cpuft.topology.cpu import Isa, LogicalCpu, Topology, parse_cpuinfo
from cpuft.topology.quota import cpu_quota


def _read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return default


def cpus_from_sysfs(root: Path, online: list[int]) -> list[LogicalCpu]:
    """Logical CPUs with core, socket and NUMA node read from ``root/devices/system/cpu``."""
    base = root / "devices" / "system" / "cpu"
    cpus = []
    for cpu in online:
        d = base / f"cpu{cpu}"
        nodes = sorted(int(p.name[4:]) for p in d.glob("node[0-9]*")) if d.exists() else []
        cpus.append(
            LogicalCpu(
                cpu=cpu,
                core=_read_int(d / "topology" / "core_id", cpu),
                socket=_read_int(d / "topology" / "physical_package_id", 0),
                node=nodes[0] if nodes else 0,
            )
        )
    return cpus


def read_topology(
    cpuinfo_path: str = "/proc/cpuinfo", sysfs_root: str = "/sys", only_allowed: bool = True,
    cgroup_root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup",
) -> Topology:
    """This machine's topology: the CPUs this process may run on, as its affinity mask and its
    cgroup's CPU quota allow, unless ``only_allowed`` is off."""
    if only_allowed and hasattr(os, "sched_getaffinity"):
        online = sorted(os.sched_getaffinity(0))
    else:
        online = list(range(os.cpu_count() or 1))
    try:
        model_name, flags = parse_cpuinfo(Path(cpuinfo_path).read_text())
    except OSError:
        model_name, flags = "unknown", frozenset()
    cpus = cpus_from_sysfs(Path(sysfs_root), online)
    topo = Topology(cpus=tuple(cpus), isa=Isa.from_flags(flags), model_name=model_name)
    if not only_allowed:
        return topo
    try:
        membership = Path(proc_cgroup).read_text()
    except OSError:
        return topo
    return topo.within_quota(cpu_quota(membership, Path(cgroup_root)))
