"""Patch a model as a settled plan says, and return the plan as the model now runs."""

from __future__ import annotations

from typing import Any

from cpuft.errors import CpuftError
from cpuft.plan.choices import MATMUL_ATTENTION
from cpuft.plan.speed_plan import SpeedPlan
from cpuft.speedups.attention import register_attention
from cpuft.speedups.dropout import swap_dropout
from cpuft.speedups.first_token import use_first_token_layer
from cpuft.speedups.sparse_embeddings import make_embeddings_sparse


def apply_speedups(model: Any, plan: SpeedPlan) -> SpeedPlan:
    """Swap in the fast dropout, the chosen attention, sparse embeddings and the first-token
    layer; the plan with what the model really runs and why each patch that could not apply
    did not. (bf16 weights are the engine's: they live for the training loop alone.)"""
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
        "attention": str(getattr(model.config, "_attn_implementation", None) or "default"),
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
    return plan.but(**changes)
