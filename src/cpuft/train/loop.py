"""``fit``: the training loop for any ``nn.Module``, with the CPU speed-ups and exact resume.

The CLI's job is a thin layer over this. A model either returns an object with ``.loss``
(Hugging Face models given ``labels``) or the caller passes ``loss_fn(model, batch)``.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from cpuft.dist.group import DistContext
from cpuft.errors import CpuftError
from cpuft.metrics import MetricLogger
from cpuft.optim import build_optimizer, clip_step, constant_schedule, linear_schedule
from cpuft.train.bf16_weights import Bf16Weights
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
    """'bf16' (autocast; see bf16_weights) or 'fp32'."""
    bf16_weights: bool = False
    """With bf16: the weights (not the embeddings) held in bf16 during training, fp32 masters
    in the optimizer (cpuft.train.bf16_weights); otherwise fp32 weights that autocast casts at
    each use. Needs a model whose layers take bf16 inputs (transformers models do)."""
    fused_optimizer: bool = True
    compile: bool = False
    output_dir: Path | None = None
    """Where checkpoints go; None writes none."""
    save_steps: int = 0
    """Checkpoint every N steps; the last step is always saved when output_dir is set."""
    log_steps: int = 10
    resume_from: Path | None = None
    bucket_cap_mb: float = 0.0
    """DDP gradient bucket size in MB (distributed runs); 0 chooses by gradient type
    (cpuft.dist.group.bucket_cap_for)."""
    grad_compression: str = "none"
    """'none', 'bf16' (gradients sent as bf16) or 'powersgd' (distributed runs)."""
    grad_sync: bool = True
    """False sends no gradients (a benchmark of what communication costs; ranks drift apart)."""


@dataclass(slots=True)
class FitResult:
    steps: int
    samples: int
    tokens: int
    train_seconds: float
    final_loss: float
    losses: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    """This process's real (not padding) tokens of each step, over its micro-batches."""
    comm_wait_seconds: float = 0.0
    """Time spent after the last gradient was computed, waiting for its reduction."""
    optimizer_kernel: str = ""
    """How the bf16 weights' masters were stepped (see Bf16Weights.kernel_note); '' without."""

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.train_seconds if self.train_seconds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.train_seconds if self.train_seconds else 0.0


class Interrupted(CpuftError):
    """Training stopped by a signal; a checkpoint was written when it could be."""

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


@contextlib.contextmanager
def _stop_flag() -> Iterator[dict[str, int]]:
    """SIGTERM (a spot instance going away) or a first Ctrl-C sets a flag that the loop reads
    between steps, so the checkpoint holds a whole step; a second Ctrl-C stops at once."""
    flag: dict[str, int] = {}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT and flag:
            raise KeyboardInterrupt
        flag["signal"] = signum

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def default_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    out = model(**batch)
    loss = getattr(out, "loss", None)
    if loss is None:
        raise CpuftError("the model returned no .loss: pass loss_fn=(model, batch) -> loss to fit")
    return loss


def batch_counts(batch: Batch) -> tuple[int, int]:
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
    dist: DistContext | None = None,
) -> FitResult:
    """Train ``model`` for ``config.total_steps`` optimizer steps on ``source``'s batches.

    With ``dist`` the model is wrapped in DDP; ``source`` must give each rank its share.
    Rank 0 alone writes checkpoints; logged loss and speed are reduced over all ranks.
    """
    loss_fn = loss_fn or default_loss
    logger = logger or MetricLogger()
    state = load_checkpoint(config.resume_from) if config.resume_from is not None else None
    if state is not None:
        model.load_state_dict(state["model"])  # while fp32, so that masters start exact
    weights = (Bf16Weights(model, fused=config.fused_optimizer)
               if config.precision == "bf16" and config.bf16_weights else None)
    try:
        return _fit(model, source, config, loss_fn, logger, dist, state, weights)
    finally:
        if weights is not None:
            weights.restore()


def _fit(model: nn.Module, source: BatchSource, config: FitConfig, loss_fn: LossFn,
         logger: MetricLogger, dist: DistContext | None, state: dict[str, Any] | None,
         weights: Bf16Weights | None) -> FitResult:
    optimizer = build_optimizer(
        model, lr=config.lr, weight_decay=config.weight_decay, fused=config.fused_optimizer,
        stand_in=weights.master if weights is not None else None,
    )
    trained = [p for group in optimizer.param_groups for p in group["params"]]
    if config.lr_schedule == "linear":
        scheduler = linear_schedule(
            optimizer, warmup_steps=config.warmup_steps, total_steps=config.total_steps
        )
    elif config.lr_schedule == "constant":
        scheduler = constant_schedule(optimizer, warmup_steps=config.warmup_steps)
    else:
        raise CpuftError(f"unknown lr schedule {config.lr_schedule!r}: use linear or constant")

    step, epoch, position = 0, 0, 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        step, epoch, position = state["step"], state["epoch"], state["position"]
        if step >= config.total_steps:
            raise CpuftError(
                f"the checkpoint is at step {step}, already at --max-steps {config.total_steps}"
            )

    main_rank = dist is None or dist.info.is_main

    saved_step = step  # a resumed run's own checkpoint is already on disk

    def checkpoint() -> None:
        """Write the state after ``step`` once, however many reasons there are to save it."""
        nonlocal saved_step
        if config.output_dir is not None and main_rank and step != saved_step:
            saved_step = step
            save_checkpoint(config.output_dir, step, {
                "model": weights.state_dict() if weights is not None else model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(),
                "step": step,
                "epoch": epoch,
                "position": position,
            })

    forward_model: nn.Module = model
    if dist is not None:
        from cpuft.dist.group import wrap_model

        forward_model = wrap_model(model, dist, bucket_cap_mb=config.bucket_cap_mb,
                                   grad_compression=config.grad_compression,
                                   grad_sync=config.grad_sync)
        if weights is not None:  # DDP gave every rank rank 0's bf16 weights; now the masters
            dist.broadcast_from_main(weights.masters)
    if config.compile:
        forward_model = torch.compile(forward_model)  # type: ignore[assignment]
    model.train()
    result = FitResult(steps=step, samples=0, tokens=0, train_seconds=0.0, final_loss=math.nan,
                       optimizer_kernel=weights.kernel_note if weights is not None else "")
    logger.start(config.total_steps, step)
    window = {"samples": 0, "tokens": 0, "start": time.perf_counter()}
    started = time.perf_counter()
    with _stop_flag() as stop:
        try:
            while step < config.total_steps:
                n_batches = source.num_batches(epoch)
                if n_batches == 0:
                    raise CpuftError("the training data gives no batches")
                batches = source.iterate(epoch, position)
                while position < n_batches and step < config.total_steps:
                    step_started = time.perf_counter()
                    group = min(config.grad_accum, n_batches - position)
                    step_loss, step_tokens = 0.0, 0
                    for micro in range(group):
                        batch = next(batches)
                        # Gradients are reduced across ranks only on a step's last micro-batch.
                        sync = dist is None or micro == group - 1
                        no_sync = contextlib.nullcontext() if sync else forward_model.no_sync()  # type: ignore[operator]
                        with no_sync:
                            with autocast_for(config.precision):
                                loss = loss_fn(forward_model, batch)
                            (loss / group).backward()
                        if dist is not None and sync and dist.timer.last_hook:
                            result.comm_wait_seconds += time.perf_counter() - dist.timer.last_hook
                            dist.timer.last_hook = 0.0
                        if dist is not None and sync:
                            result.comm_wait_seconds += dist.take_hook_seconds()
                            if dist.sparse_params:
                                result.comm_wait_seconds += dist.reduce_sparse_grads()
                        if weights is not None and sync:
                            weights.fold_grads(last=micro == group - 1)
                        step_loss += float(loss.detach()) / group
                        samples, tokens = batch_counts(batch)
                        step_tokens += tokens
                        window["samples"] += samples
                        window["tokens"] += tokens
                        result.samples += samples
                        result.tokens += tokens
                    if weights is not None:
                        weights.step(optimizer, trained, config.max_grad_norm)
                    else:
                        clip_step(optimizer, trained, config.max_grad_norm)
                    scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                    position += group
                    step += 1
                    if not math.isfinite(step_loss):
                        raise CpuftError(f"loss became {step_loss} at step {step}: lower --lr")
                    result.losses.append(step_loss)
                    now = time.perf_counter()
                    result.step_seconds.append(now - step_started)
                    result.step_tokens.append(step_tokens)
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
                        if dist is not None:
                            samples_sum, tokens_sum, loss_sum = dist.all_reduce_sum(
                                [window["samples"], window["tokens"], step_loss])
                            record |= {"loss": loss_sum / dist.info.world_size,
                                       "samples_per_second": samples_sum / elapsed,
                                       "tokens_per_second": tokens_sum / elapsed}
                        logger.log(record)
                        window = {"samples": 0, "tokens": 0, "start": now}
                    if position >= n_batches:
                        epoch, position = epoch + 1, 0
                    if config.save_steps and step % config.save_steps == 0:
                        checkpoint()
                    if stop:
                        checkpoint()
                        logger.close()
                        where = (f"; checkpoint at step {step} in {config.output_dir}"
                                 if config.output_dir and main_rank else "")
                        raise Interrupted(f"stopped at step {step}{where}: rerun with --resume",
                                          stop["signal"])
                    if position == 0:
                        break
        except KeyboardInterrupt:
            # A second Ctrl-C: the step in flight is incomplete, so nothing is written.
            logger.close()
            raise Interrupted(f"stopped during step {step + 1} without a checkpoint; the last "
                              "one written stays: rerun with --resume") from None
    result.train_seconds = time.perf_counter() - started
    checkpoint()
    logger.close()
    result.steps = step
    result.final_loss = result.losses[-1] if result.losses else math.nan
    return result
