"""``cpuft.optimize(model, optimizer)``: cpuft's speed-ups for a model and loop of your own, the
successor of ``ipex.optimize``.

It applies what holds for any model, each choice recorded with its reason in a speed plan
(``cpuft.report_plan()``): threads and pinning, bf16 where the CPU does it natively and measures
faster, bf16 weights with fp32 masters stepped by cpuft's one-pass AdamW, cpuft's dropout,
matmul attention for transformers models, channels-last for convolutional networks where it
measures faster, and a fused optimizer step. What it cannot apply it leaves alone and says why.
The loop runs its forward pass under ``with cpuft.autocast():``.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from typing import Any, overload

import torch
from torch import nn

from cpuft.api.checks import check_model, check_optimizer, validate_arguments
from cpuft.api.optimizer import Bf16Optimizer, save_masters
from cpuft.config import SpeedupConfig, TrainConfig
from cpuft.config.sections import Attention, Precision
from cpuft.distributed import rank0_value
from cpuft.engine.step import autocast_for
from cpuft.errors import CpuftError, CpuftTypeError
from cpuft.runtime import preview, start
from cpuft.speedplan.speed_plan import SpeedPlan
from cpuft.speedups.bf16_weights import Bf16Weights, Bf16WeightsSpeedUp
from cpuft.speedups.model_precision import precision_for_model
from cpuft.speedups.registry import apply_speedups

_PLANS: weakref.WeakKeyDictionary[nn.Module, SpeedPlan] = weakref.WeakKeyDictionary()
"""The plan of each optimized model."""
_LATEST: list[SpeedPlan] = []
"""The plan of the model optimized last."""
SWITCH = "CPUFT_OPTIMIZE"
"""Set to 0, ``cpuft.optimize`` hands back what it was given and ``cpuft.autocast`` does
nothing: a script's stock run, as ``cpuft bench --script`` measures it."""
BF16_WEIGHTS = Bf16WeightsSpeedUp.name
FUSABLE = (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD, torch.optim.Adagrad)


def _fuse(optimizer: torch.optim.Optimizer) -> tuple[bool, str]:
    """Switch ``optimizer`` to torch's fused CPU step where its class has one, in place (so
    that schedulers already built on it keep working); whether it is fused, and why."""
    if isinstance(optimizer, Bf16Optimizer):
        return optimizer.kernel, ("cpuft's one-pass AdamW on the masters" if optimizer.kernel
                                  else f"{type(optimizer.inner).__name__} on the fp32 masters")
    name = type(optimizer).__name__
    if type(optimizer) not in FUSABLE:
        return False, f"{name} has no fused CPU step: left as it is"
    if optimizer.defaults.get("fused"):
        return True, "already fused"
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if any(g.get("differentiable") for g in optimizer.param_groups) or any(
            not p.is_floating_point() or p.is_sparse for p in params):
        return False, f"{name}: differentiable or non-float parameters, left unfused"
    for holder in (optimizer.defaults, *optimizer.param_groups):
        holder["fused"], holder["foreach"] = True, False
    return True, f"torch's fused {name}"


@overload
def optimize(model: nn.Module, optimizer: None = None, *, dtype: torch.dtype | None = None,
             precision: Precision = "auto", bf16_weights: bool = True,
             fast_dropout: bool = True, attention: Attention = "auto",
             channels_last: bool = True, fused_optimizer: bool = True,
             pin_cores: bool = True, example_input: torch.Tensor | None = None,
             ) -> nn.Module: ...


@overload
def optimize(model: nn.Module, optimizer: torch.optim.Optimizer, *,
             dtype: torch.dtype | None = None,
             precision: Precision = "auto", bf16_weights: bool = True,
             fast_dropout: bool = True, attention: Attention = "auto",
             channels_last: bool = True, fused_optimizer: bool = True,
             pin_cores: bool = True, example_input: torch.Tensor | None = None,
             ) -> tuple[nn.Module, torch.optim.Optimizer]: ...


def optimize(model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
             dtype: torch.dtype | None = None,
             precision: Precision = "auto", bf16_weights: bool = True,
             fast_dropout: bool = True, attention: Attention = "auto",
             channels_last: bool = True, fused_optimizer: bool = True,
             pin_cores: bool = True, example_input: torch.Tensor | None = None,
             ) -> nn.Module | tuple[nn.Module, torch.optim.Optimizer]:
    """cpuft's speed-ups for a model and loop of your own, as ``ipex.optimize`` gave them.

    Call it once, after building the model and its optimizer and before training (and before
    wrapping the model in DDP). The model is patched in place. Use the optimizer returned: the
    one given, switched to torch's fused step, or, when the weights are held in bf16, the same
    class, groups and settings over their fp32 masters. Run the forward pass under
    ``with cpuft.autocast():``. With ``CPUFT_OPTIMIZE=0`` in the environment it changes
    nothing and returns what it was given (the stock run ``cpuft bench --script`` compares).

    Args:
        model: the ``nn.Module`` to speed up, in place.
        optimizer: its optimizer, if it trains; without one, the model alone is returned.
        dtype: ``torch.bfloat16`` or ``torch.float32``, as ipex takes it: the same as
            ``precision="bf16"`` or ``"fp32"``.
        precision: ``"auto"`` (bf16 where the CPU has it natively and it measures faster),
            ``"bf16"`` or ``"fp32"``.
        example_input: a batch of the model's input to measure on: images for channels-last,
            a float batch for whether bf16 pays on a small model, token ids for the attention
            kernel at their length. Without one, channels-last is not used, a model under 1M
            weights keeps fp32 and attention follows a length rule. In a job of several
            ranks, rank 0's measurement decides for every rank: call
            ``cpuft.distributed.init()`` first.
        bf16_weights, fast_dropout, attention, channels_last, fused_optimizer, pin_cores: each
            speed-up's switch, as ``cpuft train`` has them.

    Returns:
        ``model`` without an optimizer; ``(model, optimizer)`` with one.

    Raises:
        CpuftTypeError: ``model`` is no ``nn.Module``, ``optimizer`` no optimizer, or ``dtype``
            neither bf16 nor fp32.
        CpuftError: the optimizer holds none of the model's parameters, or a setting cannot
            work.
    """
    if dtype is not None:
        precision = _precision_of(dtype, precision)
    check_model(model, "cpuft.optimize")
    if optimizer is not None:
        check_optimizer(optimizer, model, "cpuft.optimize")
    if os.environ.get(SWITCH) == "0":
        return model if optimizer is None else (model, optimizer)
    speedups = SpeedupConfig(precision=precision, bf16_weights=bf16_weights,
                             fast_dropout=fast_dropout, attention=attention,
                             fused_optimizer=fused_optimizer, channels_last=channels_last,
                             pin_cores=pin_cores, compile="off")
    cfg = TrainConfig(speedups=speedups)
    validate_arguments(cfg, "cpuft.optimize")
    plan = precision_for_model(model, start(cfg, own_loop=True, join=False).plan, precision,
                               example_input, shared=rank0_value)
    ids = example_input is not None and not example_input.is_floating_point()
    length = int(example_input.shape[-1]) if example_input is not None and ids else 0
    plan = apply_speedups(model, plan, example_input, sequence_length=length)
    plan, optimizer = _weights_and_optimizer(model, optimizer, plan)
    remember_plan(model, plan)
    return model if optimizer is None else (model, optimizer)


def remember_plan(model: nn.Module, plan: SpeedPlan) -> None:
    """What ``report_plan(model)`` and ``autocast(model)`` then read."""
    _PLANS[model] = plan
    _LATEST[:] = [plan]


def latest_plan() -> dict[str, Any] | None:
    """The plan of the model set up last, as ``report_plan`` gives it; None before any."""
    return _LATEST[0].to_dict() if _LATEST else None


def _precision_of(dtype: Any, precision: str) -> Precision:
    chosen: Precision
    if dtype is torch.bfloat16:
        chosen = "bf16"
    elif dtype is torch.float32:
        chosen = "fp32"
    else:
        raise CpuftTypeError(f"cpuft.optimize: dtype must be torch.bfloat16 or torch.float32, "
                             f"not {dtype!r}")
    if precision not in ("auto", chosen):
        raise CpuftError(f"cpuft.optimize: dtype {dtype} and precision={precision!r} disagree: "
                         "give one of them")
    return chosen


def _weights_and_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer | None,
                           plan: SpeedPlan) -> tuple[SpeedPlan, Any]:
    decided = plan.speedups[BF16_WEIGHTS]
    if plan.precision != "bf16" or not decided.on:
        reason = decided.reason if plan.precision == "bf16" else "fp32 run"
        plan = plan.deciding(BF16_WEIGHTS, False, reason)
    elif optimizer is None:
        plan = plan.deciding(BF16_WEIGHTS, False, "no optimizer given: the weights stay fp32 "
                             "under autocast")
    else:
        weights = Bf16Weights(model, fused=plan.fused_optimizer)
        save_masters(model, weights)
        optimizer = Bf16Optimizer(optimizer, weights)
        plan = plan.deciding(BF16_WEIGHTS, True, f"{decided.reason}; optimizer: "
                             f"{weights.kernel_note}")
    if optimizer is None:
        return plan.replaced(fused_optimizer=False,
                             fused_optimizer_reason="no optimizer given"), None
    if not plan.fused_optimizer:
        return plan.replaced(fused_optimizer_reason="requested"), optimizer
    fused, reason = _fuse(optimizer)
    return plan.replaced(fused_optimizer=fused, fused_optimizer_reason=reason), optimizer


def _plan_of(model: nn.Module | None) -> SpeedPlan | None:
    if model is None:
        return _LATEST[0] if _LATEST else None
    return _PLANS.get(model)


def autocast(model: nn.Module | None = None) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast exactly where ``cpuft.optimize`` chose bf16; nothing otherwise.

    Args:
        model: the model ``cpuft.optimize`` or ``cpuft.fit`` set up; default: the last one.

    Returns:
        A context manager: ``with cpuft.autocast(model): loss = loss_fn(model(x), y)``.
    """
    plan = _plan_of(model)
    return autocast_for(plan.precision if plan is not None else None)


def report_plan(model: nn.Module | None = None) -> dict[str, Any]:
    """What cpuft chose and why, as summary.json's ``plan``.

    Args:
        model: the model ``cpuft.optimize`` or ``cpuft.fit`` set up; default: the last one,
            or, before any, a default run on this machine.

    Returns:
        Each decision (precision, threads, every speed-up) and its reason, by name.
    """
    plan = _plan_of(model)
    return (plan or preview()).to_dict()
