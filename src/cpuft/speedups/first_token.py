"""The last encoder layer computed for the first token alone, where the head reads nothing else.

A BERT-family sequence classifier reads one position of the last layer's output: the first
([CLS] or <s>) token, through the pooler or the classification head. The other positions of that
layer are computed and back-propagated for nothing. Here the last layer's keys and values still
come from every token (the first token attends to all of them), but its query, attention output,
feed-forward block and layer norms run on one position: on MiniLM-L6 that is most of one layer
in six. The loss and every gradient are the same as the full layer's, up to float rounding.

Even the keys and values are not projected token by token. With one query per head, its score
against token l is q_h . (W_k,h x_l + b_k,h) = (W_k,h^T q_h) . x_l + q_h . b_k,h, and its context
is sum_l p_l (W_v,h x_l + b_v,h) = W_v,h (sum_l p_l x_l) + (sum_l p_l) b_v,h: each head maps its
query into the hidden space once and reads the tokens there, which for MiniLM is ~35 MFLOP a
batch of 32 in place of ~510 for the two projections of every token.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

from cpuft.speedplan.choices import MATMUL_ATTENTION
from cpuft.speedups.dropout import fast_dropout
from cpuft.speedups.registry import PatchSpeedUp, register

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
        and all(hasattr(self_attention, n) for n in
                ("num_attention_heads", "attention_head_size", "scaling", "dropout", "config"))
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
    first = hidden_states[:, :1]
    context = _first_token_attention(attention.self, hidden_states, attention_mask)
    attention_output = attention.output(context, first)
    result: torch.Tensor = self.feed_forward_chunk(attention_output)
    return result


def _first_token_attention(sa: Any, hidden_states: torch.Tensor,
                           mask: torch.Tensor | None) -> torch.Tensor:
    """The first position's multi-head attention context over all positions, (batch, 1, heads *
    head size), with keys and values folded into the query (see the module's docstring)."""
    batch, _, width = hidden_states.shape
    heads, size = sa.num_attention_heads, sa.attention_head_size
    query = sa.query(hidden_states[:, :1]).view(batch, heads, size)
    key_weight = sa.key.weight.view(heads, size, width)
    # Each head's query in the hidden space: scores are then its dot products with the tokens.
    reach = torch.einsum("bhd,hdk->bhk", query, key_weight)
    scores = torch.bmm(reach, hidden_states.transpose(1, 2))
    if sa.key.bias is not None:  # the same for every token, so softmax drops it; kept exact
        scores = scores + (query * sa.key.bias.view(heads, size)).sum(-1, keepdim=True)
    scores = scores * sa.scaling
    if mask is not None:
        row = mask[:, :, 0, :]  # (batch or 1, 1 or heads, length): the first query's row
        scores = scores.masked_fill(~row, torch.finfo(scores.dtype).min) \
            if row.dtype == torch.bool else scores + row
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(hidden_states.dtype)
    if sa.config._attn_implementation == MATMUL_ATTENTION:
        probs = fast_dropout(probs, sa.dropout.p, sa.training)
    else:
        probs = nn.functional.dropout(probs, sa.dropout.p, sa.training)
    mixed = torch.bmm(probs, hidden_states)  # each head's weighted mean token
    context = torch.einsum("bhk,hdk->bhd", mixed, sa.value.weight.view(heads, size, width))
    if sa.value.bias is not None:  # dropout leaves the weights summing to other than 1
        context = context + probs.sum(-1, keepdim=True) * sa.value.bias.view(heads, size)
    return context.reshape(batch, 1, heads * size)


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


register(PatchSpeedUp("first_token_layer", use_first_token_layer))
