"""Channels-last memory format for convolutional networks, where a measurement finds it faster.

oneDNN's CPU convolutions read NHWC directly; on NCHW tensors some reorder their inputs at each
call. Which layout trains faster depends on the CPU, the precision and the shapes, so it is
measured: a few forward and backward passes of the model on an image batch, both ways in turns.
The batch is the user's own (``example_input=``; ``cpuft.fit`` takes its data's first batch),
never a made-up shape: a network of 28x28 one-channel images and one of 224x224 photographs
differ in which layout wins, and many refuse shapes they were not built for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from cpuft.config import TrainConfig
from cpuft.distributed import rank0_value
from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.registry import PatchContext, SpeedUp, register, switch
from cpuft.speedups.trial import pass_seconds, timed_in_turns, untouched
from cpuft.topology import Topology

MIN_GAIN = 1.05
"""Channels-last is kept only when it measures at least this much faster."""


def _set_layout(model: nn.Module, fmt: torch.memory_format) -> None:
    model.to(memory_format=fmt)  # type: ignore[call-overload]


def _own_value(gain: float) -> float | None:
    return gain


def use_channels_last(model: nn.Module, example: torch.Tensor | None,
                      precision: str | None, rounds: int = 3,
                      shared: Callable[[float], float | None] = _own_value) -> tuple[bool, str]:
    """Whether ``model`` trains faster in channels-last, and why. The model is left in the
    faster layout (fed its 4-d inputs in it), its gradients, buffers (BatchNorm statistics)
    and mode as they were. ``shared`` turns this process's measured gain into the one every
    rank of a job uses (rank 0's), or None where no rank can learn it: the model then stays
    contiguous, since DDP needs the same layout on every rank."""
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    if not convs:
        return False, "the model has no 2-d convolutions"
    if example is None:
        return False, ("not measured: no batch of the model's own to measure on; give "
                       "example_input= a batch of your images (cpuft.fit takes its data's "
                       "first)")
    images = example
    if images.dim() != 4:
        return False, f"the example input has {images.dim()} dimensions, not an image batch's 4"
    shape = "x".join(str(n) for n in images.shape)

    def one_pass(fmt: torch.memory_format) -> Callable[[], float]:
        def run() -> float:
            _set_layout(model, fmt)
            return pass_seconds(model, images.contiguous(memory_format=fmt), precision)
        return run

    try:
        with untouched(model):
            seconds = timed_in_turns({False: one_pass(torch.contiguous_format),
                                      True: one_pass(torch.channels_last)}, rounds)
    except Exception as e:  # a model that cannot run the batch: leave it as it was
        _set_layout(model, torch.contiguous_format)
        return False, (f"not measured: the model did not run forward and backward on the "
                       f"{shape} example ({type(e).__name__})")
    own_gain = seconds[False] / seconds[True] if seconds[True] else 0.0
    gain = shared(own_gain)
    if gain is None:
        _set_layout(model, torch.contiguous_format)
        return False, ("not used: this process is one rank of a launched job that it has not "
                       "joined, so the ranks cannot take one layout; call "
                       "cpuft.distributed.init() first")
    where = "" if gain == own_gain else " on rank 0"
    on = gain >= MIN_GAIN
    _set_layout(model, torch.channels_last if on else torch.contiguous_format)
    if on:
        model.register_forward_pre_hook(_inputs_to_channels_last)
    verdict = "faster" if on else f"not {MIN_GAIN}x faster"
    return on, (f"measured{where} on a {shape} batch: channels-last {gain:.2f}x the speed of "
                f"contiguous, forward and backward ({verdict})")


def _inputs_to_channels_last(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.contiguous(memory_format=torch.channels_last)
                 if isinstance(a, torch.Tensor) and a.dim() == 4 else a for a in args)


class ChannelsLastSpeedUp(SpeedUp):
    name = "channels_last"

    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        return switch(cfg.speedups.channels_last, "where it measures faster")

    def apply(self, model: nn.Module, decision: Decision, ctx: PatchContext) -> Decision:
        convs = any(isinstance(m, nn.Conv2d) for m in model.modules())
        on, reason = use_channels_last(model, ctx.example() if convs else None, ctx.precision,
                                       shared=rank0_value)
        return Decision(on, reason)


register(ChannelsLastSpeedUp())
