"""How each benchmark configuration's process is started and placed.

The stock ways a careful user runs today (trainer-best, plain-best) start as stock PyTorch's
own CPU launcher (``python -m torch.backends.xeon.run_cpu``) would start them: tcmalloc or
jemalloc preloaded, one thread a physical core, each pinned. Those are cpuft's own settings,
so both sides get the same allocator, threads and cores. 2021's ways (stock-2021, plain-fp32)
start as a plain ``python train.py`` does: the system allocator, torch's own threads, unpinned.
"""

from __future__ import annotations

import os
from typing import Any

from cpuft.bench.spec import VARIANTS

PLAIN_START = ("stock-2021", "plain-fp32")
"""Configurations started as a plain ``python train.py``."""
ALLOCATOR_VARS = ("LD_PRELOAD", "MALLOC_CONF")


def worker_env(config: str, allocator_env: dict[str, str]
               ) -> tuple[dict[str, str], tuple[str, ...]]:
    """(variables to set, variables to remove) for the worker process of ``config``: a plain
    start, or an ablation variant that asks for the system allocator, gets none preloaded."""
    if config in PLAIN_START or VARIANTS.get(config, {}).get("allocator") == "system":
        return {}, ALLOCATOR_VARS
    return allocator_env, ()


def pinned(config: str) -> bool:
    """Whether ``config``'s process is pinned: all but the plain starts and the variant that
    turns pinning off."""
    return config not in PLAIN_START and VARIANTS.get(config, {}).get("pin_cores", True) is True


def process_setup(started: str, is_pinned: bool) -> dict[str, Any]:
    """What this process runs on: allocator, threads, the logical CPUs its affinity allows,
    whether it was pinned to them, and how it was started ('plain', 'launcher' or 'cpuft')."""
    import torch

    from cpuft.runtime.process import loaded_allocator

    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {"allocator": loaded_allocator(), "threads": torch.get_num_threads(),
            "cpus": allowed, "pinned": is_pinned, "started": started}


def started_as(config: str) -> str:
    if config in PLAIN_START:
        return "plain"
    return "cpuft" if config.startswith("cpuft") else "launcher"
