"""bf16 for a model of one's own only where it pays on that model.

The plan's "auto" precision comes from a large matmul: bf16 where the CPU has it natively and
it measures faster. A loop of one's own may train a model so small that each step is bound by
per-operation costs (casts, kernel launches, the masters' copy), not arithmetic: bf16 then slows
it down. With a batch of the model's own input (``example_input=``, or ``cpuft.fit``'s first
batch) both precisions are timed on it; without one, a model under ``SMALL_MODEL_WEIGHTS``
trainable weights keeps fp32. Models of ``MEASURED_BELOW`` weights or more are not measured:
their matmuls are what the plan's measurement timed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from cpuft.speedplan.speed_plan import SpeedPlan
from cpuft.speedups.trial import pass_seconds, timed_in_turns, untouched

SMALL_MODEL_WEIGHTS = 1_000_000
"""Below this many trainable weights and without a batch to measure on, fp32 is kept. An MLP of
525k weights on batches of 32 ran 0.75x in bf16 on a Sapphire Rapids with AMX, one of 2.1M
1.65x (benchmarks/history.md)."""
MEASURED_BELOW = 20_000_000


def _own_value(gain: float) -> float | None:
    return gain


def precision_for_model(model: nn.Module, plan: SpeedPlan, requested: str, example: Any,
                        shared: Callable[[float], float | None] = _own_value,
                        rounds: int = 3) -> SpeedPlan:
    """``plan`` with the precision that trains ``model`` faster, where it was "auto" and bf16.
    ``shared`` makes the gain measured here the one every rank of a job uses (rank 0's)."""
    weights = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if requested != "auto" or plan.precision != "bf16" or weights >= MEASURED_BELOW:
        return plan
    if callable(example):
        example = example()
    if isinstance(example, torch.Tensor) and example.is_floating_point():
        gain = shared(_measured_gain(model, example, rounds))
        shape = "x".join(str(n) for n in example.shape)
        if gain is not None and gain > 0:
            if gain < 1:
                return plan.replaced(precision="fp32", precision_reason=(
                    f"auto: on a {shape} batch of the model's own, bf16 trained at {gain:.2f}x "
                    "fp32's speed: fp32"))
            return plan.replaced(precision_reason=(
                f"{plan.precision_reason}; on a {shape} batch of the model's own, bf16 trained "
                f"at {gain:.2f}x fp32's speed"))
    if weights < SMALL_MODEL_WEIGHTS:
        return plan.replaced(precision="fp32", precision_reason=(
            f"auto: the model trains {weights:,} weights, too few for bf16 to repay its casts "
            "(its steps are bound by per-operation costs); pass example_input= to measure"))
    return plan


def _measured_gain(model: nn.Module, example: torch.Tensor, rounds: int) -> float:
    """fp32's time over bf16 autocast's for forward and backward on ``example``, in turns; 0
    where the model does not run on it."""
    try:
        with untouched(model):
            seconds = timed_in_turns({p: functools.partial(pass_seconds, model, example, p)
                                      for p in ("fp32", "bf16")}, rounds)
    except Exception:  # the batch is not the model's input: decide without a measurement
        return 0.0
    return seconds["fp32"] / seconds["bf16"] if seconds["bf16"] else 0.0
