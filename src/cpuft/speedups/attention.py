"""Matmul attention for transformers models, with cpuft's dropout on the weights.

At fine-tuning lengths (tens of tokens) it trains faster than torch's CPU flash attention,
whose backward dominates there (docs/speedups.md: attention).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cpuft.config import TrainConfig
from cpuft.errors import CpuftError
from cpuft.speedplan.choices import MATMUL_ATTENTION, choose_attention
from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.dropout import fast_dropout
from cpuft.speedups.registry import PatchContext, SpeedUp, register
from cpuft.topology import Topology


def eager_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attention_mask: torch.Tensor | None,
                    scaling: float | None = None, dropout: float = 0.0,
                    **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' eager (matmul) attention with the cheaper dropout on the weights.

    The softmax runs in fp32 whatever the scores' dtype: torch's CPU softmax of bf16 scores
    over a short last dimension is several times slower than its fp32 one, and gives the same
    values, rounded from an fp32 computation (docs/speedups.md: attention).
    """
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    groups = int(getattr(module, "num_key_value_groups", 1))
    if groups > 1:  # grouped-query attention: each key/value head serves `groups` query heads
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask[:, :, :, : key.shape[-2]]
    weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = fast_dropout(weights, dropout, module.training)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


def register_attention() -> str:
    """Make ``cpuft_eager`` an attention implementation transformers models can switch to.

    Its padding mask is eager attention's (additive); without registering one, transformers
    builds no mask at all for an implementation it does not know, and padding is attended.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(MATMUL_ATTENTION, eager_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(MATMUL_ATTENTION, eager_mask)
    return MATMUL_ATTENTION


class AttentionSpeedUp(SpeedUp):
    """The attention kernel: its value is the implementation the model runs."""

    name = "attention"

    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        s = cfg.speedups
        return Decision(*choose_attention(s.attention, cfg.data.max_seq_length, s.fast_dropout))

    def apply(self, model: Any, decision: Decision, ctx: PatchContext) -> Decision:
        attention, reason = str(decision.value), decision.reason
        if attention == MATMUL_ATTENTION:
            register_attention()
        if attention != "default":
            try:
                model.set_attn_implementation(attention)
            except (ValueError, ImportError, AttributeError) as e:
                if reason == "requested":
                    raise CpuftError(f"this model cannot use {attention} attention ({e}): "
                                     "pass --attention auto") from None
                reason = f"the model has no switchable attention: {attention} not used"
        runs = getattr(getattr(model, "config", None), "_attn_implementation", None)
        return Decision(str(runs or "default"), reason)


register(AttentionSpeedUp())
