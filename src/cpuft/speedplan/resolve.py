"""Settle what ``make_plan`` left open, each step returning a new plan."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

from cpuft.speedplan import compile_cache
from cpuft.speedplan.choices import choose_compile, precision_from_speedup
from cpuft.speedplan.probe import bf16_matmul_speedup
from cpuft.speedplan.speed_plan import SpeedPlan


def settle_precision(plan: SpeedPlan, requested: str,
                     every_rank: Callable[[bool], bool] | None = None,
                     measure: Callable[[], float] = bf16_matmul_speedup) -> SpeedPlan:
    """The plan with its precision decided: by measuring, where ``make_plan`` left it open.

    In a job of many ranks, ``every_rank(flag)`` tells whether the flag holds on all of them;
    every rank must call this with the same ``requested`` (it is a collective when 'auto'),
    and bf16 is kept only if every rank chose it, so that the ranks train alike.
    """
    if plan.precision is None:
        precision, reason = precision_from_speedup(measure())
        plan = plan.replaced(precision=precision, precision_reason=reason)
    if requested != "auto" or every_rank is None:
        return plan
    if not every_rank(plan.precision == "bf16") and plan.precision == "bf16":
        plan = plan.replaced(precision="fp32", precision_reason=plan.precision_reason
                        + "; fp32 because another rank found bf16 slower or emulated")
    return plan


def settle_compile(plan: SpeedPlan, *, model: str, max_seq_length: int,
                   samples: int) -> SpeedPlan:
    """Compile only if a measurement on this machine says it pays back over ``samples``."""
    if plan.compile is not None:
        return plan
    m = compile_cache.lookup(compile_cache.key(
        cpu=plan.cpu, model=model, precision=str(plan.precision),
        max_seq_length=max_seq_length, torch_version=_torch_version(),
    ))
    mode, reason = choose_compile(
        "auto",
        estimated_eager_seconds=m.eager_seconds_per_sample * samples if m else None,
        measured_speedup=m.speedup if m else None,
        compile_seconds=m.compile_seconds if m else None,
    )
    if m is None:
        reason += " (measure it: cpuft bench --configs cpuft,cpuft-compile)"
    return plan.replaced(compile=mode, compile_reason=reason)


def _torch_version() -> str:
    """torch.__version__ without importing torch (the same string: '2.13.0+cpu')."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"
