"""``fit``: the training loop for any ``nn.Module``, with the CPU speed-ups and exact resume.

The CLI's job is a thin layer over this. A model either returns an object with ``.loss``
(Hugging Face models given ``labels``) or the caller passes ``loss_fn(model, batch)``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from cpuft.errors import CpuftError
from cpuft.metrics import MetricLogger
from cpuft.optim import build_optimizer, constant_schedule, linear_schedule
from cpuft.train.checkpoint import load_checkpoint, save_checkpoint

Batch = dict[str, torch.Tensor]
LossFn = Callable[[nn.Module, Batch], torch.Tensor]


class BatchSource(Protocol):
    """Gives each epoch's batches in a fixed order, from any position (for exact resume)."""

    def num_batches(self, epoch: int) -> int: ...

    def iterate(self, epoch: int, start: int = 0) -> Iterator[Batch]: ...


@dataclass(kw_only=True, slots=True)
class FitConfig:
    """How ``fit`` trains."""

    total_steps: int
    """Optimizer steps to reach (counting steps done before a resume)."""
    lr: float = 5e-5
    warmup_steps: int = 0
    lr_schedule: str = "linear"
    """'linear' (warm-up, then linear decay to 0) or 'constant' (after warm-up)."""
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    grad_accum: int = 1
    precision: str = "fp32"
    """'bf16' (autocast, fp32 master weights) or 'fp32'."""
    fused_optimizer: bool = True
    compile: bool = False
    output_dir: Path | None = None
    """Where checkpoints go; None writes none."""
    save_steps: int = 0
    """Checkpoint every N steps; the last step is always saved when output_dir is set."""
    log_steps: int = 10
    resume_from: Path | None = None


@dataclass(slots=True)
class FitResult:
    steps: int
    samples: int
    tokens: int
    train_seconds: float
    final_loss: float
    losses: list[float] = field(default_factory=list)

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.train_seconds if self.train_seconds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.train_seconds if self.train_seconds else 0.0


class Interrupted(CpuftError):
    """Training stopped by a signal; a checkpoint was written when it could be."""

    exit_code = 130


def default_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    out = model(**batch)
    loss = getattr(out, "loss", None)
    if loss is None:
        raise CpuftError("the model returned no .loss: pass loss_fn=(model, batch) -> loss to fit")
    return loss


def _batch_counts(batch: Batch) -> tuple[int, int]:
    """(samples, real tokens) in a batch."""
    first = next(iter(batch.values()))
    samples = int(first.shape[0])
    mask = batch.get("attention_mask")
    tokens = int(mask.sum()) if mask is not None else int(batch.get("input_ids", first).numel())
    return samples, tokens


def autocast_for(precision: str) -> contextlib.AbstractContextManager[Any]:
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def fit(
    model: nn.Module,
    source: BatchSource,
    config: FitConfig,
    *,
    loss_fn: LossFn | None = None,
    logger: MetricLogger | None = None,
) -> FitResult:
    """Train ``model`` for ``config.total_steps`` optimizer steps on ``source``'s batches."""
    loss_fn = loss_fn or default_loss
    logger = logger or MetricLogger()
    optimizer = build_optimizer(
        model, lr=config.lr, weight_decay=config.weight_decay, fused=config.fused_optimizer
    )
    if config.lr_schedule == "linear":
        scheduler = linear_schedule(
            optimizer, warmup_steps=config.warmup_steps, total_steps=config.total_steps
        )
    elif config.lr_schedule == "constant":
        scheduler = constant_schedule(optimizer, warmup_steps=config.warmup_steps)
    else:
        raise CpuftError(f"unknown lr schedule {config.lr_schedule!r}: use linear or constant")

    step, epoch, position = 0, 0, 0
    if config.resume_from is not None:
        state = load_checkpoint(config.resume_from)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        step, epoch, position = state["step"], state["epoch"], state["position"]
        if step >= config.total_steps:
            raise CpuftError(
                f"the checkpoint is at step {step}, already at --max-steps {config.total_steps}"
            )

    def checkpoint() -> None:
        if config.output_dir is not None:
            save_checkpoint(config.output_dir, step, {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(),
                "step": step,
                "epoch": epoch,
                "position": position,
            })

    forward_model: nn.Module = torch.compile(model) if config.compile else model  # type: ignore[assignment]
    model.train()
    result = FitResult(steps=step, samples=0, tokens=0, train_seconds=0.0, final_loss=math.nan)
    logger.start(config.total_steps, step)
    window = {"samples": 0, "tokens": 0, "start": time.perf_counter()}
    started = time.perf_counter()
    try:
        while step < config.total_steps:
            n_batches = source.num_batches(epoch)
            if n_batches == 0:
                raise CpuftError("the training data gives no batches")
            batches = source.iterate(epoch, position)
            while position < n_batches and step < config.total_steps:
                group = min(config.grad_accum, n_batches - position)
                step_loss = 0.0
                for _ in range(group):
                    batch = next(batches)
                    with autocast_for(config.precision):
                        loss = loss_fn(forward_model, batch)
                    (loss / group).backward()
                    step_loss += float(loss.detach()) / group
                    samples, tokens = _batch_counts(batch)
                    window["samples"] += samples
                    window["tokens"] += tokens
                    result.samples += samples
                    result.tokens += tokens
                if config.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                position += group
                step += 1
                if not math.isfinite(step_loss):
                    raise CpuftError(f"loss became {step_loss} at step {step}: lower --lr")
                result.losses.append(step_loss)
                now = time.perf_counter()
                elapsed = max(now - window["start"], 1e-9)
                record = {
                    "step": step,
                    "epoch": epoch,
                    "loss": step_loss,
                    "lr": scheduler.get_last_lr()[0],
                    "samples_per_second": window["samples"] / elapsed,
                    "tokens_per_second": window["tokens"] / elapsed,
                }
                logger.step(record)
                if step % config.log_steps == 0 or step == config.total_steps:
                    logger.log(record)
                    window = {"samples": 0, "tokens": 0, "start": now}
                if position >= n_batches:
                    epoch, position = epoch + 1, 0
                if config.save_steps and step % config.save_steps == 0:
                    checkpoint()
                if position == 0:
                    break
    except KeyboardInterrupt:
        checkpoint()
        logger.close()
        where = f"; checkpoint at step {step} in {config.output_dir}" if config.output_dir else ""
        raise Interrupted(f"interrupted at step {step}{where}: rerun with --resume") from None
    result.train_seconds = time.perf_counter() - started
    if config.output_dir is not None and not (config.save_steps and step % config.save_steps == 0):
        checkpoint()
    logger.close()
    result.steps = step
    result.final_loss = result.losses[-1] if result.losses else math.nan
    return result
