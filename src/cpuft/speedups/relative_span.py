"""Disentangled relative attention over the relative positions a batch reaches, not the whole
span.

DeBERTa-v2's attention adds content-to-position and position-to-content scores: it projects the
whole table of relative-position embeddings (2 x 256 rows at base size), multiplies every query
and key by all of them, then gathers the 2L - 1 columns that a sequence of L tokens uses. At
fine-tuning lengths (L of 30 to 60) nearly all of that work is thrown away: on a DeBERTa-v2-base
step (batch 16, 32 tokens, bf16) those products, their gathers and the batch sums of their
gradients were over a third of the step (benchmarks/history.md).

Here the attention is handed only the rows the batch's relative positions reach, with its span
narrowed to match, so that its own code indexes them as before: the same scores, from the same
formula, over fewer columns. The modules served are found by what they hold (a
``disentangled_attention_bias`` method and the span, ``pos_ebd_size``), and after the patch the
model's output on a made-up batch must be what it was, or the patch is undone.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.registry import PatchContext, SpeedUp, register
from cpuft.speedups.trial import kept_if_unchanged

METHOD, SPAN = "disentangled_attention_bias", "pos_ebd_size"
TOLERANCE = 1e-4
"""Largest change of the made-up batch's output allowed, relative to its largest value."""


def _served(module: nn.Module) -> bool:
    return callable(getattr(module, METHOD, None)) and isinstance(getattr(module, SPAN, None), int)


def _narrowed(module: nn.Module, bias: Callable[..., Any]) -> Callable[..., Any]:
    """``bias`` (the module's own method) given only the relative-position rows in reach."""

    def disentangled_attention_bias(self: nn.Module, query_layer: torch.Tensor,
                                    key_layer: torch.Tensor, relative_pos: torch.Tensor | None,
                                    rel_embeddings: torch.Tensor, scale_factor: int) -> Any:
        span = getattr(self, SPAN)
        if relative_pos is None or query_layer.size(-2) != key_layer.size(-2):
            return bias(query_layer, key_layer, relative_pos, rel_embeddings, scale_factor)
        # Rows span - reach .. span + reach - 1 hold every relative position in [-reach + 1,
        # reach - 1]; the method indexes rows as position + span, so with its span set to
        # reach and the rows cut there it finds the same rows.
        reach = int(relative_pos.abs().max()) + 1
        if reach >= span:
            return bias(query_layer, key_layer, relative_pos, rel_embeddings, scale_factor)
        setattr(self, SPAN, reach)
        try:
            return bias(query_layer, key_layer, relative_pos,
                        rel_embeddings[span - reach: span + reach], scale_factor)
        finally:
            setattr(self, SPAN, span)

    return types.MethodType(disentangled_attention_bias, module)


def narrow_relative_span(model: nn.Module) -> tuple[int, str]:
    """Patch every disentangled attention of ``model``; (how many, why none were kept)."""
    modules = [m for m in model.modules() if _served(m)]
    if not modules:
        return 0, "no disentangled relative attention (DeBERTa's form) in the model"
    originals = [getattr(m, METHOD) for m in modules]

    def narrow() -> None:
        for m, bias in zip(modules, originals, strict=True):
            setattr(m, METHOD, _narrowed(m, bias))

    def undo() -> None:
        for m in modules:
            delattr(m, METHOD)  # the class's own method again

    why_not = kept_if_unchanged(model, narrow, undo, TOLERANCE)
    if why_not:
        return 0, f"{why_not}: not served"
    return len(modules), ""


class RelativeSpanSpeedUp(SpeedUp):
    name = "relative_span"

    def apply(self, model: nn.Module, decision: Decision, ctx: PatchContext) -> Decision:
        count, why_not = narrow_relative_span(model)
        if not count:
            return Decision(False, why_not)
        return Decision(True, f"{count} disentangled attention(s) project only the relative "
                              "positions a batch reaches")


register(RelativeSpanSpeedUp())
