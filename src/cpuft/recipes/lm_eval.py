"""Judging a causal LM: loss and perplexity on the tokens that count, and, for prompt/response
data, how often the reference response is the likeliest of the data set's responses."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from cpuft.data.lm import IGNORE, LmCollator
from cpuft.data.prepare import Encoded
from cpuft.engine.step import autocast_for
from cpuft.errors import CpuftError
from cpuft.metrics import Ticker

MAX_CHOICES = 20
"""Accuracy is scored where a data set has at most this many distinct responses."""


def _token_losses(model: nn.Module, batch: dict[str, torch.Tensor],
                  precision: str | None) -> torch.Tensor:
    """Each sequence's summed loss over its counted tokens, [batch]."""
    labels = batch.pop("labels")
    with autocast_for(precision):
        logits = model(**batch).logits.float()
    shifted, targets = logits[:, :-1], labels[:, 1:]
    losses = F.cross_entropy(shifted.transpose(1, 2), targets, ignore_index=IGNORE,
                             reduction="none")
    return losses.sum(dim=1)


@torch.inference_mode()
def lm_loss(model: nn.Module, data: Encoded, collator: LmCollator, *, batch_size: int,
            precision: str | None) -> dict[str, float]:
    """Mean loss per counted token, and its perplexity."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(data)), key=lambda i: data.lengths[i])
    total, count = 0.0, 0
    ticker = Ticker("evaluating the loss", len(order))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = collator(data, idx)
        count += int((batch["labels"][:, 1:] != IGNORE).sum())
        total += float(_token_losses(model, batch, precision).sum())
        ticker.advance(len(idx))
    model.train(was_training)
    if count == 0:
        raise CpuftError("no token of the data to evaluate counts in the loss")
    loss = total / count
    return {"loss": loss, "perplexity": math.exp(min(loss, 700.0))}


@torch.inference_mode()
def choice_accuracy(model: nn.Module, candidates: Encoded, references: Sequence[int],
                    n_choices: int, collator: LmCollator, *, batch_size: int,
                    precision: str | None) -> float:
    """Share of samples whose reference response the model finds likeliest. ``candidates``
    holds, for each sample in turn, its prompt with each of the ``n_choices`` responses; the
    likelihood of a response is the product over its counted tokens."""
    was_training = model.training
    model.eval()
    scores = torch.empty(len(candidates))
    order = sorted(range(len(candidates)), key=lambda i: candidates.lengths[i])
    ticker = Ticker("scoring the choices", len(order))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        scores[idx] = -_token_losses(model, collator(candidates, idx), precision)
        ticker.advance(len(idx))
    model.train(was_training)
    chosen = scores.view(-1, n_choices).argmax(dim=1)
    return float((chosen == torch.tensor(list(references))).float().mean())
