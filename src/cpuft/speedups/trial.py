"""Trial passes that measure a model before a choice is made (its layout, its precision), and
leave it as they found it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch
from torch import nn

from cpuft.errors import first_line

K = TypeVar("K")


@contextlib.contextmanager
def untouched(model: nn.Module) -> Iterator[None]:
    """Train-mode passes inside leave ``model``'s buffers (BatchNorm statistics), gradients and
    mode as they were, and torch's random stream where it was (dropout draws in a trial must not
    shift the run's)."""
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    grads = {name: p.grad for name, p in model.named_parameters()}
    was_training = model.training
    rng = torch.random.get_rng_state()
    model.train()
    try:
        yield
    finally:
        torch.random.set_rng_state(rng)
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        for name, p in model.named_parameters():
            p.grad = grads.get(name)
        model.train(was_training)


def _a_float_output(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    values = out.values() if isinstance(out, Mapping) else out if isinstance(out, tuple) else ()
    return next((v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()),
                None)


def train_pass(model: nn.Module, inputs: Any, precision: str | None) -> None:
    """One forward pass on ``inputs`` (a tensor, a tuple of positional inputs or a dict of
    keyword inputs), bf16 autocast where ``precision`` is bf16, and a backward pass from the
    sum of its first floating-point output."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        if isinstance(inputs, dict):
            out = model(**inputs)
        else:
            out = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    found = _a_float_output(out)
    if found is None:
        raise TypeError(f"the model gave {type(out).__name__}: no floating-point output")
    found.float().sum().backward()


def pass_seconds(model: nn.Module, inputs: Any, precision: str | None) -> float:
    """Seconds of one ``train_pass``."""
    started = time.perf_counter()
    train_pass(model, inputs, precision)
    return time.perf_counter() - started


def error_line(e: Exception, width: int = 80) -> str:
    """``e``'s type and the first line of its message, cut at ``width`` characters."""
    return f"{type(e).__name__}: {first_line(str(e), width)}"


def made_up_ids(config: Any, length: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Two made-up rows of ``length`` token ids for a model of ``config`` (None where it has no
    vocabulary), and their attention mask: the second row padded over its last two positions.
    The ids come from a generator of their own, so torch's random stream is not moved."""
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 8:
        return None
    ids = torch.randint(4, min(vocab, 1000), (2, length),
                        generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, length - 2:] = 0
    return ids, mask


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Passes inside run in eval mode (dropout off, so that two passes agree) without
    gradients; the model's mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _output_on(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    with evaluating(model):
        out = model(input_ids=batch[0], attention_mask=batch[1])
    found = getattr(out, "logits", None)
    if found is None:
        found = getattr(out, "last_hidden_state", None)
    if not isinstance(found, torch.Tensor):
        raise TypeError(f"the model gave {type(out).__name__}: no logits to compare")
    return found.float()


def kept_if_unchanged(model: nn.Module, patch: Callable[[], None], undo: Callable[[], None],
                      tolerance: float = 1e-4) -> str:
    """Run ``patch`` and keep it where ``model``'s output on made-up token ids moves by no more
    than ``tolerance`` (relative to its largest value); else run ``undo``. '' where kept, else
    why not."""
    batch = made_up_ids(getattr(model, "config", None), 7)
    if batch is None:
        return "the model has no vocabulary to check the patch on"
    try:
        before = _output_on(model, batch)
    except Exception as e:
        return f"the model did not run on a made-up batch ({type(e).__name__})"
    patch()
    try:
        after = _output_on(model, batch)
        moved = float((after - before).abs().max() / before.abs().max().clamp_min(1e-6))
    except Exception as e:  # a form that only looks like the one served
        moved, why = float("inf"), error_line(e)
    else:
        why = f"its output moved by {moved:.1e}"
    if moved > tolerance:
        undo()
        return f"patched, the model did not give the same output ({why})"
    return ""


def timed_in_turns(variants: dict[K, Callable[[], float]], rounds: int) -> dict[K, float]:
    """Each variant's seconds summed over ``rounds`` turns, after one turn that warms them all
    up. A variant runs once per call and returns the seconds it took."""
    seconds = dict.fromkeys(variants, 0.0)
    for round_ in range(rounds + 1):
        for key, run in variants.items():
            took = run()
            if round_:
                seconds[key] += took
    return seconds
