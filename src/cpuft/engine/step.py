"""One optimizer step: forward, backward, gradient reduction across ranks, clipped AdamW.

``fit`` takes every step through ``TrainStep``, and so do the benchmarks that time steps one by
one, so what they measure is what training runs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from cpuft.distributed.group import DistContext
from cpuft.engine.weights import WeightHolder, WeightsFactory
from cpuft.errors import CpuftError
from cpuft.optim import AdamW, build_optimizer, clip_step

Batch = Any
"""A dict of tensors (a model's keyword arguments), or whatever a user's loader yields for
their ``loss_fn``: an (input, target) pair, a tensor, nested lists and dicts of tensors."""
LossFn = Callable[[nn.Module, Batch], torch.Tensor]


def default_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    out = model(**batch)
    loss = getattr(out, "loss", None)
    if loss is None:
        raise CpuftError("the model returned no .loss: pass loss_fn=(model, batch) -> loss to fit")
    return loss


def _first_tensor(batch: Batch) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    parts = batch.values() if isinstance(batch, Mapping) else (
        batch if isinstance(batch, (tuple, list)) else ())
    return next((t for t in map(_first_tensor, parts) if t is not None), None)


def batch_counts(batch: Batch) -> tuple[int, int]:
    """(samples, real tokens) in a batch: its first tensor's rows, and the attention mask's
    ones, else the input ids' or the first tensor's elements."""
    first = _first_tensor(batch)
    if first is None:
        raise CpuftError(f"a batch holds no tensor ({type(batch).__name__})")
    samples = int(first.shape[0]) if first.dim() else 1
    if isinstance(batch, Mapping) and batch.get("attention_mask") is not None:
        return samples, int(batch["attention_mask"].sum())
    ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
    return samples, int((ids if ids is not None else first).numel())


def autocast_for(precision: str | None) -> contextlib.AbstractContextManager[Any]:
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass(slots=True)
class StepStats:
    loss: float
    """The mean loss over the step's micro-batches."""
    samples: int
    tokens: int
    """Real (not padding) tokens, over the micro-batches."""
    comm_wait: float
    """Seconds after the last gradient was computed, waiting for its reduction."""
    grad_norm: float | None = None
    """The gradients' norm before clipping (None where no clipping computed it)."""


class TrainStep:
    """One step of ``model`` with ``optimizer``: bf16 weights (``weights``) where the run holds
    them, DDP's gradient reduction where ``dist`` is set (``forward_model`` is then the DDP
    wrapper), gradients clipped to ``max_grad_norm``."""

    def __init__(self, model: nn.Module, optimizer: AdamW, *, precision: str | None,
                 weights: WeightHolder | None = None, max_grad_norm: float = 1.0,
                 loss_fn: LossFn | None = None, forward_model: nn.Module | None = None,
                 dist: DistContext | None = None) -> None:
        self.model, self.optimizer, self.precision = model, optimizer, precision
        self.weights, self.max_grad_norm, self.dist = weights, max_grad_norm, dist
        self.loss_fn = loss_fn or default_loss
        self.forward_model = forward_model if forward_model is not None else model
        self.trained = [p for group in optimizer.param_groups for p in group["params"]]

    @classmethod
    def standalone(cls, model: nn.Module, *, precision: str | None,
                   weights_factory: WeightsFactory | None = None, lr: float = 1e-4,
                   weight_decay: float = 0.01, lazy_rows: bool = False) -> TrainStep:
        """``fit``'s step on one process with a fused AdamW of its own: for benchmarks."""
        weights = weights_factory(model, True) if weights_factory is not None else None
        optimizer = build_optimizer(model, lr=lr, weight_decay=weight_decay, fused=True,
                                    stand_in=weights.master if weights is not None else None,
                                    lazy_rows=lazy_rows)
        return cls(model, optimizer, precision=precision, weights=weights)

    def __call__(self, *micro: Batch) -> StepStats:
        """One optimizer step on the micro-batches ``micro``; their gradients are summed as
        one batch's would be, and reduced across ranks on the last one alone."""
        stats = StepStats(loss=0.0, samples=0, tokens=0, comm_wait=0.0)
        for i, batch in enumerate(micro):
            last = i == len(micro) - 1
            sync = self.dist is None or last
            no_sync = (contextlib.nullcontext() if sync
                       else self.forward_model.no_sync())  # type: ignore[operator]
            with no_sync:
                with autocast_for(self.precision):
                    loss = self.loss_fn(self.forward_model, batch)
                (loss / len(micro)).backward()
            if self.dist is not None and sync:
                stats.comm_wait += self._reduce_wait()
            if self.weights is not None and sync:
                self.weights.fold_grads(last=last)
            stats.loss += float(loss.detach()) / len(micro)
            samples, tokens = batch_counts(batch)
            stats.samples += samples
            stats.tokens += tokens
        if self.weights is not None:
            stats.grad_norm = self.weights.step(self.optimizer, self.trained, self.max_grad_norm)
        else:
            stats.grad_norm = clip_step(self.optimizer, self.trained, self.max_grad_norm)
        self.optimizer.zero_grad(set_to_none=True)
        return stats

    def _reduce_wait(self) -> float:
        """Time spent waiting for DDP's reduction, and reducing the sparse gradients."""
        dist, waited = self.dist, 0.0
        assert dist is not None
        if dist.timer.last_hook:
            waited += time.perf_counter() - dist.timer.last_hook
            dist.timer.last_hook = 0.0
        waited += dist.take_hook_seconds()
        if dist.sparse_params:
            waited += dist.reduce_sparse_grads()
        return waited

