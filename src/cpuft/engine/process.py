"""Set this process up as a plan says: threads, core pinning, and a check of the allocator."""

from __future__ import annotations

import os
import platform
from importlib import metadata

import torch

from cpuft.distributed.env import rank_info
from cpuft.plan.speed_plan import SpeedPlan
from cpuft.topology.placement import COMM_CORES_ENV, RANK_CORES_ENV, cores_for_local_rank


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


def apply_plan(plan: SpeedPlan, pin_cores: bool) -> SpeedPlan:
    """Set threads and affinity; the plan with the cores taken and the allocator really loaded.

    A rank started by ``cpuft launch`` takes its own share of the node's cores from
    ``CPUFT_RANK_CORES`` (by its local rank) instead of the whole machine's, and the cores kept
    for its communication threads from ``CPUFT_COMM_CORES``.
    """
    local_rank = rank_info(os.environ).local_rank
    cores, threads, comm_cores = plan.cores, plan.threads, plan.comm_cores
    if RANK_CORES_ENV in os.environ:
        cores = cores_for_local_rank(os.environ[RANK_CORES_ENV], local_rank)
        threads = len(cores)
    if pin_cores and cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
        if os.environ.get(COMM_CORES_ENV):
            comm_cores = cores_for_local_rank(os.environ[COMM_CORES_ENV], local_rank,
                                              COMM_CORES_ENV)
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
    return plan.but(cores=cores, threads=threads, comm_cores=comm_cores, allocator=allocator,
                    allocator_reason=allocator_reason)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for pkg in ("transformers", "datasets", "accelerate", "cpuft"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out
