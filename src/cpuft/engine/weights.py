"""What the training loop asks of a holder of the model's weights in another dtype than their
optimizer's (bf16 weights with fp32 masters, ``cpuft.speedups.bf16_weights``): the engine knows
the protocol, never a speed-up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from cpuft.optim import AdamW


class WeightHolder(Protocol):
    masters: list[torch.Tensor]
    """The tensors the optimizer steps (every rank starts from rank 0's)."""
    kernel_note: str
    """How the masters are stepped, for FitResult.optimizer_kernel."""

    def master(self, p: torch.Tensor) -> torch.Tensor:
        """The tensor the optimizer steps in place of the model's parameter ``p``."""
        ...

    def fold_grads(self, *, last: bool = True) -> None:
        """Take the gradients of this micro-batch's backward pass into the masters'."""
        ...

    def step(self, optimizer: AdamW, params: list[torch.Tensor],
             max_norm: float) -> float | None:
        """Clip, step the masters and write them back into the model's weights; the
        gradients' norm before clipping, where it was computed."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The model's state with the masters' values: what a checkpoint keeps."""
        ...

    def restore(self) -> None:
        """Leave the model as it was before, holding the masters' values."""
        ...


WeightsFactory = Callable[[nn.Module, bool], WeightHolder]
"""(model, fused optimizer) -> the holder of its weights for one training loop."""
