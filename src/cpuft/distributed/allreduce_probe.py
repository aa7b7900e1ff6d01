"""A short gloo all-reduce across every rank: latency and bandwidth per message size.

Started on every host by ``cpuft cluster check``; rank 0 prints one ``CPUFT_ALLREDUCE {json}``
line.
"""

from __future__ import annotations

import json
import time

import torch
import torch.distributed as dist

from cpuft.distributed.group import init_distributed, shutdown

SIZES = (4 * 1024, 256 * 1024, 4 * 1024 * 1024, 32 * 1024 * 1024)  # bytes
REPEATS = 5


def measure() -> list[dict[str, float]]:
    rows = []
    for size in SIZES:
        t = torch.ones(size // 4, dtype=torch.float32)
        dist.all_reduce(t)  # warm-up: connections, buffers
        dist.barrier()
        start = time.perf_counter()
        for _ in range(REPEATS):
            dist.all_reduce(t)
        seconds = (time.perf_counter() - start) / REPEATS
        # ring all-reduce moves 2 (n-1)/n of the buffer through each rank
        n = dist.get_world_size()
        rows.append({"bytes": size, "seconds": seconds,
                     "bus_gb_per_s": 2 * (n - 1) / n * size / seconds / 1e9})
    return rows


def main() -> None:
    ctx = init_distributed("gloo", timeout_s=60)
    if ctx is None:
        raise SystemExit("allreduce_probe runs under a launcher (RANK/WORLD_SIZE unset)")
    try:
        rows = measure()
        if ctx.info.is_main:
            print("CPUFT_ALLREDUCE " + json.dumps({"world_size": ctx.info.world_size,
                                                    "rows": rows}), flush=True)
    finally:
        shutdown(ctx)


if __name__ == "__main__":
    main()
