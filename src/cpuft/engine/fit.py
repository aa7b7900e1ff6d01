"""``fit``: the training loop for any ``nn.Module``, with checkpoints, exact resume, metrics,
signals and DDP. It knows nothing of tasks or model libraries: a model either returns an object
with ``.loss`` (Hugging Face models given ``labels``) or the caller passes
``loss_fn(model, batch)``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, get_args

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from cpuft.config.sections import LrSchedule
from cpuft.distributed.group import DistContext
from cpuft.engine.checkpoint import (
    KEEP,
    PREFIX,
    load_checkpoint,
    load_model_state,
    save_checkpoint,
    trained_state,
)
from cpuft.engine.signals import Interrupted, stop_flag
from cpuft.engine.step import Batch, LossFn, StepStats, TrainStep
from cpuft.engine.weights import WeightHolder, WeightsFactory
from cpuft.errors import CpuftError
from cpuft.log import get_logger
from cpuft.metrics import MetricLogger
from cpuft.optim import build_optimizer

LOG = get_logger(__name__)
Evaluate = Callable[[], dict[str, float]]
"""The model's scores on held-out data now (the engine puts it in eval mode and back)."""


class BatchSource(Protocol):
    """Gives each epoch's batches in a fixed order, from any position (for exact resume)."""

    def num_batches(self, epoch: int) -> int: ...

    def iterate(self, epoch: int, start: int = 0) -> Iterator[Batch]: ...


class LossNotFinite(CpuftError):
    """The loss became NaN or infinite; the caller says which of its settings to change."""


@dataclass(kw_only=True, slots=True)
class FitConfig:
    """How ``fit`` trains."""

    total_steps: int
    """Optimizer steps to reach (counting steps done before a resume)."""
    lr: float = 5e-5
    warmup_steps: int = 0
    lr_schedule: str = "linear"
    """A schedule of transformers.get_scheduler: 'linear', 'cosine', 'constant',
    'constant_with_warmup', 'polynomial', 'cosine_with_restarts' or 'inverse_sqrt'."""
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    grad_accum: int = 1
    precision: str | None = "fp32"
    """'bf16' (autocast) or 'fp32'."""
    weights: WeightsFactory | None = None
    """Holds the weights in another dtype than the optimizer's for the loop (bf16 weights with
    fp32 masters); None trains the model's own parameters."""
    fused_optimizer: bool = True
    lazy_rows: bool = False
    """Step sparse gradients (a word embedding's rows) lazily: the rows used alone, not AdamW's
    step on the whole table (cpuft.optim.AdamW)."""
    compile: bool = False
    output_dir: Path | None = None
    """Where checkpoints go; None writes none."""
    save_steps: int = 0
    """Checkpoint every N steps; the last step is always saved when output_dir is set."""
    save_total_limit: int = 0
    """Keep the newest N checkpoints (0: the newest two), and the best one besides."""
    eval_steps: int = 0
    """Evaluate every N steps and at the last (0: never while training); needs ``evaluate``."""
    best_metric: str = ""
    """Track the best evaluation by this score (a key of ``evaluate``'s result): its step is
    checkpointed, kept, and loaded into the model at the end. '': no tracking."""
    greater_is_better: bool = True
    """Whether a higher ``best_metric`` is better (accuracy), or a lower one (loss)."""
    save_seconds: float = 0.0
    """Also checkpoint once this much time has passed since the last checkpoint (0: never by
    time): what a lost node can cost at most."""
    checkpoint_every_node: bool = False
    """The first rank of every node writes its own copy of each checkpoint (distributed runs
    whose nodes do not share output_dir), not rank 0 alone."""
    after_stop: str = "rerun with --resume"
    """What to do after a stop by a signal, for the line that says where the run stopped."""
    progress_file: str = ""
    """A file in output_dir where the first rank of every node notes each step reached and the
    world size ('': none): what a restarted elastic job had trained before it stopped."""
    log_steps: int = 10
    resume_from: Path | None = None
    bucket_cap_mb: float = 0.0
    """DDP gradient bucket size in MB (distributed runs); 0 chooses by gradient type
    (cpuft.distributed.group.bucket_cap_for)."""
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
    """How the held weights' masters were stepped (WeightHolder.kernel_note); '' without."""
    evaluations: list[dict[str, float]] = field(default_factory=list)
    """This run's evaluations while training: step, epoch and eval_<score> each."""
    best: dict[str, Any] | None = None
    """The best evaluation's step, value and metric (with ``best_metric``), None without."""

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.train_seconds if self.train_seconds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.train_seconds if self.train_seconds else 0.0


def fit(
    model: nn.Module,
    source: BatchSource,
    config: FitConfig,
    *,
    loss_fn: LossFn | None = None,
    logger: MetricLogger | None = None,
    dist: DistContext | None = None,
    evaluate: Evaluate | None = None,
) -> FitResult:
    """Train ``model`` for ``config.total_steps`` optimizer steps on ``source``'s batches.

    With ``dist`` the model is wrapped in DDP; ``source`` must give each rank its share.
    Rank 0 alone writes checkpoints; logged loss and speed are reduced over all ranks. With
    ``config.eval_steps``, every rank calls ``evaluate`` at the same steps; with
    ``config.best_metric``, the model ends as it was at its best evaluation.
    """
    if (config.eval_steps or config.best_metric) and evaluate is None:
        raise CpuftError("internal: eval_steps and best_metric need evaluate")
    logger = logger or MetricLogger()
    state = load_checkpoint(config.resume_from) if config.resume_from is not None else None
    if state is not None:
        load_model_state(model, state["model"])  # while fp32, so that masters start exact
    weights = (config.weights(model, config.fused_optimizer) if config.weights is not None
               else None)
    loop = _Loop(model, source, config, loss_fn, logger, dist, weights, evaluate)
    try:
        result = loop.run(state)
    finally:
        if weights is not None:
            weights.restore()
    if result.best is not None and loop.writes_checkpoints and result.best["step"] != result.steps:
        _load_best(model, config, result.best)
    return result


def _load_best(model: nn.Module, config: FitConfig, best: dict[str, float]) -> None:
    assert config.output_dir is not None
    step = int(best["step"])
    load_model_state(model, load_checkpoint(config.output_dir / f"{PREFIX}{step}")["model"])
    LOG.info(f"the model is its best evaluation's, at step {step}: {config.best_metric} "
             f"{best['value']:.4g}")


def _scheduler(optimizer: torch.optim.Optimizer, config: FitConfig) -> LRScheduler:
    from transformers import SchedulerType, get_scheduler

    if config.lr_schedule not in SCHEDULES:
        raise CpuftError(f"unknown lr schedule {config.lr_schedule!r}: use one of "
                         f"{', '.join(SCHEDULES)}")
    scheduler: LRScheduler = get_scheduler(
        SchedulerType(config.lr_schedule), optimizer, num_warmup_steps=config.warmup_steps,
        num_training_steps=config.total_steps)
    return scheduler


SCHEDULES = get_args(LrSchedule)
"""transformers.get_scheduler's schedules that need nothing but the warm-up and the steps."""


class _Loop:
    """The state of one ``fit``: where it is (step, epoch, position in the epoch) and what it
    has measured; ``run`` reads top to bottom."""

    def __init__(self, model: nn.Module, source: BatchSource, config: FitConfig,
                 loss_fn: LossFn | None, logger: MetricLogger, dist: DistContext | None,
                 weights: WeightHolder | None, evaluate: Evaluate | None) -> None:
        self.model, self.source, self.config = model, source, config
        self.logger, self.dist, self.weights = logger, dist, weights
        self.evaluate = evaluate
        self.optimizer = build_optimizer(
            model, lr=config.lr, weight_decay=config.weight_decay, fused=config.fused_optimizer,
            stand_in=weights.master if weights is not None else None, lazy_rows=config.lazy_rows)
        self.scheduler = _scheduler(self.optimizer, config)
        forward_model: nn.Module = model
        if dist is not None:
            from cpuft.distributed.group import wrap_model

            forward_model = wrap_model(model, dist, bucket_cap_mb=config.bucket_cap_mb,
                                       grad_compression=config.grad_compression,
                                       grad_sync=config.grad_sync)
            if weights is not None:  # DDP gave every rank rank 0's bf16 weights; now the masters
                dist.broadcast_from_main(weights.masters)
        if config.compile:
            forward_model = torch.compile(forward_model)  # type: ignore[assignment]
        self.train_step = TrainStep(model, self.optimizer, precision=config.precision,
                                    weights=weights, max_grad_norm=config.max_grad_norm,
                                    loss_fn=loss_fn, forward_model=forward_model, dist=dist)
        self.step = self.epoch = self.position = 0
        self.n_batches = 1
        """Batches in the epoch under way."""
        self.saved_step = 0
        self.saved_at = time.perf_counter()
        self.eval_seconds = 0.0
        self.warned_not_finite = False
        self.step_mark = (time.perf_counter(), 0.0)
        """When the last step ended (the loop started, before the first), and the evaluation
        seconds by then."""
        self.is_main = dist is None or dist.info.is_main
        first_of_node = dist is None or dist.info.local_rank == 0
        self.writes_checkpoints = self.is_main or (config.checkpoint_every_node and first_of_node)
        self.notes_progress = bool(config.progress_file and config.output_dir and first_of_node)
        self.result = FitResult(steps=0, samples=0, tokens=0, train_seconds=0.0,
                                final_loss=math.nan,
                                optimizer_kernel=weights.kernel_note if weights else "")

    def run(self, state: dict[str, Any] | None) -> FitResult:
        config, result = self.config, self.result
        if state is not None:
            self._restore(state)
        self.model.train()
        self.logger.start(config.total_steps, self.step)
        self.window = {"samples": 0, "tokens": 0, "loss": 0.0, "steps": 0,
                       "start": time.perf_counter()}
        started = self.started = time.perf_counter()
        self.step_mark = (started, self.eval_seconds)
        with stop_flag() as stop:
            try:
                while self.step < config.total_steps:
                    self._epoch(stop)
            except KeyboardInterrupt:
                # A second Ctrl-C: the step in flight is incomplete, so nothing is written.
                self.logger.close()
                raise Interrupted(f"stopped during step {self.step + 1} without a checkpoint; "
                                  "the last one written stays: rerun with --resume") from None
        result.train_seconds = time.perf_counter() - started - self.eval_seconds
        self._checkpoint()
        self.logger.close()
        result.steps = self.step
        result.final_loss = result.losses[-1] if result.losses else math.nan
        return result

    def _restore(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.result.best = self._kept_best(state.get("best"))
        self.saved_step = self.step  # a resumed run's own checkpoint is already on disk
        self.result.steps = self.step
        if self.step >= self.config.total_steps:
            raise CpuftError(f"the checkpoint is at step {self.step}, already at --max-steps "
                             f"{self.config.total_steps}")

    def _kept_best(self, best: dict[str, Any] | None) -> dict[str, Any] | None:
        """The checkpoint's best evaluation, where this run tracks the best by the same
        score: another score's values would be compared with this one's."""
        metric = self.config.best_metric
        if best is None or not metric:
            return None
        if best.get("metric") != metric:
            LOG.info(f"the checkpoint's best model was chosen by "
                     f"{best.get('metric') or 'a score it does not name'}, not {metric}: the "
                     "best is tracked afresh")
            return None
        return best

    def _epoch(self, stop: dict[str, int]) -> None:
        """The steps of one epoch, from the current position; returns at its end, or at the last
        step."""
        config = self.config
        n_batches = self.source.num_batches(self.epoch)
        if n_batches == 0:
            raise CpuftError("the training data gives no batches")
        batches = self.source.iterate(self.epoch, self.position)
        self.n_batches = n_batches
        while self.position < n_batches and self.step < config.total_steps:
            group = min(config.grad_accum, n_batches - self.position)
            stats = self.train_step(*[next(batches) for _ in range(group)])
            self.scheduler.step()
            self.position += group
            self.step += 1
            self._record(stats)
            if config.eval_steps and (self.step % config.eval_steps == 0
                                      or self.step == config.total_steps):
                self._evaluate()
            if self.notes_progress:
                self._note_progress()
            at_end = self.position >= n_batches
            if at_end:
                self.epoch, self.position = self.epoch + 1, 0
            if config.save_steps and self.step % config.save_steps == 0:
                self._checkpoint()
            signum = stop.get("signal", 0)
            due = bool(config.save_seconds) and (
                time.perf_counter() - self.saved_at >= config.save_seconds)
            if self.dist is not None:
                # A signal reaches each rank at its own moment: the ranks stop at one step, so
                # that rank 0 is not left waiting in an all-reduce for one that already left.
                # Only the reduced value decides: a signal that lands after the all-reduce
                # waits for the next step on every rank alike. Clocks differ as well: a
                # checkpoint one rank finds due is due on all.
                reduced = self.dist.all_reduce_max([float(signum), float(due)])
                signum, due = int(reduced[0]), bool(reduced[1])
            if due:
                self._checkpoint()
            # Stopped in the last step, the run is done: it ends as any finished run does.
            if signum and self.step < config.total_steps:
                self._checkpoint()
                self.logger.close()
                where = (f"; checkpoint at step {self.step} in {config.output_dir}"
                         if config.output_dir and self.is_main else "")
                who = "" if stop.get("signal") else "another rank was told to stop: "
                raise Interrupted(f"{who}stopped at step {self.step}{where}: "
                                  f"{config.after_stop}", signum)
            if at_end:
                return

    def _record(self, stats: StepStats) -> None:
        """Count the step, log it, and every ``log_steps`` write it reduced over the ranks.

        A step's time runs from the end of the one before (from the loop's start for the
        first), evaluations left out: the loop's own work between two steps (logging,
        checkpoints) counts, as it does in the window HF Trainer's step callbacks mark."""
        result, window, dist = self.result, self.window, self.dist
        if not math.isfinite(stats.loss):
            raise LossNotFinite(f"loss became {stats.loss} at step {self.step}")
        result.samples += stats.samples
        result.tokens += stats.tokens
        result.comm_wait_seconds += stats.comm_wait
        window["samples"] += stats.samples
        window["tokens"] += stats.tokens
        window["loss"] += stats.loss
        window["steps"] += 1
        result.losses.append(stats.loss)
        now = time.perf_counter()
        since, evaluated = self.step_mark
        result.step_seconds.append(now - since - (self.eval_seconds - evaluated))
        self.step_mark = (now, self.eval_seconds)
        result.step_tokens.append(stats.tokens)
        elapsed = max(now - window["start"], 1e-9)
        # Between reductions, the job's pace from this rank's: every rank takes an equal share
        # of each global batch.
        world = dist.info.world_size if dist is not None else 1
        record = {
            "step": self.step,
            # Where in the data the step ended: 1.5 is half-way through the second epoch.
            "epoch": round(self.epoch + self.position / self.n_batches, 4),
            "loss": stats.loss,
            "lr": self.scheduler.get_last_lr()[0],
            **({"grad_norm": stats.grad_norm} if stats.grad_norm is not None else {}),
            "samples_per_second": window["samples"] * world / elapsed,
            "tokens_per_second": window["tokens"] * world / elapsed,
            "seconds": now - self.started,
        }
        self.logger.step(record)
        if self.step % self.config.log_steps == 0 or self.step == self.config.total_steps:
            # The logged loss is the mean over the steps since the last record, not the last
            # step's alone, which swings with its batch.
            mean_loss = float(window["loss"]) / max(1, int(window["steps"]))
            record["loss"] = mean_loss
            if dist is not None:
                samples_sum, tokens_sum, loss_sum = dist.all_reduce_sum(
                    [window["samples"], window["tokens"], mean_loss])
                record |= {"loss": loss_sum / dist.info.world_size,
                           "samples_per_second": samples_sum / elapsed,
                           "tokens_per_second": tokens_sum / elapsed}
            self.logger.log(record)
            self.window = {"samples": 0, "tokens": 0, "loss": 0.0, "steps": 0, "start": now}

    def _evaluate(self) -> None:
        """Score the model now, record it, and checkpoint it if it is the best so far."""
        assert self.evaluate is not None
        config, result = self.config, self.result
        started = time.perf_counter()
        self.model.eval()
        try:
            scores = self.evaluate()
        finally:
            self.model.train()
        if self.dist is not None:
            # Rank 0's scores on every rank: ranks that judged apart could disagree on which
            # evaluation is the best, and only some of them would enter its checkpoint.
            values = torch.tensor([scores[name] for name in sorted(scores)], dtype=torch.float64)
            self.dist.broadcast_from_main([values])
            scores = dict(zip(sorted(scores), values.tolist(), strict=True))
        # Training speed leaves evaluation out: the window's clock and the run's total.
        spent = time.perf_counter() - started
        self.window["start"] += spent
        self.eval_seconds += spent
        record = {"step": self.step,
                  "epoch": round(self.epoch + self.position / self.n_batches, 4),
                  **{f"eval_{name}": value for name, value in scores.items()}}
        result.evaluations.append(record)
        self.logger.evaluation(record)
        if not config.best_metric:
            return
        if config.best_metric not in scores:
            raise CpuftError(f"--metric-for-best-model {config.best_metric}: the evaluation "
                             f"gives {', '.join(sorted(scores))}")
        value, best = scores[config.best_metric], result.best
        if not math.isfinite(value):
            # Never the best: nothing compares above NaN, so it would stay the best for good.
            if not self.warned_not_finite:
                LOG.warning(f"evaluation at step {self.step}: {config.best_metric} is {value}; "
                            "an evaluation that is not finite is never the best model")
                self.warned_not_finite = True
            return
        if best is None or (value > best["value"] if config.greater_is_better
                            else value < best["value"]):
            result.best = {"step": self.step, "value": value, "metric": config.best_metric}
            self._checkpoint()

    def _note_progress(self) -> None:
        assert self.config.output_dir is not None
        world = self.dist.info.world_size if self.dist is not None else 1
        path = self.config.output_dir / self.config.progress_file
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"step": self.step, "world_size": world}))
        os.replace(tmp, path)

    def _checkpoint(self) -> None:
        """Write the state after this step once, however many reasons there are to save it."""
        config = self.config
        if config.output_dir is None or self.step == self.saved_step:
            return
        self.saved_step, self.saved_at = self.step, time.perf_counter()
        rng = torch.get_rng_state()
        if config.checkpoint_every_node and self.dist is not None:
            self.dist.broadcast_from_main([rng])  # every copy the same: rank 0's
        if not self.writes_checkpoints:
            return
        weights = self.weights
        model_state = weights.state_dict() if weights is not None else self.model.state_dict()
        best = self.result.best
        save_checkpoint(config.output_dir, self.step, {
            "model": trained_state(self.model, model_state),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng,
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "best": best,
        }, keep=config.save_total_limit or KEEP, protect=int(best["step"]) if best else 0)
