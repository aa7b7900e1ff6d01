"""The last encoder layer computed for the first token alone, where the head reads nothing else.

A BERT-family sequence classifier reads one position of the last layer's output: the first
([CLS] or <s>) token, through the pooler or the classification head. The other positions of that
layer are computed and back-propagated for nothing. Here the last layer's keys and values still
come from every token (the first token attends to all of them), but its query, attention output,
feed-forward block and layer norms run on one position: on MiniLM-L6 that is most of one layer
in six. The loss and every gradient are the same as the full layer's, up to float rounding.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

import torch
from torch import nn

# Sequence classifiers whose head reads position 0 of the last hidden state and nothing else.
FIRST_TOKEN_HEADS = frozenset({
    "BertForSequenceClassification",
    "RobertaForSequenceClassification",
    "XLMRobertaForSequenceClassification",
    "CamembertForSequenceClassification",
    "ElectraForSequenceClassification",
})


def _last_layer(model: nn.Module) -> nn.Module | str:
    """The last encoder layer, or why the model cannot take the first-token layer."""
    name = type(model).__name__
    if name not in FIRST_TOKEN_HEADS:
        return f"{name} is not a BERT-family classifier that reads only the first token"
    config = getattr(model, "config", None)
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return "the model is a decoder"
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        return "the model has no encoder.layer list"
    layer = layers[-1]
    attention = getattr(layer, "attention", None)
    self_attention = getattr(attention, "self", None)
    needed = (
        all(isinstance(getattr(self_attention, n, None), nn.Linear)
            for n in ("query", "key", "value"))
        and all(hasattr(self_attention, n) for n in ("attention_head_size", "scaling", "dropout"))
        and hasattr(importlib.import_module(type(self_attention).__module__),
                    "eager_attention_forward")
        and hasattr(attention, "output")
        and hasattr(layer, "feed_forward_chunk")
    )
    if not needed:
        return f"{type(layer).__name__} is not laid out as a BERT layer"
    return layer


def _first_token_forward(self: Any, hidden_states: torch.Tensor,
                         attention_mask: torch.Tensor | None = None, *args: Any,
                         **kwargs: Any) -> torch.Tensor:
    """A BERT layer's forward that returns the first position only, shape (batch, 1, hidden)."""
    attention = self.attention
    sa = attention.self
    batch, length = hidden_states.shape[:2]
    first = hidden_states[:, :1]
    size = sa.attention_head_size
    query = sa.query(first).view(batch, 1, -1, size).transpose(1, 2)
    key = sa.key(hidden_states).view(batch, length, -1, size).transpose(1, 2)
    value = sa.value(hidden_states).view(batch, length, -1, size).transpose(1, 2)
    mask = attention_mask
    if mask is not None and mask.dim() == 4 and mask.shape[-2] > 1:
        mask = mask[:, :, :1, :]
    attend = _attention_function(sa)
    context, _ = attend(sa, query, key, value, mask,
                        dropout=sa.dropout.p if sa.training else 0.0, scaling=sa.scaling)
    attention_output = attention.output(context.reshape(batch, 1, -1), first)
    result: torch.Tensor = self.feed_forward_chunk(attention_output)
    return result


def _attention_function(self_attention: Any) -> Any:
    """The attention kernel the model is set to use (what its own layers call)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    default = importlib.import_module(type(self_attention).__module__).eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS.get_interface(self_attention.config._attn_implementation,
                                                 default)


def use_first_token_layer(model: nn.Module) -> str:
    """Compute the model's last layer for the first token only; the reason it cannot, or ''.

    The layer's weights and the model's state dict are untouched: only that layer's forward
    is replaced, on this instance.
    """
    layer = _last_layer(model)
    if isinstance(layer, str):
        return layer
    layer.forward = types.MethodType(_first_token_forward, layer)
    return ""
