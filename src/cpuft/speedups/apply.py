"""Patch a model as a settled plan says, and return the plan as the model now runs."""

from __future__ import annotations

from typing import Any

from cpuft.distributed import rank0_value
from cpuft.errors import CpuftError
from cpuft.plan.choices import MATMUL_ATTENTION
from cpuft.plan.speed_plan import SpeedPlan
from cpuft.speedups.attention import register_attention
from cpuft.speedups.channels_last import use_channels_last
from cpuft.speedups.counted_logits import use_counted_logits
from cpuft.speedups.dropout import swap_dropout
from cpuft.speedups.first_token import use_first_token_layer
from cpuft.speedups.sparse_embeddings import make_embeddings_sparse


def apply_speedups(model: Any, plan: SpeedPlan, example_input: Any = None) -> SpeedPlan:
    """Swap in the fast dropout, the chosen attention, sparse embeddings, the first-token
    layer, the counted-positions vocabulary head and channels-last convolutions (measured on
    ``example_input``, or a made-up image batch, by rank 0 for a whole job); the plan with
    what the model really runs and why each patch that could not apply did not. (bf16 weights
    are the engine's: they live for the training loop alone.)"""
    if plan.fast_dropout:
        swap_dropout(model)
    attention, attention_reason = plan.attention, plan.attention_reason
    if attention == MATMUL_ATTENTION:
        register_attention()
    if attention != "default":
        try:
            model.set_attn_implementation(attention)
        except (ValueError, ImportError, AttributeError) as e:
            if attention_reason == "requested":
                raise CpuftError(f"this model cannot use {attention} attention ({e}): "
                                 "pass --attention auto") from None
            attention_reason = f"the model has no switchable attention: {attention} not used"
    changes: dict[str, Any] = {
        "attention": str(getattr(getattr(model, "config", None), "_attn_implementation", None)
                         or "default"),
        "attention_reason": attention_reason,
    }
    if plan.sparse_embeddings:
        why_not = make_embeddings_sparse(model)
        if why_not:
            changes |= {"sparse_embeddings": False, "sparse_embeddings_reason": why_not}
    if plan.first_token_layer:
        why_not = use_first_token_layer(model)
        if why_not:
            changes |= {"first_token_layer": False, "first_token_layer_reason": why_not}
    if plan.counted_logits:
        why_not = use_counted_logits(model)
        if why_not:
            changes |= {"counted_logits": False, "counted_logits_reason": why_not}
    if plan.channels_last:
        on, reason = use_channels_last(model, example_input, plan.precision, shared=rank0_value)
        changes |= {"channels_last": on, "channels_last_reason": reason}
    return plan.but(**changes)
