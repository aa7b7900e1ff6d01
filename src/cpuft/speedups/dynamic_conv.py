"""Mixed attention (ConvBERT's: self-attention heads beside span-based dynamic convolution
heads) computed with fewer passes over the activations.

A mixed-attention module gives half its heads to self-attention and half to a convolution whose
kernel each position computes from its own span: a depthwise-separable convolution of the
layer's input (``key_conv_attn_layer``), times the query, projected to one kernel of
``conv_kernel_size`` taps a head (``conv_kernel_layer``), softmaxed and applied to a window of
``conv_out_layer``'s projection around the position. The stock module gathers those windows with
``unfold`` (im2col, and col2im for the gradient) and runs the pointwise half of the separable
convolution as a convolution: on a ConvBERT-base step (batch 16, 48 tokens, bf16) im2col,
col2im and the convolutions' gradients were about a fifth of the step (docs/speedups.md).

Here the windows are never gathered: each of the k taps is one shifted multiply-add over the
projection, accumulated in fp32 as the stock batched product does; the pointwise convolution is
the linear map it is. The same weights, the same sums. The modules served are found by what
they hold, and after the patch the model's output on a made-up batch must be what it was, or the
patch is undone.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.registry import PatchContext, SpeedUp, register
from cpuft.speedups.trial import kept_if_unchanged

LINEARS = ("query", "key", "value", "conv_kernel_layer", "conv_out_layer")
SEPARABLE = "key_conv_attn_layer"


def _separable(module: Any) -> bool:
    """A depthwise convolution, then a pointwise one, then a bias: the span's key."""
    depthwise, pointwise = getattr(module, "depthwise", None), getattr(module, "pointwise", None)
    bias = getattr(module, "bias", None)
    return (isinstance(depthwise, nn.Conv1d) and isinstance(pointwise, nn.Conv1d)
            and depthwise.groups == depthwise.in_channels == depthwise.out_channels
            and depthwise.kernel_size[0] % 2 == 1
            and depthwise.padding == (depthwise.kernel_size[0] // 2,)
            and depthwise.stride == (1,) and depthwise.dilation == (1,)
            and pointwise.kernel_size == (1,) and pointwise.groups == 1
            and isinstance(bias, torch.Tensor) and bias.numel() == pointwise.out_channels)


def serves(module: nn.Module) -> bool:
    """Whether ``module`` holds a mixed attention's parts, with an odd kernel (an even one has
    no centred window)."""
    size = getattr(module, "conv_kernel_size", None)
    return (all(isinstance(getattr(module, n, None), nn.Linear) for n in LINEARS)
            and _separable(getattr(module, SEPARABLE, None))
            and isinstance(size, int) and size % 2 == 1
            and all(isinstance(getattr(module, n, None), int)
                    for n in ("num_attention_heads", "attention_head_size")))


def conv_heads(module: Any, hidden_states: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """The dynamic convolution heads' output at every position, (batch, length, heads, head
    size), from the layer's input and its query projection ``query``."""
    batch, length, _ = hidden_states.shape
    heads, size, taps = (module.num_attention_heads, module.attention_head_size,
                         module.conv_kernel_size)
    separable = getattr(module, SEPARABLE)
    spread = separable.depthwise(hidden_states.transpose(1, 2)).transpose(1, 2)
    span_key = nn.functional.linear(spread, separable.pointwise.weight.squeeze(-1),
                                    separable.bias.view(-1))
    kernel = module.conv_kernel_layer(span_key * query).view(batch, length, heads, taps)
    kernel = torch.softmax(kernel.float(), dim=-1)
    reach = (taps - 1) // 2
    padded = nn.functional.pad(module.conv_out_layer(hidden_states), (0, 0, reach, reach))
    padded = padded.view(batch, length + taps - 1, heads, size)
    out = padded[:, :length] * kernel[..., :1]
    for tap in range(1, taps):  # position p reads p - reach + tap
        out = out + padded[:, tap:tap + length] * kernel[..., tap:tap + 1]
    return out


def _mixed_attention(self: Any, hidden_states: torch.Tensor,
                     attention_mask: torch.Tensor | None = None,
                     encoder_hidden_states: torch.Tensor | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if encoder_hidden_states is not None:  # cross-attention: the class's own sums
        return type(self).forward(self, hidden_states, attention_mask,
                                  encoder_hidden_states=encoder_hidden_states, **kwargs)
    batch, length, _ = hidden_states.shape
    heads, size = self.num_attention_heads, self.attention_head_size
    query = self.query(hidden_states)
    conv = conv_heads(self, hidden_states, query)
    q, k, v = (t.view(batch, length, heads, size).transpose(1, 2)
               for t in (query, self.key(hidden_states), self.value(hidden_states)))
    scores = torch.matmul(q, k.transpose(-1, -2)) * size ** -0.5
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = self.dropout(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype))
    context = torch.matmul(probs, v).transpose(1, 2)
    mixed = torch.cat([context, conv.to(context.dtype)], 2)
    return mixed.reshape(batch, length, 2 * heads * size), probs


def speed_up_mixed_attention(model: nn.Module) -> tuple[int, str]:
    """Patch every mixed attention of ``model``; (how many, why none were kept)."""
    modules = [m for m in model.modules() if serves(m)]
    if not modules:
        return 0, "no mixed attention with dynamic convolution heads (ConvBERT's form)"

    own = [m.__dict__.get("forward") for m in modules]  # a forward set on the instance

    def patch() -> None:
        for m in modules:
            m.forward = types.MethodType(_mixed_attention, m)

    def undo() -> None:
        for m, forward in zip(modules, own, strict=True):
            if forward is None:
                del m.forward
            else:
                m.forward = forward

    why_not = kept_if_unchanged(model, patch, undo)
    return (0, f"{why_not}: not served") if why_not else (len(modules), "")


class DynamicConvSpeedUp(SpeedUp):
    name = "dynamic_conv"

    def apply(self, model: nn.Module, decision: Decision, ctx: PatchContext) -> Decision:
        count, why_not = speed_up_mixed_attention(model)
        if not count:
            return Decision(False, why_not)
        return Decision(True, f"{count} mixed attention(s) apply their dynamic convolution "
                              "as shifted sums, not gathered windows")


register(DynamicConvSpeedUp())
