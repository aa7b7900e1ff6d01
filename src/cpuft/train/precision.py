"""Settle ``--precision auto`` on a CPU with native bf16: measure bf16 against fp32 matmuls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from cpuft.speedups import SpeedPlan, precision_from_speedup


def bf16_matmul_speedup(size: int = 1024, rounds: int = 7, reps: int = 2) -> float:
    """How many times faster a size x size matmul runs in bf16 than in fp32, on this process's
    threads (set them first): the median over rounds of fp32's time over bf16's, each round
    timing both back to back, so that a stall of the VM skews a round, not the answer. About
    half a second on 2 cores."""
    own = torch.Generator().manual_seed(0)  # the run's seeded generator stays untouched
    a32, b32 = torch.randn(size, size, generator=own), torch.randn(size, size, generator=own)
    pairs = {torch.float32: (a32, b32), torch.bfloat16: (a32.bfloat16(), b32.bfloat16())}
    for a, b in pairs.values():
        a @ b  # oneDNN builds its kernel and the thread pool starts outside the timing
    ratios = []
    for _ in range(rounds):
        took = {}
        for dtype, (a, b) in pairs.items():
            started = time.perf_counter()
            for _ in range(reps):
                a @ b
            took[dtype] = time.perf_counter() - started
        ratios.append(took[torch.float32] / took[torch.bfloat16])
    return statistics.median(ratios)


def resolve_precision(plan: SpeedPlan, requested: str,
                      every_rank: Callable[[bool], bool] | None = None,
                      measure: Callable[[], float] = bf16_matmul_speedup) -> None:
    """Turn the plan's 'auto' precision into bf16 or fp32 by measuring.

    In a job of many ranks, ``every_rank(flag)`` tells whether the flag holds on all of them;
    every rank must call this with the same ``requested`` (it is a collective when 'auto'),
    and bf16 is kept only if every rank chose it, so that the ranks train alike.
    """
    if plan.precision == "auto":
        plan.precision, plan.precision_reason = precision_from_speedup(measure())
    if requested != "auto" or every_rank is None:
        return
    if not every_rank(plan.precision == "bf16") and plan.precision == "bf16":
        plan.precision = "fp32"
        plan.precision_reason += "; fp32 because another rank found bf16 slower or emulated"
