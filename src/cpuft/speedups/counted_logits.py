"""A causal LM's vocabulary head computed at the positions whose next token counts in the loss.

Fine-tuning on prompt/response pairs or chats counts the response tokens alone: for the default
job's verdicts, 2 positions of about 40. The stock forward still projects every position onto
the vocabulary (49,152 words for SmolLM2) and takes the log-softmax of all of them, forward and
backward: the largest matmul of the step and a memory-bound pass over a [batch, length, vocab]
tensor, nearly all for labels of -100. Here the model's own ``logits_to_keep`` (a boolean mask
per sample, transformers 5) keeps the counted positions only. The loss is the same mean over the
same tokens, so the gradients are the same up to float rounding.

The patch acts in training only, when ``labels`` are given; the output's ``logits`` are then
those of the counted positions alone, flattened to [tokens, vocab]. Evaluation and generation
run the model's forward untouched.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from cpuft.data.lm import IGNORE
from cpuft.speedups.registry import PatchSpeedUp, register
from cpuft.speedups.trial import evaluating, made_up_ids

CHECK_TOLERANCE = 1e-4
"""Relative difference allowed between the patched and the stock loss in the check."""


def _decoder(model: nn.Module) -> nn.Module | str:
    """The model inside ``model`` (a peft wrapper's base) whose forward can leave positions out
    of its vocabulary projection (``logits_to_keep``) and takes labels, or why there is none.
    Whether its loss then stays the same is checked by running it (``_agrees``)."""
    get_base = getattr(model, "get_base_model", None)
    inner = get_base() if callable(get_base) else model
    try:
        parameters = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return "the model's forward has no signature to read"
    if "logits_to_keep" not in parameters or "labels" not in parameters:
        return ("the model's forward takes no logits_to_keep and labels: it is not a causal LM "
                "that can skip positions")
    return inner


def kept_positions(labels: torch.Tensor) -> torch.Tensor:
    """[batch, length] bool: the positions whose next token counts."""
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = labels[:, 1:] != IGNORE
    return keep


def _counted_forward(self: Any, *args: Any, labels: torch.Tensor | None = None,
                     **kwargs: Any) -> Any:
    stock = self._cpuft_stock_forward
    if labels is None or not self.training or "logits_to_keep" in kwargs:
        return stock(*args, labels=labels, **kwargs)
    keep = kept_positions(labels)
    out = stock(*args, logits_to_keep=keep, **kwargs)
    logits = out.logits.float()
    targets = labels[:, 1:][keep[:, :-1]]
    # No counted token: a zero loss that still reaches every trained parameter's graph.
    out["loss"] = (F.cross_entropy(logits, targets) if targets.numel()
                   else logits.sum() * 0.0)
    return out


def _agrees(model: nn.Module, inner: nn.Module, stock_forward: Any) -> str:
    """Why the patched loss differs from the stock one on a small made-up batch, or ''."""
    made_up = made_up_ids(inner.config, 8)
    if made_up is None:
        return "the model's config has no vocab_size"
    ids, mask = made_up
    labels = ids.clone()
    labels[0, :5] = IGNORE
    labels[1, :3] = IGNORE
    labels[mask == 0] = IGNORE
    try:
        with evaluating(model):  # the same forward twice: dropout off
            stock = stock_forward(input_ids=ids, attention_mask=mask, labels=labels)
            inner.training = True  # the patched path is taken in training only
            ours = inner.forward(input_ids=ids, attention_mask=mask, labels=labels)
    except Exception as e:  # a model whose head cannot take a mask: keep the stock forward
        return f"the model's forward did not take a mask of positions ({type(e).__name__}: {e})"
    a, b = float(stock.loss), float(ours.loss)
    if abs(a - b) > CHECK_TOLERANCE * max(abs(a), 1.0):
        return f"the loss over the kept positions ({b:.6f}) differs from the stock one ({a:.6f})"
    return ""


def use_counted_logits(model: nn.Module) -> str:
    """Patch the causal LM in ``model`` to project only counted positions onto the vocabulary
    while training; the reason it cannot, or ''. The check runs the model on 2 x 8 tokens."""
    inner = _decoder(model)
    if isinstance(inner, str):
        return inner
    stock_forward = inner.forward
    setattr(inner, "_cpuft_stock_forward", stock_forward)  # noqa: B010
    setattr(inner, "forward", types.MethodType(_counted_forward, inner))  # noqa: B010
    why_not = _agrees(model, inner, stock_forward)
    if why_not:
        setattr(inner, "forward", stock_forward)  # noqa: B010
    return why_not


register(PatchSpeedUp(
    "counted_logits", use_counted_logits,
    own_loops="off in a loop of your own: the loss, and which logits it reads, are yours"))
