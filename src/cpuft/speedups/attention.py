"""Matmul attention for transformers models, with cpuft's dropout on the weights.

At fine-tuning lengths (tens of tokens) it trains faster than torch's CPU flash attention,
whose backward dominates there (docs/speedups.md: attention).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from cpuft.config import TrainConfig
from cpuft.errors import CpuftError
from cpuft.speedplan.choices import MATMUL_ATTENTION, choose_attention
from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.dropout import fast_dropout
from cpuft.speedups.registry import PatchContext, SpeedUp, register
from cpuft.speedups.trial import timed_in_turns
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


def _pass_seconds(attend: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, mask: torch.Tensor) -> float:
    started = time.perf_counter()
    attend(q, k, v, mask).sum().backward()
    return time.perf_counter() - started


@functools.lru_cache(maxsize=32)
def matmul_attention_gain(heads: int, head_dim: int, length: int, dtype: torch.dtype,
                          dropout: float = 0.0, batch: int = 16, rounds: int = 5) -> float:
    """How many times faster cpuft's matmul attention runs forward and backward than torch's
    sdpa, on ``batch`` made-up sequences of ``length`` tokens with a padding mask and the
    model's attention ``dropout`` (with it, torch's CPU sdpa leaves its fused kernel), in
    turns. At tens of tokens a pass takes well under a millisecond: fewer rows or rounds let
    the verdict on a model of small heads flip between runs (MobileBERT's 4 heads of 32 read
    0.91x to 1.21x at 8 rows and 3 rounds). torch's random stream is left where it was."""
    rng = torch.random.get_rng_state()
    try:
        return _gain(heads, head_dim, length, dtype, dropout, batch, rounds)
    finally:
        torch.random.set_rng_state(rng)


def _gain(heads: int, head_dim: int, length: int, dtype: torch.dtype, dropout: float,
          batch: int, rounds: int) -> float:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, length, head_dim, generator=g).to(dtype)
               .requires_grad_() for _ in range(3))
    mask = torch.zeros(batch, 1, length, length, dtype=dtype)
    stub = nn.Module()

    def matmul(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor) -> torch.Tensor:
        return eager_attention(stub, q, k, v, mask, dropout=dropout)[0]

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                          dropout_p=dropout)

    seconds = timed_in_turns({name: functools.partial(_pass_seconds, attend, q, k, v, mask)
                              for name, attend in (("matmul", matmul), ("sdpa", sdpa))}, rounds)
    return seconds["sdpa"] / seconds["matmul"] if seconds["matmul"] else 1.0


def head_shape(model: Any) -> tuple[int, int] | None:
    """(heads, head size) of the model's attention: read off its attention modules, which
    know it where the config's hidden size is not the attention's width (MobileBERT's 4 heads
    of 32 inside a 512-wide layer), else from the config; None where neither says."""
    modules = model.modules() if isinstance(model, nn.Module) else ()
    for m in modules:
        heads = _first_int(m, "num_attention_heads", "num_heads", "n_heads")
        size = _first_int(m, "attention_head_size", "head_dim")
        if heads and size:
            return heads, size
    cfg = getattr(model, "config", None)
    count, hidden = getattr(cfg, "num_attention_heads", None), getattr(cfg, "hidden_size", None)
    if not isinstance(count, int) or not isinstance(hidden, int) or count < 1:
        return None
    return count, int(getattr(cfg, "head_dim", None) or hidden // count)


def _first_int(module: Any, *names: str) -> int:
    found = (getattr(module, n, None) for n in names)
    return next((v for v in found if isinstance(v, int) and not isinstance(v, bool) and v > 0), 0)


def measured_choice(model: Any, attention: str, length: int, precision: str | None,
                    rule: tuple[str, str]) -> tuple[str, str]:
    """Matmul attention or the model's own (sdpa), whichever ran faster at ``length`` tokens
    with the model's heads; ``rule`` (the length rule's choice) where they cannot be timed."""
    shape = head_shape(model)
    if shape is None:
        return rule
    heads, head_dim = shape
    cfg = getattr(model, "config", None)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    dropout = next((float(p) for p in (getattr(cfg, "attention_probs_dropout_prob", None),
                                       getattr(cfg, "attention_dropout", None))
                    if isinstance(p, (int, float))), 0.0)
    gain = matmul_attention_gain(heads, int(head_dim), length, dtype, dropout)
    matmul = attention if attention != "default" else MATMUL_ATTENTION
    where = (f"measured at {length} tokens, {heads} heads of {head_dim}, dropout {dropout:g}: "
             f"matmul attention ran {gain:.2f}x sdpa's speed forward and backward")
    if gain >= 1:
        return matmul, f"auto: {where}"
    return "default", f"auto: {where}: the model's own (sdpa)"


class AttentionSpeedUp(SpeedUp):
    """The attention kernel: its value is the implementation the model runs."""

    name = "attention"

    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        s = cfg.speedups
        return Decision(*choose_attention(s.attention, cfg.data.max_seq_length, s.fast_dropout))

    def apply(self, model: Any, decision: Decision, ctx: PatchContext) -> Decision:
        attention, reason = str(decision.value), decision.reason
        if reason != "requested" and getattr(model, "_supports_attention_backend", None) is False:
            # set_attn_implementation accepts any name here, yet nothing would run it
            runs = getattr(getattr(model, "config", None), "_attn_implementation", None)
            return Decision(str(runs or "default"), "the model computes its attention its own "
                            "way, not through transformers' attention interface: kept")
        if reason.startswith("auto") and ctx.sequence_length:
            attention, reason = measured_choice(model, attention, ctx.sequence_length,
                                                ctx.precision, (attention, reason))
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
