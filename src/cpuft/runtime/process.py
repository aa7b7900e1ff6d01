"""This process as a plan places it: cores, threads, and the allocator really loaded."""

from __future__ import annotations

import os
import platform
from importlib import metadata

import torch

from cpuft.distributed.env import launched_cores
from cpuft.speedplan.speed_plan import SpeedPlan


def loaded_allocator() -> str:
    """Which allocator this process really runs on, read from its memory map."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return "unknown"
    if "libtcmalloc" in maps:
        return "tcmalloc"
    if "libjemalloc" in maps:
        return "jemalloc"
    return "system"


def place_process(plan: SpeedPlan, pin_cores: bool) -> SpeedPlan:
    """Set threads and affinity; the plan with the cores taken and the allocator really loaded.

    A rank started by ``cpuft launch`` takes its own share of the node's cores (by its local
    rank) instead of the whole machine's, and keeps the cores given for its communication
    threads, which join the process group there.
    """
    cores, threads, comm_cores = plan.cores, plan.threads, plan.comm_cores
    threads_reason = plan.threads_reason
    rank_cores, rank_comm_cores = launched_cores(os.environ)
    if rank_cores:
        cores, threads = rank_cores, len(rank_cores)
        threads_reason = "one a core of this rank's share of the node (cpuft launch)"
    if pin_cores and cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
        comm_cores = rank_comm_cores or comm_cores
    else:
        cores = []
    torch.set_num_threads(threads)
    allocator, allocator_reason = plan.allocator, plan.allocator_reason
    actual = loaded_allocator()
    if actual != allocator:
        allocator_reason = f"planned {allocator} but {actual} is loaded; " + (
            "it is preloaded only when cpuft starts the process (LD_PRELOAD)"
        )
        allocator = actual
    return plan.replaced(cores=cores, threads=threads, threads_reason=threads_reason,
                         comm_cores=comm_cores, allocator=allocator,
                         allocator_reason=allocator_reason)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for pkg in ("transformers", "datasets", "accelerate", "cpuft"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out
