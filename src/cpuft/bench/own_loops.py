"""The CNN and RNN benchmark models: a training loop of one's own, run three ways on the model
and data the examples train (examples/cnn_digits.py, examples/rnn_reviews.py).

- ``plain-fp32``: the loop as a tutorial writes it: fp32, torch's AdamW, torch's defaults;
- ``plain-best``: the best stock loop: bf16 autocast where native and measured faster, fused
  AdamW, channels-last for the CNN, one thread a physical core;
- ``cpuft``: the plain loop after ``cpuft.optimize``, its forward under ``cpuft.autocast``.

All three start from the same weights and train on the same batches: random images of
``image_size`` pixels for the CNN (speed is what is measured; the digits are 8 x 8), the Rotten
Tomatoes snippets for the RNN. Their training losses are compared, not an accuracy.
"""

from __future__ import annotations

import copy
import importlib.util
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from torch import nn

from cpuft.bench.flops import executed_flops
from cpuft.bench.measure import pace, peak_memory_mb, run_fields
from cpuft.bench.profile import profile_steps
from cpuft.bench.spec import example_path
from cpuft.bench.trainer import trainer_best_precision

CLASSES = 10
"""The CNN's classes (the digits')."""

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class Workload:
    """A model, its batches and what one batch holds: images, or the words not padding."""

    model: nn.Module
    batches: list[Batch]
    tokens: list[int]


def example(model: str) -> ModuleType:
    """The module of the example whose model ``model`` (cnn, rnn) is, from the checkout."""
    path = example_path(model)
    spec = importlib.util.spec_from_file_location(f"cpuft_example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cnn_workload(steps: int, batch_size: int, image_size: int, seed: int) -> Workload:
    """The examples' ResNet on random 3-channel images of ``image_size`` pixels."""
    resnet = example("cnn").ResNet
    torch.manual_seed(seed)
    model = resnet(classes=CLASSES, channels_in=3)
    g = torch.Generator().manual_seed(seed + 1)
    batches = [(torch.randn(batch_size, 3, image_size, image_size, generator=g),
                torch.randint(0, CLASSES, (batch_size,), generator=g)) for _ in range(steps)]
    return Workload(model, batches, [batch_size] * steps)


def rnn_workload(steps: int, batch_size: int, seed: int) -> Workload:
    """The examples' GRU classifier on Rotten Tomatoes snippets drawn at random (with a seed),
    batched as the example's DataLoader batches them."""
    reviews = example("rnn")
    train, _test, vocabulary = reviews.reviews()
    rows = random.Random(seed).sample(train, min(steps * batch_size, len(train)))
    while len(rows) < steps * batch_size:
        rows += rows[: steps * batch_size - len(rows)]
    batches = [reviews.collate(rows[i * batch_size:(i + 1) * batch_size]) for i in range(steps)]
    torch.manual_seed(seed)
    model = reviews.GruClassifier(vocabulary)
    return Workload(model, batches, [int((ids != reviews.PAD).sum()) for ids, _ in batches])


def workload(model: str, steps: int, batch_size: int, image_size: int, seed: int) -> Workload:
    if model == "cnn":
        return cnn_workload(steps, batch_size, image_size, seed)
    return rnn_workload(steps, batch_size, seed)


@dataclass
class Loop:
    """One configuration's way to train: its model and optimizer, how inputs are fed, the
    autocast around the forward, its precision with the reason, and cpuft's plan (stock: {})."""

    model: nn.Module
    optimizer: Any
    convert: Callable[[torch.Tensor], torch.Tensor]
    autocast: Callable[[], Any]
    precision: tuple[str, str]
    plan: dict[str, Any]


def _as_given(x: torch.Tensor) -> torch.Tensor:
    return x


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last)


def set_up(config: str, model: nn.Module, lr: float, weight_decay: float,
           example_input: torch.Tensor) -> Loop:
    """``config``'s loop around ``model``; ``example_input`` is a batch of its inputs."""
    import cpuft

    optimizer: torch.optim.Optimizer
    if config == "plain-fp32":
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        return Loop(model, optimizer, _as_given, lambda: torch.autocast("cpu", enabled=False),
                    ("fp32", "a plain loop"), {})
    if config == "plain-best":  # placed as the launcher places it (bench.placement)
        precision, reason = trainer_best_precision()
        images = example_input.dim() == 4
        if images:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay,
                                      fused=True)
        bf16 = precision == "bf16"
        return Loop(model, optimizer, _channels_last if images else _as_given,
                    lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16),
                    (precision, reason), {})
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    model, optimizer = cpuft.optimize(model, optimizer, example_input=(
        example_input if example_input.dim() == 4 else None))
    plan = cpuft.report_plan(model)
    return Loop(model, optimizer, _as_given, lambda: cpuft.autocast(model),
                (str(plan["precision"]), str(plan["precision_reason"])), plan)


def flops_per_sample(model: nn.Module, batch: Batch) -> float:
    """The FLOPs of one forward and backward pass, counted by torch, per sample."""
    counted = copy.deepcopy(model)

    def step() -> None:
        nn.functional.cross_entropy(counted(batch[0]).float(), batch[1]).backward()

    return executed_flops(step) / len(batch[1])


def run_loop(spec: Any) -> dict[str, Any]:
    """Train ``spec.model`` (cnn or rnn) ``spec.steps`` steps the ``spec.config`` way."""
    work = workload(spec.model, spec.steps, spec.batch_size, spec.image_size, spec.seed)
    flops = flops_per_sample(work.model, work.batches[0])
    loop = set_up(spec.config, work.model, spec.lr, spec.weight_decay, work.batches[0][0])
    loop.model.train()

    def step(batch: Batch) -> float:
        inputs, targets = batch
        with loop.autocast():
            loss = nn.functional.cross_entropy(loop.model(loop.convert(inputs)).float(), targets)
        loss.backward()
        loop.optimizer.step()
        loop.optimizer.zero_grad()
        return loss.detach().item()

    step_seconds, losses = [], []
    for batch in work.batches:
        started = time.perf_counter()
        losses.append(step(batch))
        step_seconds.append(time.perf_counter() - started)
    profile = profile_steps(step, work.batches, spec.profile_steps) if spec.profile_steps else None
    last = losses[-max(1, len(losses) // 4):]
    plan = loop.plan
    kernel = str(plan.get("bf16_weights_reason", "")) if plan else ""
    return {
        **run_fields(spec, *loop.precision, kernel),
        **pace(step_seconds, work.tokens, spec.batch_size),
        "peak_memory_mb": peak_memory_mb(),
        "train_loss": sum(last) / len(last),
        "losses": losses,
        "flops_per_sample": flops,
        "executed_flops_per_sample": flops,  # counted by torch: what the step runs
        **({"plan": plan} if plan else {}),
        **({"profile": profile} if profile else {}),
    }
