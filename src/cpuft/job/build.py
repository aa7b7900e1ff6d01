"""Where a run is put together, for ``cpuft train`` and every benchmark alike: the recipe loads
the task, the plan's patches go on the model, the batches are cut for this rank, and what the
plan left open (precision, compile) is settled."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from cpuft.config import TrainConfig
from cpuft.config.sections import LOWER_IS_BETTER
from cpuft.distributed.group import DistContext
from cpuft.durations import parse_duration
from cpuft.engine.fit import BatchSource, FitConfig
from cpuft.engine.step import TrainStep
from cpuft.errors import CpuftError
from cpuft.launch.commands import ELASTIC_ENV, ELASTIC_SAVE_EVERY
from cpuft.recipes import get_recipe
from cpuft.recipes.base import Recipe, Task
from cpuft.speedplan.resolve import settle_compile
from cpuft.speedplan.speed_plan import SpeedPlan
from cpuft.speedups.bf16_weights import weights_for
from cpuft.speedups.registry import apply_speedups


def save_seconds(save_every: str, elastic_nodes: str) -> float:
    """Seconds between checkpoints by time: --save-every's, else an elastic job's default."""
    every = save_every or (ELASTIC_SAVE_EVERY if elastic_nodes else "")
    return parse_duration(every, "--save-every") if every else 0.0


def best_metric(cfg: TrainConfig, default: str) -> tuple[str, bool]:
    """The score that picks the best model (--metric-for-best-model without HF's eval_
    prefix, else the recipe's ``default``), and whether greater is better; ('', True) where
    the run keeps its last model."""
    if not cfg.evaluation.load_best_model_at_end:
        return "", True
    name = cfg.evaluation.metric_for_best_model.removeprefix("eval_") or default
    return name, not name.endswith(LOWER_IS_BETTER)


def fit_config(cfg: TrainConfig, plan: SpeedPlan, total_steps: int,
               output_dir: Path | None = None, resume_from: Path | None = None,
               default_metric: str = "loss") -> FitConfig:
    """The engine's settings for a run of ``total_steps`` with these settings and this plan;
    ``default_metric`` picks the best model where --metric-for-best-model names none."""
    o, d = cfg.optimization, cfg.distributed
    metric, greater_is_better = best_metric(cfg, default_metric)
    return FitConfig(
        total_steps=total_steps,
        lr=o.lr,
        warmup_steps=o.warmup_steps or math.ceil(o.warmup_ratio * total_steps),
        lr_schedule=o.lr_schedule,
        weight_decay=o.weight_decay,
        max_grad_norm=o.max_grad_norm,
        grad_accum=o.grad_accum,
        precision=plan.precision,
        weights=weights_for(plan),
        fused_optimizer=plan.fused_optimizer,
        lazy_rows=plan.on("sparse_embeddings"),
        compile=plan.compile == "on",
        output_dir=output_dir,
        save_steps=cfg.output.save_steps,
        save_total_limit=cfg.output.save_total_limit,
        eval_steps=cfg.evaluation.eval_steps,
        best_metric=metric,
        greater_is_better=greater_is_better,
        save_seconds=save_seconds(cfg.output.save_every, os.environ.get(ELASTIC_ENV, "")),
        log_steps=cfg.output.log_steps,
        resume_from=resume_from,
        bucket_cap_mb=d.bucket_cap_mb,
        grad_compression=d.grad_compression,
        grad_sync=d.grad_sync,
    )


@dataclass(frozen=True)
class Run:
    """A task with its settled plan: everything ``fit`` needs but where to write."""

    cfg: TrainConfig
    plan: SpeedPlan
    task: Task
    source: BatchSource
    world_size: int
    steps_per_epoch: int
    total_steps: int

    def fit_config(self, output_dir: Path | None = None,
                   resume_from: Path | None = None) -> FitConfig:
        return fit_config(self.cfg, self.plan, self.total_steps, output_dir, resume_from,
                          self.task.best_metric)

    def train_step(self) -> TrainStep:
        """``fit``'s step on one process, for benchmarks that time steps one by one."""
        return TrainStep.standalone(self.task.model, precision=self.plan.precision,
                                    weights_factory=weights_for(self.plan),
                                    lr=self.cfg.optimization.lr,
                                    weight_decay=self.cfg.optimization.weight_decay,
                                    lazy_rows=self.plan.on("sparse_embeddings"))


def build_run(cfg: TrainConfig, plan: SpeedPlan, *, recipe: Recipe | None = None,
              dist: DistContext | None = None) -> Run:
    """Load the task of ``cfg`` and make it ready to train as ``plan`` says (``plan`` as
    ``cpuft.runtime.start`` settled it for this process, or ``Runtime.plan_for``)."""
    if plan.precision is None:
        raise CpuftError("internal: build_run needs a plan whose precision is settled")
    recipe = recipe or get_recipe(cfg.model.recipe)
    task = recipe.load(cfg)
    cfg = task.cfg
    rank, world = (dist.info.rank, dist.info.world_size) if dist else (0, 1)
    source = task.batches(plan, rank, world)  # its padding is the plan's, not a speed-up's
    padded = getattr(source, "padded_length", None)
    plan = apply_speedups(task.model, plan, example_input=lambda: next(source.iterate(0), None),
                          sequence_length=padded() if callable(padded)
                          else cfg.data.max_seq_length)
    o = cfg.optimization
    steps_per_epoch = math.ceil(source.num_batches(0) / o.grad_accum)
    if o.max_steps == 0 and not math.isfinite(o.epochs):
        raise CpuftError("--epochs must be a finite number")
    total_steps = o.max_steps or max(1, math.ceil(o.epochs * steps_per_epoch))
    plan = settle_compile(plan, model=cfg.model.model, max_seq_length=cfg.data.max_seq_length,
                          samples=total_steps * o.batch_size * o.grad_accum)
    return Run(cfg=cfg, plan=plan, task=task, source=source, world_size=world,
               steps_per_epoch=steps_per_epoch, total_steps=total_steps)
