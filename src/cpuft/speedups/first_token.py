"""The last encoder layer computed for the first token alone, where the head reads nothing else.

Many sequence classifiers read one position of the last layer's output: the first ([CLS] or
<s>) token, through a pooler or a classification head. The other positions of that layer are
computed and back-propagated for nothing. Here the last layer's keys and values still come from
every token (the first token attends to all of them), but its query, attention output,
feed-forward block and layer norms run on one position: on MiniLM-L6 that is most of one layer
in six. The loss and every gradient are the same as the full layer's, up to float rounding.

Whether a model qualifies is established by running it, never by its class: on a made-up
batch, every position of the last layer's output but the first is replaced by noise, and the
logits must not move. The layer is then served if its attention takes one of the forms below
(found by structure), and the patched model must give the logits it gave before.

Even the keys and values are not projected token by token. With one query per head, its score
against token l is q_h . (W_k,h x_l + b_k,h) = (W_k,h^T q_h) . x_l + q_h . b_k,h, and its context
is sum_l p_l (W_v,h x_l + b_v,h) = W_v,h (sum_l p_l x_l) + (sum_l p_l) b_v,h: each head maps its
query into the hidden space once and reads the tokens there, which for MiniLM is ~35 MFLOP a
batch of 32 in place of ~510 for the two projections of every token.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from cpuft.errors import CpuftError
from cpuft.speedplan.choices import MATMUL_ATTENTION
from cpuft.speedups import dynamic_conv
from cpuft.speedups.dropout import fast_dropout
from cpuft.speedups.registry import PatchSpeedUp, register
from cpuft.speedups.trial import error_line, evaluating, made_up_ids

CHECK_TOLERANCE = 1e-4
"""Largest change of a logit, relative to the largest logit, that the checks take as none."""


@dataclass(frozen=True)
class Attention:
    """The parts of a layer's multi-head self-attention that the first token's context needs."""

    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    heads: int
    scaling: float
    dropout: Callable[[torch.Tensor], torch.Tensor]
    """Dropout on the attention weights, as the model applies it."""

    @property
    def size(self) -> int:
        return self.query.out_features // self.heads


@dataclass(frozen=True)
class Form:
    """How one layout of layer runs for the first token: its attention (or ``mix``), and what
    follows it: ``finish(context, first)`` from the first token's attention context and input
    to the layer's output there. ``bias(args, kwargs)``: an additive position bias for the
    scores, from the layer's arguments."""

    name: str
    attention: Attention | None
    finish: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    bias: Callable[[tuple[Any, ...], dict[str, Any]], torch.Tensor | None] = lambda a, k: None
    takes: tuple[str, ...] = ("attention_mask",)
    """The layer's tensor arguments besides its input that this form reads: one it is given
    and would not read (rotary positions, say) means the form does other sums."""
    more_heads: Callable[[torch.Tensor], torch.Tensor] | None = None
    """Heads of another kind, their first-position context (batch, 1, width) from the layer's
    input, placed after the attention's."""
    mix: Callable[[torch.Tensor], torch.Tensor] | None = None
    """In place of attention: the first position's context (batch, 1, width) from every
    position, where tokens mix without weights."""
    sources: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
    """Where the attention reads other tensors than the layer's input: (the queries' and keys'
    input, the values' input) from the layer's input."""


def _attention(module: Any, names: tuple[str, str, str], heads: int, scaling: float | None,
               dropout: Callable[[torch.Tensor], torch.Tensor] | None = None
               ) -> Attention | None:
    """``module``'s query, key and value projections by ``names``, where all three are
    ``nn.Linear``; None where not."""
    query, key, value = (getattr(module, n, None) for n in names)
    if not (isinstance(query, nn.Linear) and isinstance(key, nn.Linear)
            and isinstance(value, nn.Linear) and heads > 0):
        return None
    return Attention(query=query, key=key, value=value, heads=heads,
                     scaling=scaling or (query.out_features // heads) ** -0.5,
                     dropout=dropout or _model_dropout(module))


def _model_dropout(module: Any, name: str = "dropout") -> Callable[[torch.Tensor], torch.Tensor]:
    """Dropout on attention weights as transformers' attention functions apply it, its
    probability ``module``'s ``name``'s: cpuft's under its matmul attention, torch's under the
    others."""
    p = float(getattr(getattr(module, name, None), "p", 0.0))
    config = getattr(module, "config", None)
    fast = getattr(config, "_attn_implementation", None) == MATMUL_ATTENTION
    return lambda probs: (fast_dropout(probs, p, module.training) if fast
                          else nn.functional.dropout(probs, p, module.training))


def _heads(module: Any, *names: str) -> int:
    return next((int(v) for v in (getattr(module, n, 0) for n in names) if v), 0)


def _bert_form(layer: Any) -> Form | None:
    """Separate query/key/value under ``attention.self``, an output block taking the residual,
    and a feed-forward chunk (BERT and the models built on its layer)."""
    sa: Any = getattr(getattr(layer, "attention", None), "self", None)
    output: Any = getattr(getattr(layer, "attention", None), "output", None)
    att = _attention(sa, ("query", "key", "value"), _heads(sa, "num_attention_heads"),
                     getattr(sa, "scaling", None))
    if att is None or output is None or not hasattr(layer, "feed_forward_chunk"):
        return None
    return Form("query/key/value with an output block", att,
                lambda ctx, first: layer.feed_forward_chunk(output(ctx, first)))


def _lin_form(layer: Any) -> Form | None:
    """q_lin/k_lin/v_lin/out_lin, a norm after attention and one after the feed-forward block
    (DistilBERT's layout)."""
    sa: Any = getattr(layer, "attention", None)
    norm, ffn, out_norm = (getattr(layer, n, None) for n in (
        "sa_layer_norm", "ffn", "output_layer_norm"))
    out_lin = getattr(sa, "out_lin", None)
    att = _attention(sa, ("q_lin", "k_lin", "v_lin"), _heads(sa, "n_heads",
                                                             "num_attention_heads"),
                     getattr(sa, "scaling", None))
    if att is None or norm is None or ffn is None or out_norm is None or out_lin is None:
        return None

    def finish(ctx: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        attended = norm(out_lin(ctx) + first)
        return out_norm(ffn(attended) + attended)

    return Form("q_lin/k_lin/v_lin with norms after attention and feed-forward", att, finish)


def _relative_form(layer: Any) -> Form | None:
    """q/k/v/o under ``attention.attn`` with a position bias added to the scores, then
    ``attention.LayerNorm``, ``intermediate`` and ``output`` (MPNet's layout)."""
    attention: Any = getattr(layer, "attention", None)
    attn: Any = getattr(attention, "attn", None)
    norm, o = getattr(attention, "LayerNorm", None), getattr(attn, "o", None)
    att = _attention(attn, ("q", "k", "v"), _heads(attn, "num_attention_heads"), None,
                     dropout=getattr(attn, "dropout", None))
    if att is None or norm is None or o is None or not all(
            hasattr(layer, n) for n in ("intermediate", "output")):
        return None
    after = attention.dropout

    def finish(ctx: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        attended = norm(after(o(ctx)) + first)
        return layer.output(layer.intermediate(attended), attended)

    def bias(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
        found = kwargs.get("position_bias", args[0] if args else None)
        return found if isinstance(found, torch.Tensor) else None

    return Form("q/k/v/o with a relative position bias", att, finish, bias,
                takes=("attention_mask", "position_bias"))


def _mixed_form(layer: Any) -> Form | None:
    """BERT's layout with half the heads dynamic convolutions over a span (ConvBERT's): the
    first position's span reaches only the tokens after it within half the kernel."""
    sa: Any = getattr(getattr(layer, "attention", None), "self", None)
    bert = _bert_form(layer)
    if bert is None or not dynamic_conv.serves(sa):
        return None
    near = (sa.conv_kernel_size - 1) // 2 + 1

    def conv(hidden_states: torch.Tensor) -> torch.Tensor:
        span = hidden_states[:, :near]
        return dynamic_conv.conv_heads(sa, span, sa.query(span))[:, :1].flatten(2)

    return dataclasses.replace(bert, name="query/key/value beside dynamic convolution heads",
                               more_heads=conv)


def _inner_output_form(layer: Any) -> Form | None:
    """query/key/value with the output projection and its norm inside the attention, then
    ffn, activation and ffn_output, normed with their input (ALBERT's layout)."""
    sa: Any = getattr(layer, "attention", None)
    parts: list[Any] = [getattr(sa, n, None) for n in ("dense", "LayerNorm", "output_dropout")]
    parts += [getattr(layer, n, None) for n in ("ffn", "ffn_output", "activation",
                                                "full_layer_layer_norm")]
    dense, norm, after, ffn, ffn_output, activation, out_norm = parts
    att = _attention(sa, ("query", "key", "value"), _heads(sa, "num_attention_heads"),
                     getattr(sa, "scaling", None),
                     dropout=_model_dropout(sa, "attention_dropout"))
    if att is None or any(part is None for part in parts):
        return None

    def finish(ctx: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        attended = norm(first + after(dense(ctx)))
        return out_norm(ffn_output(activation(ffn(attended))) + attended)

    return Form("query/key/value with the output and its norm inside the attention", att,
                finish)


def _weightless_mix_form(layer: Any) -> Form | None:
    """A block whose ``self`` mixes the tokens without weights and whose ``output`` takes the
    residual, then a feed-forward chunk (FNet's Fourier transform): the first position's mix
    is read off the mix of every position, and the rest runs on that position alone."""
    if not hasattr(layer, "feed_forward_chunk"):
        return None
    for block in layer.children():
        mixer, output = getattr(block, "self", None), getattr(block, "output", None)
        if not (isinstance(mixer, nn.Module) and isinstance(output, nn.Module)) \
                or any(True for _ in mixer.parameters()):
            continue

        def mix(hidden_states: torch.Tensor, mixer: nn.Module = mixer) -> torch.Tensor:
            mixed = mixer(hidden_states)
            return (mixed[0] if isinstance(mixed, tuple) else mixed)[:, :1]

        def finish(ctx: torch.Tensor, first: torch.Tensor, output: nn.Module = output
                   ) -> torch.Tensor:
            return layer.feed_forward_chunk(output(ctx, first))

        return Form("a token mix without weights, then an output block", None, finish, mix=mix)
    return None


def _bottleneck_form(layer: Any) -> Form | None:
    """Query and key from a bottleneck of the layer's input (or the input itself), values from
    the input or that bottleneck, an output block whose residual is the input's bottleneck,
    then feed-forward blocks and an output that takes the layer's input as well (MobileBERT's
    layout, in each of its bottleneck settings)."""
    attention: Any = getattr(layer, "attention", None)
    sa, output = getattr(attention, "self", None), getattr(attention, "output", None)
    att = _attention(sa, ("query", "key", "value"), _heads(sa, "num_attention_heads"),
                     getattr(sa, "scaling", None))
    narrowed = getattr(layer, "use_bottleneck", None)
    bottleneck: Any = getattr(layer, "bottleneck", None)
    ffns = getattr(layer, "ffn", None) if getattr(layer, "num_feedforward_networks", 1) != 1 \
        else []
    if att is None or output is None or not isinstance(narrowed, bool) or not all(
            isinstance(getattr(layer, n, None), nn.Module) for n in ("intermediate", "output")) \
            or (narrowed and not isinstance(getattr(bottleneck, "input", None), nn.Module)) \
            or not isinstance(ffns, (list, nn.ModuleList)):
        return None

    def sources(hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not narrowed:
            return hidden_states, hidden_states
        if getattr(bottleneck, "use_bottleneck_attention", False):
            narrow = bottleneck.input(hidden_states)
            return narrow, narrow
        if getattr(bottleneck, "key_query_shared_bottleneck", False):
            return bottleneck.attention(hidden_states), hidden_states
        return hidden_states, hidden_states

    def finish(ctx: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        attended = output(ctx, bottleneck.input(first) if narrowed else first)
        for ffn in ffns:
            attended = ffn(attended)
        return layer.output(layer.intermediate(attended), attended, first)

    return Form("query and key from a bottleneck, then feed-forward blocks", att, finish,
                sources=sources)


FORMS = (_mixed_form, _bert_form, _lin_form, _relative_form, _inner_output_form,
         _bottleneck_form, _weightless_mix_form)
"""The layouts served, each recognised by its parts."""


def first_token_attention(att: Attention, hidden_states: torch.Tensor,
                          mask: torch.Tensor | None, bias: torch.Tensor | None = None,
                          values: torch.Tensor | None = None) -> torch.Tensor:
    """The first position's multi-head attention context over all positions, (batch, 1, heads *
    head size), with keys and values folded into the query (see the module's docstring). The
    query and keys are of ``hidden_states``, the values of ``values`` where given.
    ``mask`` and ``bias`` are added to the scores as the model gives them (the first query's
    row is read)."""
    batch, _, width = hidden_states.shape
    heads, size = att.heads, att.size
    query = att.query(hidden_states[:, :1]).view(batch, heads, size)
    key_weight = att.key.weight.view(heads, size, width)
    # Each head's query in the hidden space: scores are then its dot products with the tokens.
    reach = torch.einsum("bhd,hdk->bhk", query, key_weight)
    scores = torch.bmm(reach, hidden_states.transpose(1, 2))
    if att.key.bias is not None:  # the same for every token, so softmax drops it; kept exact
        scores = scores + (query * att.key.bias.view(heads, size)).sum(-1, keepdim=True)
    scores = scores * att.scaling
    if bias is not None:
        scores = scores + bias[:, :, 0, :]
    if mask is not None:
        row = mask[:, :, 0, :]  # (batch or 1, 1 or heads, length): the first query's row
        scores = scores.masked_fill(~row, torch.finfo(scores.dtype).min) \
            if row.dtype == torch.bool else scores + row
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(hidden_states.dtype)
    probs = att.dropout(probs)
    values = hidden_states if values is None else values
    mixed = torch.bmm(probs, values)  # each head's weighted mean token
    context = torch.einsum("bhk,hdk->bhd", mixed,
                           att.value.weight.view(heads, size, values.shape[-1]))
    if att.value.bias is not None:  # dropout leaves the weights summing to other than 1
        context = context + probs.sum(-1, keepdim=True) * att.value.bias.view(heads, size)
    return context.reshape(batch, 1, heads * size)


def _layers(model: nn.Module) -> nn.ModuleList | None:
    """The model's stack of layers: its longest list of modules all of one class, the
    innermost of lists as long (a group of one shared layer holds that layer)."""
    stacks = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m)
              and len({type(layer) for layer in m}) == 1]
    return max(reversed(stacks), key=len, default=None)


def _probe_batch(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """Two made-up sequences of 7 tokens, the second padded after 5."""
    made_up = made_up_ids(getattr(model, "config", None), 7)
    return None if made_up is None else dict(zip(("input_ids", "attention_mask"), made_up,
                                                 strict=True))


def _logits(out: Any) -> torch.Tensor:
    found = getattr(out, "logits", None)
    if found is None:
        found = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(found, torch.Tensor):
        raise TypeError(f"the model gave {type(out).__name__}, no logits")
    return found.float()


def _moved(a: torch.Tensor, b: torch.Tensor) -> float:
    """How far ``b`` is from ``a``, relative to ``a``'s largest value."""
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-6))


class _Probe:
    """Runs the model on the made-up batch in eval mode, its RNG and mode left as they were."""

    def __init__(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> None:
        self.model, self.batch = model, batch

    def first_output(self, layer: nn.Module) -> torch.Tensor:
        """``layer``'s output at the first position, which is all the head reads: compared
        there, a difference is not squashed by the pooler's tanh and the head."""
        seen: list[torch.Tensor] = []

        def keep(_module: nn.Module, _args: Any, output: Any) -> None:
            hidden = output[0] if isinstance(output, tuple) else output
            seen.append(hidden[:, 0].float())

        handle = layer.register_forward_hook(keep)
        try:
            self.logits()
        finally:
            handle.remove()
        return seen[-1]

    def logits(self) -> torch.Tensor:
        with evaluating(self.model):
            return _logits(self.model(**self.batch))


@dataclass
class _Call:
    """How the model calls its last layer: whether it returns a tuple, the names of the
    tensor arguments it is given besides its input, and how many times a forward pass runs it
    (more than once: its weights are shared, and the last run is the last layer)."""

    as_tuple: bool = False
    tensors: tuple[str, ...] = ()
    times: int = 1


def _tensor_arguments(layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
                      ) -> tuple[str, ...]:
    def holds_tensor(value: Any) -> bool:
        return isinstance(value, torch.Tensor) or (
            isinstance(value, (tuple, list)) and any(map(holds_tensor, value)))

    try:
        bound = inspect.signature(layer.forward).bind(*args, **kwargs).arguments
    except TypeError:
        bound = {f"argument {i}": a for i, a in enumerate(args)} | kwargs
    names = []
    for i, (name, value) in enumerate(bound.items()):
        if i == 0:
            continue  # the input itself
        if isinstance(value, dict):  # **kwargs
            names += [k for k, v in value.items() if holds_tensor(v)]
        elif holds_tensor(value):
            names.append(name)
    return tuple(names)


def _reads_first_position_only(probe: _Probe, layer: nn.Module) -> tuple[str, _Call]:
    """('', how the layer is called) where the logits stay put when every position of the last
    layer's output (its last run's, where it runs several times) but the first turns to
    noise; else why the model does not qualify."""
    calls: list[bool] = []
    call = _Call()
    noise = torch.Generator().manual_seed(1)

    def arguments(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        call.tensors = _tensor_arguments(layer, args, kwargs)

    def count(_module: nn.Module, _args: Any, output: Any) -> None:
        calls.append(isinstance(output, tuple))

    def perturb(_module: nn.Module, _args: Any, output: Any) -> Any:
        calls.append(isinstance(output, tuple))
        hidden = output[0] if isinstance(output, tuple) else output
        if len(calls) != call.times or not isinstance(hidden, torch.Tensor) \
                or hidden.dim() != 3:
            return None
        noisy = hidden.clone()
        noisy[:, 1:] = torch.randn(noisy[:, 1:].shape, generator=noise, dtype=noisy.dtype) * 3
        return (noisy, *output[1:]) if isinstance(output, tuple) else noisy

    handles = [layer.register_forward_hook(count),
               layer.register_forward_pre_hook(arguments, with_kwargs=True)]
    try:
        before = probe.logits()
    finally:
        for handle in handles:
            handle.remove()
    call.times, calls[:] = len(calls), []
    handle = layer.register_forward_hook(perturb)
    try:
        after = probe.logits()
    finally:
        handle.remove()
    if not call.times:
        return "the last layer did not run on a made-up batch: not served", call
    if len(calls) != call.times:
        return (f"the last layer ran {call.times} and then {len(calls)} times a forward pass: "
                "not served"), call
    if _moved(before, after) > CHECK_TOLERANCE:
        return "the head reads more of the last layer than its first position", call
    call.as_tuple = calls[-1]
    return "", call


def use_first_token_layer(model: nn.Module) -> str:
    """Compute the model's last layer for the first token only; the reason it cannot, or ''.

    The layer's weights and the model's state dict are untouched: only that layer's forward
    is replaced, on this instance, and only once the model gives the same logits with it.
    """
    config = getattr(model, "config", None)
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return "the model is a decoder"
    layers, batch = _layers(model), _probe_batch(model)
    if layers is None or batch is None:
        return "the model has no stack of layers over token ids"
    layer, probe = layers[-1], _Probe(model, batch)
    try:
        why_not, call = _reads_first_position_only(probe, layer)
    except Exception as e:  # a model that does not run on ids and a mask alone
        return f"the model did not run on a made-up batch ({type(e).__name__})"
    if why_not:
        return why_not
    form = next((f for f in (match(layer) for match in FORMS) if f is not None), None)
    if form is None:
        parts = ", ".join(sorted({name.split(".")[-1] for name, m in layer.named_modules()
                                  if isinstance(m, nn.Linear)}))
        return (f"the last layer's attention has none of the forms served (separate query, "
                f"key and value projections in one of {len(FORMS) - 1} layouts, or a mix "
                f"without weights); its linear "
                f"layers: {parts}")
    unread = [name for name in call.tensors if name not in form.takes]
    if unread:
        return (f"the last layer is given {', '.join(unread)} besides its input, which "
                f"{form.name} does not read (rotary positions, say): not served")
    if call.times > 1 and any(getattr(m, "gradient_checkpointing", False) is True
                              for m in model.modules()):
        return (f"the last layer's weights are shared ({call.times} runs a forward pass) and "
                "the model recomputes its layers (gradient checkpointing): not served")
    before = probe.first_output(layer)
    undo = _patch(model, layer, form, call)
    try:
        moved = _moved(before, probe.first_output(layer))
    except Exception as e:  # parts of the layout's names that do other sums
        undo()
        return f"the last layer, taken as {form.name}, did not run ({error_line(e)}): not served"
    if moved > CHECK_TOLERANCE:
        undo()
        return (f"the last layer as {form.name} gave another output at the first position "
                f"(off by {moved:.1e}; positions it does not take, rotary ones, say): "
                "not served")
    return ""


def _patch(model: nn.Module, layer: nn.Module, form: Form, call: _Call) -> Callable[[], None]:
    """Serve ``layer`` the first-token way, on its last run of each forward pass where it runs
    several; the function that undoes it."""
    first_token = _forward_for(form, call.as_tuple)
    if call.times == 1:
        layer.forward = types.MethodType(first_token, layer)
        return lambda: delattr(layer, "forward")
    own, runs = layer.forward, [0]

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        runs[0] += 1
        if runs[0] == call.times:
            return first_token(self, *args, **kwargs)
        return own(*args, **kwargs)

    def start(_model: nn.Module, _args: Any) -> None:
        runs[0] = 0

    def end(_model: nn.Module, _args: Any, _output: Any) -> None:
        if runs[0] != call.times:  # its last run was not the one served
            raise CpuftError(
                f"the model ran its shared last layer {runs[0]} times, not the {call.times} "
                "cpuft counted when it checked the model; pass first_token_layer=False "
                "(--no-first-token-layer)")

    layer.forward = types.MethodType(forward, layer)
    hooks = [model.register_forward_pre_hook(start), model.register_forward_hook(end)]

    def undo() -> None:
        delattr(layer, "forward")
        for hook in hooks:
            hook.remove()

    return undo


def _forward_for(form: Form, as_tuple: bool) -> Callable[..., Any]:
    def forward(self: nn.Module, hidden_states: torch.Tensor,
                attention_mask: torch.Tensor | None = None, *args: Any, **kwargs: Any) -> Any:
        """The layer's output at the first position alone, (batch, 1, hidden)."""
        if form.mix is not None:
            context = form.mix(hidden_states)
        else:
            assert form.attention is not None
            keys, values = (hidden_states, hidden_states) if form.sources is None \
                else form.sources(hidden_states)
            context = first_token_attention(form.attention, keys, attention_mask,
                                            form.bias(args, kwargs), values)
        if form.more_heads is not None:
            context = torch.cat([context, form.more_heads(hidden_states).to(context.dtype)], -1)
        out = form.finish(context, hidden_states[:, :1])
        return (out,) if as_tuple else out

    return forward


register(PatchSpeedUp("first_token_layer", use_first_token_layer))
