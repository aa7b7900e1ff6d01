"""One training step as ``fit`` takes it, for benchmarks that time steps one by one."""

from __future__ import annotations

from torch import nn

from cpuft.optim import build_optimizer, clip_step
from cpuft.train.bf16_weights import Bf16Weights
from cpuft.train.loop import Batch, autocast_for


class TrainStep:
    """Forward, backward, clipped fused AdamW: ``fit``'s step without DDP, with bf16 weights
    where the run is bf16 and ``bf16_weights`` holds."""

    def __init__(self, model: nn.Module, *, precision: str, bf16_weights: bool,
                 lr: float = 1e-4, weight_decay: float = 0.01) -> None:
        self.model, self.precision = model, precision
        self.weights = (Bf16Weights(model, fused=True)
                        if precision == "bf16" and bf16_weights else None)
        self.optimizer = build_optimizer(
            model, lr=lr, weight_decay=weight_decay, fused=True,
            stand_in=self.weights.master if self.weights is not None else None)
        self.trained = [p for g in self.optimizer.param_groups for p in g["params"]]

    def __call__(self, *micro: Batch) -> float:
        """One optimizer step on the micro-batches ``micro``, their gradients accumulated as
        ``fit`` accumulates them; their mean loss."""
        total = 0.0
        for i, batch in enumerate(micro):
            with autocast_for(self.precision):
                loss = self.model(**batch).loss
            (loss / len(micro)).backward()
            if self.weights is not None:
                self.weights.fold_grads(last=i == len(micro) - 1)
            total += float(loss.detach()) / len(micro)
        if self.weights is not None:
            self.weights.step(self.optimizer, self.trained, 1.0)
        else:
            clip_step(self.optimizer, self.trained, 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        return total
