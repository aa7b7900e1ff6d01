"""What every benchmark worker reports alike: the pace after warm-up, and peak memory."""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path
from typing import Any

from cpuft.metrics.pace import steady_seconds, warmup_steps


def run_fields(spec: Any, precision: str, reason: str, optimizer_kernel: str) -> dict[str, Any]:
    """What every worker's result says of the run itself: which, in what precision, on what."""
    import torch

    from cpuft.bench.placement import pinned, process_setup, started_as

    return {"config": spec.config, "model": spec.model, "precision": precision,
            "precision_reason": reason, "optimizer_kernel": optimizer_kernel,
            **process_setup(started_as(spec.config), pinned(spec.config)), "seed": spec.seed,
            "torch": torch.__version__}


def pace(step_seconds: list[float], step_tokens: list[int], batch_size: int) -> dict[str, Any]:
    """Samples and real tokens per second over the steps after warm-up."""
    seconds = steady_seconds(step_seconds)
    measured = slice(warmup_steps(len(step_seconds)), len(step_seconds))
    steps = measured.stop - measured.start
    samples = steps * batch_size
    tokens = sum(step_tokens[measured])
    return {"train_seconds": seconds, "measured_steps": steps,
            "samples_per_second": samples / seconds, "tokens_per_second": tokens / seconds,
            "tokens_per_sample": tokens / samples, "step_seconds": step_seconds}


def peak_memory_mb() -> float:
    """The process's peak resident memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_memory() -> float:
    """The peak resident memory so far (MB); then the kernel's peak count (VmHWM, which
    ``getrusage`` reads too) starts again from the current resident size, so that training's
    peak is told apart from loading's. Where the kernel does not allow it, nothing is reset."""
    before = peak_memory_mb()
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return before


def peak_memory_since_reset_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return peak_memory_mb()
