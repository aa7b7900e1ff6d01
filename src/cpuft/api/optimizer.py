"""The optimizer ``cpuft.optimize`` returns when the weights are held in bf16: the user's own
optimizer, rebuilt over the fp32 masters (same class, groups and settings), behind the usual
``step``/``zero_grad``/``state_dict`` calls.

AdamW is stepped by cpuft's one-pass kernel (``Bf16Weights.step``), reading the bf16 gradients
as they are; any other optimizer steps the masters after their gradients are folded in. The
model's ``state_dict`` gives the masters and its ``load_state_dict`` loads them, so checkpoints
hold full fp32 weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from cpuft.optim import AdamW
from cpuft.speedups.bf16_weights import Bf16Weights


def _rebuilt(original: torch.optim.Optimizer, weights: Bf16Weights) -> tuple[Any, bool]:
    """The optimizer over the masters, and whether cpuft's AdamW kernel steps it."""
    groups = [{**{k: v for k, v in g.items() if k != "params"},
               "params": [weights.master(p) for p in g["params"]]}
              for g in original.param_groups]
    kernel = type(original) in (torch.optim.AdamW, AdamW)
    if kernel:
        defaults = {k: v for k, v in original.defaults.items()
                    if k in ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize")}
        for g in groups:  # the kernel path reads only these; torch's AdamW would check the rest
            for key in ("foreach", "fused", "capturable", "differentiable"):
                g.pop(key, None)
        inner: torch.optim.Optimizer = AdamW(groups, **defaults, fused=True)
    else:
        inner = type(original)(groups, **original.defaults)
    if original.state:
        inner.load_state_dict(original.state_dict())
    return inner, kernel


class Bf16Optimizer(torch.optim.Optimizer):
    """``original`` stepping the fp32 masters of ``weights``' bf16 parameters."""

    def __init__(self, original: torch.optim.Optimizer, weights: Bf16Weights) -> None:
        inner, self.kernel = _rebuilt(original, weights)
        super().__init__(inner.param_groups, inner.defaults)
        # One set of groups and state, shared with the optimizer that steps: a scheduler that
        # changes this one's learning rate changes the step's.
        self.inner, self.weights = inner, weights
        self.param_groups = inner.param_groups
        self.state = inner.state
        self._trained = [p for g in inner.param_groups for p in g["params"]]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.kernel:
            assert isinstance(self.inner, AdamW)
            self.weights.step(self.inner, self._trained, max_norm=0.0)
        else:
            self.weights.fold_grads(last=False)
            self.inner.step()
            self.weights.publish()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)
        self.weights.model.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.inner.load_state_dict(state_dict)
        self.state = self.inner.state
        self.param_groups = self.inner.param_groups


def save_masters(model: nn.Module, weights: Bf16Weights) -> None:
    """``model.state_dict()`` gives the fp32 masters, and ``load_state_dict`` fills them."""

    def give_masters(_module: nn.Module, state: dict[str, Any], prefix: str,
                     _meta: Any) -> None:
        for name, master in weights.master_names().items():
            if prefix + name in state:
                state[prefix + name] = master.detach()

    def take_masters(state: dict[str, Any], prefix: str, *_args: Any) -> None:
        with torch.no_grad():
            for name, master in weights.master_names().items():
                if prefix + name in state:
                    master.copy_(state[prefix + name])

    model._register_state_dict_hook(give_masters)
    model._register_load_state_dict_pre_hook(take_masters)
