"""What a bench's FLOP figures count (docs/benchmarking.md; the peaks they are divided by are
``cpuft.bench.utilisation``'s).

- nominal: the model's FLOPs by the usual count, 6 x non-embedding parameters x real tokens
  plus attention, whatever a way of training skips or adds; a weight that a forward pass uses
  several times (a shared layer) counts each time. Counted on the stock model: the report
  gives every configuration the stock configuration's count;
- executed: what one training step really runs, counted by torch (``FlopCounterMode``) on one
  batch as that way trains it, padding and cpuft's skipped work included;
- the measured peak at the model's shapes: the best of several timings of matmuls at its linear
  layers' shapes for its batch's tokens."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from cpuft.speedups.trial import evaluating, made_up_ids


def weight_uses(model: nn.Module) -> int:
    """Non-embedding weights, each counted as often as a forward pass uses it: a layer whose
    weights are shared by the whole stack (ALBERT's) counts once a position. Counted on a
    made-up batch, by hooks on each module that holds weights of its own; where the model does
    not run on one, each weight counts once."""
    own = {m: sum(p.numel() for p in m.parameters(recurse=False))
           for name, m in model.named_modules() if "embeddings" not in name}
    own = {m: n for m, n in own.items() if n}
    once = sum(own.values())
    made_up = made_up_ids(getattr(model, "config", None), 8)
    if made_up is None:
        return once
    calls: Counter[nn.Module] = Counter()
    hooks = [m.register_forward_hook(lambda m, _a, _o: calls.update([m])) for m in own]
    try:
        with evaluating(model):
            model(input_ids=made_up[0], attention_mask=made_up[1])
    except Exception:  # a model that takes other inputs
        return once
    finally:
        for hook in hooks:
            hook.remove()
    return sum(n * calls[m] for m, n in own.items())


def nominal_terms(model: Any) -> dict[str, float]:
    """The model's terms of the nominal count (``utilisation.nominal_flops``): its weight uses
    and attention's 12 x layers x width."""
    cfg = model.config
    return {"weight_uses": float(weight_uses(model)),
            "attention_coefficient": float(12 * cfg.num_hidden_layers * cfg.hidden_size)}


def conv_backward_flops(grad_out_shape: Any, x_shape: Any, w_shape: Any, _bias: Any,
                        _stride: Any, _padding: Any, _dilation: Any, transposed: bool,
                        _output_padding: Any, _groups: Any, output_mask: Any,
                        *args: Any, **kwargs: Any) -> int:
    """A convolution's backward FLOPs: each gradient asked for (input, weight) is as many
    products as the forward. torch's own count takes a grouped convolution's weight gradient
    as ungrouped, groups times too many (5x the forward's for SqueezeBERT's 4 groups, not 2x)."""
    from torch.utils.flop_counter import conv_flop_count

    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed=transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def executed_flops(step: Callable[[], Any]) -> float:
    """The FLOPs torch counts while ``step`` runs (a forward and backward pass), a
    convolution's backward counted by ``conv_backward_flops``."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping={
            torch.ops.aten.convolution_backward: conv_backward_flops}) as counter:
        step()
    return float(counter.get_total_flops())


def model_shapes(model: nn.Module, rows: int) -> list[tuple[int, int, int]]:
    """The (rows, in, out) products the model's linear layers run on a batch of ``rows``
    tokens, each shape once."""
    return sorted({(rows, m.in_features, m.out_features) for m in model.modules()
                   if isinstance(m, nn.Linear)})


def matmul_peak_gflops(shapes: Iterable[tuple[int, int, int]], dtype: torch.dtype,
                       repeats: int = 3, seconds: float = 0.3) -> float:
    """The best GFLOP/s over ``shapes`` and ``repeats`` timings of each, on this process's
    threads."""
    own = torch.Generator().manual_seed(0)
    best = 0.0
    for rows, inner, cols in shapes:
        a = torch.randn(rows, inner, generator=own).to(dtype)
        b = torch.randn(inner, cols, generator=own).to(dtype)
        a @ b  # the kernel is chosen and the threads started outside the timing
        for _ in range(repeats):
            count, started = 0, time.perf_counter()
            while (took := time.perf_counter() - started) < seconds:
                a @ b
                count += 1
            best = max(best, 2 * rows * inner * cols * count / took / 1e9)
    return best


def step_flops(model: nn.Module, batch: dict[str, torch.Tensor], precision: str
               ) -> dict[str, float]:
    """Per sample, the FLOPs of one training step of ``model`` (its loss from ``labels`` in the
    batch) as it now runs, and the best matmul rate at its own shapes for that batch."""
    from cpuft.engine.step import autocast_for

    model.train()

    def step() -> None:
        with autocast_for(precision):
            loss = model(**batch).loss
        loss.backward()

    samples = int(batch["input_ids"].shape[0])
    executed = executed_flops(step) / samples
    model.zero_grad(set_to_none=True)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    shapes = model_shapes(model, int(batch["input_ids"].numel()))
    return {"executed_flops_per_sample": executed,
            "peak_gflops_model_shapes": matmul_peak_gflops(shapes, dtype)}
