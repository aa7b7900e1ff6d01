"""The matmul probe: how fast this process's threads multiply in bf16 and in fp32.

The one timing of matmuls in cpuft: ``--precision auto``, ``cpuft doctor`` and ``cpuft bench``
all read it. torch is imported inside the functions, so ``cpuft.speedplan`` stays importable
(and the speed plan printable) before torch loads.
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def _timed(a: Any, b: Any, reps: int) -> float:
    started = time.perf_counter()
    for _ in range(reps):
        a @ b
    return time.perf_counter() - started


def bf16_matmul_speedup(size: int = 1024, rounds: int = 7, reps: int = 2) -> float:
    """How many times faster a size x size matmul runs in bf16 than in fp32, on this process's
    threads (set them first): the median over rounds of fp32's time over bf16's, each round
    timing both back to back, so that a stall of the VM skews a round, not the answer."""
    import torch

    own = torch.Generator().manual_seed(0)  # the run's seeded generator stays untouched
    a32, b32 = torch.randn(size, size, generator=own), torch.randn(size, size, generator=own)
    pairs = {torch.float32: (a32, b32), torch.bfloat16: (a32.bfloat16(), b32.bfloat16())}
    for a, b in pairs.values():
        a @ b  # oneDNN builds its kernel and the thread pool starts outside the timing
    ratios = []
    for _ in range(rounds):
        took = {dtype: _timed(a, b, reps) for dtype, (a, b) in pairs.items()}
        ratios.append(took[torch.float32] / took[torch.bfloat16])
    return statistics.median(ratios)


def matmul_gflops(dtype_name: str, n: int = 2048, seconds: float = 1.5) -> float:
    """Sustained GFLOP/s of an n x n matmul in 'bf16' or 'fp32' on this process's threads.

    Where the dtype is emulated (bf16 without native support can run a thousand times slower)
    the size shrinks until one product takes at most a tenth of ``seconds``.
    """
    import torch

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    own = torch.Generator().manual_seed(0)
    size = 256
    while True:
        a = torch.randn(size, size, generator=own).to(dtype)
        b = torch.randn(size, size, generator=own).to(dtype)
        took = _timed(a, b, 1)
        if size >= n or took * 8 > seconds / 10:
            break
        size *= 2
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * size**3 * count / (time.perf_counter() - start) / 1e9
