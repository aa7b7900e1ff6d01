"""Channels-last memory format for convolutional networks, where a measurement finds it faster.

oneDNN's CPU convolutions read NHWC directly; on NCHW tensors some reorder their inputs at each
call. Which layout trains faster depends on the CPU, the precision and the shapes, so it is
measured: a few forward and backward passes of the model on an image batch, both ways in turns.
The batch is the user's own (``example_input=``; ``cpuft.fit`` takes its data's first batch),
never a made-up shape: a network of 28x28 one-channel images and one of 224x224 photographs
differ in which layout wins, and many refuse shapes they were not built for.

1-d convolutions have no channels-last format of their own, and oneDNN runs them channels-first,
reordering an input whose channels are its fastest dimension (a transformer's hidden states
seen as (batch, channels, length), as SqueezeBERT's are) before and after each call. Run as a
2-d convolution over a height-1 view, the same input is a channels-last image and is read as it
lies: on SqueezeBERT-base's 1x1 convolutions (batch 16 of 128 tokens, bf16) forward and
backward took 0.2-0.5 of the time. The 1-d path is measured the same way, on the run's first
batch, both ways in turns.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from cpuft.config import TrainConfig
from cpuft.distributed import rank0_value
from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.registry import PatchContext, SpeedUp, register, switch
from cpuft.speedups.trial import error_line, pass_seconds, timed_in_turns, untouched
from cpuft.topology import Topology

MIN_GAIN = 1.05
"""Channels-last is kept only when it measures at least this much faster."""


def _set_layout(model: nn.Module, fmt: torch.memory_format) -> None:
    model.to(memory_format=fmt)  # type: ignore[call-overload]


NOT_JOINED = ("not used: this process is one rank of a launched job that it has not joined, "
              "so the ranks cannot take one layout; call cpuft.distributed.init() first")


def _own_value(gain: float) -> float | None:
    return gain


def _job_gain(own_gain: float, shared: Callable[[float], float | None]
              ) -> tuple[float, str] | None:
    """The gain the job decides by, and where it was measured ('' here); None where no rank
    can learn it."""
    gain = shared(own_gain)
    return None if gain is None else (gain, "" if gain == own_gain else " on rank 0")


def _verdict(on: bool) -> str:
    return "faster" if on else f"not {MIN_GAIN}x faster"


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
    if not isinstance(images, torch.Tensor):
        return False, "not measured: the example input is not a tensor of images"
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
        shared(0.0)  # every rank of a job takes part in the choice, whatever it measured
        return False, (f"not measured: the model did not run forward and backward on the "
                       f"{shape} example ({type(e).__name__})")
    job = _job_gain(seconds[False] / seconds[True] if seconds[True] else 0.0, shared)
    if job is None:
        _set_layout(model, torch.contiguous_format)
        return False, NOT_JOINED
    gain, where = job
    on = gain >= MIN_GAIN
    _set_layout(model, torch.channels_last if on else torch.contiguous_format)
    if on:
        model.register_forward_pre_hook(_inputs_to_channels_last)
    return on, (f"measured{where} on a {shape} batch: channels-last {gain:.2f}x the speed of "
                f"contiguous, forward and backward ({_verdict(on)})")


def _inputs_to_channels_last(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.contiguous(memory_format=torch.channels_last)
                 if isinstance(a, torch.Tensor) and a.dim() == 4 else a for a in args)


def _as_height_one(self: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """The 1-d convolution as a 2-d one over a height-1 view of ``x``: the same sums, and the
    output keeps the input's memory order."""
    if x.dim() != 3:
        return nn.Conv1d.forward(self, x)
    padding = self.padding if isinstance(self.padding, str) else (0, self.padding[0])
    return F.conv2d(x.unsqueeze(2), self.weight.unsqueeze(2), self.bias,
                    (1, self.stride[0]), padding, (1, self.dilation[0]),
                    self.groups).squeeze(2)


def _served_1d(model: nn.Module) -> list[nn.Conv1d]:
    """The model's 1-d convolutions that run as nn.Conv1d does (zero padding, no forward of
    their own)."""
    return [m for m in model.modules() if isinstance(m, nn.Conv1d)
            and type(m).forward is nn.Conv1d.forward and m.padding_mode == "zeros"
            and "forward" not in m.__dict__]


def use_height_one_convs(model: nn.Module, example: Any, precision: str | None,
                         rounds: int = 3,
                         shared: Callable[[float], float | None] = _own_value
                         ) -> tuple[bool, str]:
    """Whether ``model``'s 1-d convolutions train faster run as height-1 2-d ones on
    ``example`` (a tensor, a tuple of positional inputs or a dict of keyword inputs), and why;
    they are left running the faster way. ``shared`` as for ``use_channels_last``."""
    convs = _served_1d(model)
    if not convs:
        return False, "the model has no 1-d or 2-d convolutions"
    if example is None:
        return False, ("not measured: no batch of the model's own to measure its 1-d "
                       "convolutions on; give example_input= (cpuft.fit takes its data's first)")

    def patch() -> None:
        for m in convs:
            m.forward = types.MethodType(_as_height_one, m)  # type: ignore[method-assign]

    def undo() -> None:
        for m in convs:
            m.__dict__.pop("forward", None)

    def one_pass(on: bool) -> Callable[[], float]:
        def run() -> float:
            patch() if on else undo()
            return pass_seconds(model, example, precision)
        return run

    try:
        with untouched(model):
            seconds = timed_in_turns({False: one_pass(False), True: one_pass(True)}, rounds)
    except Exception as e:
        undo()
        shared(0.0)  # every rank of a job takes part in the choice, whatever it measured
        return False, f"not measured: the model did not train on its first batch ({error_line(e)})"
    job = _job_gain(seconds[False] / seconds[True] if seconds[True] else 0.0, shared)
    if job is None:
        undo()
        return False, NOT_JOINED
    gain, where = job
    on = gain >= MIN_GAIN
    patch() if on else undo()
    return on, (f"measured{where} on the first batch: {len(convs)} 1-d convolution(s) run as "
                f"height-1 2-d ones, which read channels-last inputs as they lie, {gain:.2f}x "
                f"the speed of 1-d ones, forward and backward ({_verdict(on)})")


class ChannelsLastSpeedUp(SpeedUp):
    name = "channels_last"

    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        return switch(cfg.speedups.channels_last, "where it measures faster")

    def apply(self, model: nn.Module, decision: Decision, ctx: PatchContext) -> Decision:
        if any(isinstance(m, nn.Conv2d) for m in model.modules()):
            on, reason = use_channels_last(model, ctx.example(), ctx.precision,
                                           shared=rank0_value)
        elif _served_1d(model):
            on, reason = use_height_one_convs(model, ctx.example(), ctx.precision,
                                              shared=rank0_value)
        else:
            on, reason = False, "the model has no 1-d or 2-d convolutions"
        return Decision(on, reason)


register(ChannelsLastSpeedUp())
