"""Evaluate a sequence classifier (or regressor) on an encoded split."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from cpuft.data.batching import Collator
from cpuft.data.prepare import Encoded
from cpuft.engine.step import autocast_for
from cpuft.metrics import Ticker
from cpuft.recipes.scoring import score


@torch.inference_mode()
def predict(model: nn.Module, data: Encoded, collator: Collator, batch_size: int,
            precision: str, regression: bool) -> np.ndarray:
    """Predictions in the data's order; batches are built from length-sorted rows."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(data)), key=lambda i: data.lengths[i])
    preds = np.zeros(len(data), dtype=np.float64 if regression else np.int64)
    ticker = Ticker("evaluating", len(order))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = collator(data, idx)
        batch.pop("labels")
        with autocast_for(precision):
            logits = model(**batch).logits.float()
        out = logits.squeeze(-1) if regression else logits.argmax(-1)
        preds[idx] = out.numpy()
        ticker.advance(len(idx))
    model.train(was_training)
    return preds


def evaluate(model: nn.Module, data: Encoded, collator: Collator, *, batch_size: int,
             precision: str, metrics: Sequence[str], regression: bool) -> dict[str, float]:
    preds = predict(model, data, collator, batch_size, precision, regression)
    return score(metrics, preds, np.asarray(data.labels))
