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

PLAIN_START = ("stock-2021", "plain-fp32")
"""Configurations started as a plain ``python train.py``."""
ALLOCATOR_VARS = ("LD_PRELOAD", "MALLOC_CONF")


def worker_env(config: str, allocator_env: dict[str, str]
               ) -> tuple[dict[str, str], tuple[str, ...]]:
    """(variables to set, variables to remove) for the worker process of ``config``."""
    if config in PLAIN_START or config == "cpuft-no-allocator":
        return {}, ALLOCATOR_VARS
    return allocator_env, ()


def place_as_launcher() -> None:
    """Threads and pinning as the launcher gives them, from the plan cpuft would make here:
    one thread a physical core, the process pinned to one logical CPU of each."""
    from cpuft.runtime.start import place_only

    place_only()


def process_setup(started: str, pinned: bool) -> dict[str, Any]:
    """What this process runs on: allocator, threads, the logical CPUs its affinity allows,
    whether it was pinned to them, and how it was started ('plain', 'launcher' or 'cpuft')."""
    import torch

    from cpuft.runtime.process import loaded_allocator

    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {"allocator": loaded_allocator(), "threads": torch.get_num_threads(),
            "cpus": allowed, "pinned": pinned, "started": started}


def started_as(config: str) -> str:
    if config in PLAIN_START:
        return "plain"
    return "cpuft" if config.startswith("cpuft") else "launcher"
