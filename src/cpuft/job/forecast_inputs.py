"""What ``cpuft plan`` needs from a run: its pace on this node, the bytes a step sends between
nodes, and the node itself. ``cpuft train`` writes it into summary.json; ``calibrate`` measures
it in a short run of its own, at the batch and at half of it."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from cpuft.config import TrainConfig
from cpuft.engine.step import Batch
from cpuft.errors import CpuftError
from cpuft.job.build import Run, build_run
from cpuft.metrics.pace import warmup_steps
from cpuft.plan.speed_plan import SpeedPlan
from cpuft.topology import read_topology

INDEX_BYTES = 8
"""A sparse gradient row's index (int64)."""


def gradient_bytes(model: nn.Module, plan: SpeedPlan, compression: str) -> tuple[float, float]:
    """(bytes of dense gradients a step all-reduces, bytes a sparse row sends). DDP reduces
    gradients in the weights' type (bf16 with bf16 weights) unless compressed to bf16."""
    half = compression == "bf16" or (plan.precision == "bf16" and plan.bf16_weights)
    dense, row = 0.0, 0.0
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if not p.requires_grad:
                continue
            if isinstance(module, nn.Embedding) and module.sparse:
                row = max(row, module.embedding_dim * 4 + INDEX_BYTES)
            else:
                dense += p.numel() * (2 if half else p.element_size())
    return dense, row


def forecast_inputs(run: Run, *, seconds_per_step: float, tokens_per_step: float,
                    comm_wait_fraction: float, nodes: int) -> dict[str, Any]:
    """The ``forecast_inputs`` of summary.json: one rank's step (``tokens_per_step`` of its own)
    on this node."""
    topology = read_topology()
    o = run.cfg.optimization
    dense, row = gradient_bytes(run.task.model, run.plan, run.cfg.distributed.grad_compression)
    return {
        "recipe": run.cfg.model.recipe,
        "model": run.task.describe().get("model"),
        "seconds_per_step": seconds_per_step,
        "samples_per_step": o.batch_size * o.grad_accum,
        "nodes": nodes,
        "comm_wait_fraction": comm_wait_fraction,
        "physical_cores": run.plan.threads or topology.physical_cores,
        "isa": topology.isa.class_name,
        "cpu": topology.model_name,
        "precision": run.plan.precision,
        "dense_gradient_bytes": dense,
        # at most one row a token: the rows a step touches
        "sparse_gradient_bytes": row * tokens_per_step,
    }


def _half(batch: Batch) -> Batch:
    return {k: v[: max(1, len(v) // 2)] if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()}


def calibrate(cfg: TrainConfig, plan: SpeedPlan, steps: int = 8,
              say: Any = print) -> dict[str, Any]:
    """Time ``steps`` steps of ``cfg``'s job on this node at its batch and at half of it (after
    a warm-up); the forecast inputs with ``half_batch_seconds``."""
    run = build_run(cfg, plan, say=say)
    step = run.train_step()
    warm = warmup_steps(steps + 1)
    batches = []
    for _, batch in zip(range(steps + warm), run.source.iterate(0), strict=False):
        batches.append(batch)
    timed: dict[bool, list[float]] = {False: [], True: []}
    tokens = []
    for i, batch in enumerate(batches):
        for halved in (False, True):  # in turns, so that drift weighs on both alike
            started = time.perf_counter()
            stats = step(_half(batch) if halved else batch)
            if i >= warm:
                timed[halved].append(time.perf_counter() - started)
                if not halved:
                    tokens.append(stats.tokens)
    if not timed[False]:
        raise CpuftError("--calibrate: the data gave no batch to time")
    full = sorted(timed[False])[len(timed[False]) // 2]
    half = sorted(timed[True])[len(timed[True]) // 2]
    inputs = forecast_inputs(run, seconds_per_step=full,
                             tokens_per_step=sum(tokens) / len(tokens),
                             comm_wait_fraction=0.0, nodes=1)
    return {**inputs, "samples_per_step": cfg.optimization.batch_size,
            "half_batch_seconds": half, "steps_timed": len(timed[False])}
