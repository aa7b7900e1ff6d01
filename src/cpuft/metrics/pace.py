"""Training pace after warm-up: the first steps build kernels and buffers for new shapes and
would weigh on a short run's speed more than on a long one's."""

from __future__ import annotations


def warmup_steps(steps: int) -> int:
    """Steps left out of the measured pace: the first tenth, at least one, never all."""
    return min(max(1, steps // 10), steps - 1)


def steady_seconds(step_seconds: list[float]) -> float:
    """Time of the steps after warm-up, the same cut for every run."""
    return sum(step_seconds[warmup_steps(len(step_seconds)):])


def steady_rate(step_seconds: list[float], units_per_step: float,
                seconds: float | None = None) -> float:
    """Units (samples, tokens) per second over the steps after warm-up; 0 with no steps.

    ``seconds`` replaces this process's own time of those steps: in a distributed run, the
    slowest rank's, which sets the job's pace.
    """
    seconds = steady_seconds(step_seconds) if seconds is None else seconds
    measured = len(step_seconds) - warmup_steps(len(step_seconds))
    return units_per_step * measured / seconds if seconds > 0 else 0.0
