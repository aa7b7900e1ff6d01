"""AdamW (fused where asked) with decoupled weight decay off for biases and norms, that also
steps sparse gradients (a word embedding's rows: AdamW's step, or a lazy one where asked), and
gradient clipping that takes both."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from cpuft.kernels.adamw import adamw_rows


def param_groups(model: nn.Module, weight_decay: float,
                 stand_in: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 ) -> list[dict[str, object]]:
    """Decayed and not decayed parameters; ``stand_in(p)`` gives the tensor the optimizer
    updates for ``p`` (an fp32 master of a bf16 weight, see cpuft.speedups.bf16_weights)."""
    decay: list[torch.Tensor] = []
    no_decay: list[torch.Tensor] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        target = stand_in(p) if stand_in is not None else p
        (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(target)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


class AdamW(torch.optim.AdamW):
    """torch's AdamW, which also steps parameters whose gradient is sparse.

    A sparse gradient (``nn.Embedding(sparse=True)``) holds the rows a batch used. By default
    the step is still torch's dense AdamW on the whole table (the other rows' gradient is
    zero: their moments decay and weight decay applies), computed from those rows by
    cpuft.kernels' row kernel without a dense gradient, or by torch's step on the gradient
    made dense where the kernel is not there. With ``lazy_rows`` only the rows used, and their
    moments, are updated (a lazy AdamW, as TensorFlow's LazyAdam): faster, but not AdamW.
    Dense parameters take torch's (fused) AdamW unchanged.
    """

    def __init__(self, params: Any, *, lazy_rows: bool = False, **settings: Any) -> None:
        super().__init__(params, **settings)
        self.lazy_rows = lazy_rows

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None,
             grad_scale: torch.Tensor | None = None) -> Any:
        """One update; with ``grad_scale`` every gradient counts divided by it.

        That is how gradient clipping is applied (see ``clip_step``): the fused kernel divides
        each gradient as it reads it, where clipping on its own reads and writes every gradient
        once more before the step.
        """
        # torch's fused AdamW reads the divisor from ``self.grad_scale`` (as GradScaler sets
        # it); its other implementations refuse one, so their gradients are divided here.
        fused = bool(self.defaults["fused"])
        parked: list[tuple[torch.Tensor, torch.Tensor]] = []
        dense: list[torch.Tensor] = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    if self.lazy_rows:
                        self._lazy_step(p, group, grad_scale)
                    elif not self._rows_step(p, group, grad_scale):
                        p.grad = p.grad.to_dense()  # torch's step, as for any dense gradient
                        if grad_scale is not None and not fused:
                            dense.append(p.grad)
                        continue
                    parked.append((p, p.grad))
                    p.grad = None  # torch's AdamW refuses sparse gradients and skips None
                elif grad_scale is not None and not fused:
                    dense.append(p.grad)
        if grad_scale is not None and dense:
            torch._foreach_div_(dense, grad_scale)
        self.grad_scale = grad_scale if fused else None
        try:
            return super().step(closure)
        finally:
            self.grad_scale = None
            for p, grad in parked:
                p.grad = grad

    def _state(self, p: torch.Tensor) -> dict[str, Any]:
        """``p``'s state as torch's AdamW keeps it, made where there is none yet."""
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _rows_step(self, p: torch.Tensor, group: dict[str, Any],
                   grad_scale: torch.Tensor | None) -> bool:
        """torch's dense step on ``p`` from its sparse gradient's rows, by the row kernel;
        False, with nothing done, where the kernel or this parameter cannot take it."""
        kernel, _ = adamw_rows()
        if kernel is None or p.ndim != 2 or p.dtype != torch.float32 or group["amsgrad"] \
                or group["maximize"] or not p.is_contiguous():
            return False
        grad = p.grad.coalesce()  # type: ignore[union-attr]
        state = self._state(p)
        state["step"] += 1
        step = float(state["step"])
        lr, (beta1, beta2) = float(group["lr"]), group["betas"]
        kernel.step(p.detach(), state["exp_avg"], state["exp_avg_sq"], grad.indices()[0],
                    grad.values().contiguous(), decay=1 - lr * group["weight_decay"],
                    step_size=lr / (1 - beta1**step), bc2_sqrt=math.sqrt(1 - beta2**step),
                    beta1=beta1, beta2=beta2, eps=group["eps"],
                    grad_divisor=float(grad_scale) if grad_scale is not None else 1.0)
        return True

    def _lazy_step(self, p: torch.Tensor, group: dict[str, Any],
                   grad_scale: torch.Tensor | None) -> None:
        grad = p.grad.coalesce()  # type: ignore[union-attr]
        rows, values = grad.indices()[0], grad.values()
        if grad_scale is not None:
            values = values / grad_scale
        state = self._state(p)
        state["step"] += 1
        step = float(state["step"])
        beta1, beta2 = group["betas"]
        lr = float(group["lr"])
        m = state["exp_avg"].index_select(0, rows).lerp_(values, 1 - beta1)
        v = state["exp_avg_sq"].index_select(0, rows).mul_(beta2)
        v.addcmul_(values, values, value=1 - beta2)
        state["exp_avg"].index_copy_(0, rows, m)
        state["exp_avg_sq"].index_copy_(0, rows, v)
        denom = (v.sqrt_() / math.sqrt(1 - beta2**step)).add_(group["eps"])
        w = p.index_select(0, rows).mul_(1 - lr * group["weight_decay"])
        w.addcdiv_(m, denom, value=-lr / (1 - beta1**step))
        p.index_copy_(0, rows, w)


def build_optimizer(model: nn.Module, *, lr: float, weight_decay: float, fused: bool,
                    stand_in: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    lazy_rows: bool = False) -> AdamW:
    return AdamW(param_groups(model, weight_decay, stand_in), lr=lr, fused=fused or None,
                 lazy_rows=lazy_rows)


def grad_norm(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """The total 2-norm of the gradients; sparse ones are coalesced in place first, so that a
    row used twice counts once."""
    grads: list[torch.Tensor] = []
    for p in params:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()
            grads.append(p.grad._values())
        else:
            grads.append(p.grad)
    if not grads:
        return torch.tensor(0.0)
    return torch.nn.utils.get_total_norm(grads)


def clip_step(optimizer: AdamW, params: Iterable[torch.Tensor],
              max_norm: float) -> float | None:
    """``clip_grad_norm_`` then ``step``, the clipping done by the step (0 clips nothing); the
    gradients' norm before clipping, None where nothing clips (it is not computed then)."""
    if max_norm <= 0:
        optimizer.step()
        return None
    norm = grad_norm(params)
    optimizer.step(grad_scale=torch.clamp((norm + 1e-6) / max_norm, min=1.0))
    return float(norm)
