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
from cpuft.metrics import Ticker
from cpuft.runtime import start
from cpuft.speedplan.speed_plan import SpeedPlan
from cpuft.topology import read_topology

INDEX_BYTES = 8
"""A sparse gradient row's index (int64)."""


def gradient_bytes(model: nn.Module, plan: SpeedPlan, compression: str) -> tuple[float, float]:
    """(bytes of dense gradients a step all-reduces, bytes a sparse row sends). DDP reduces
    gradients in the weights' type (bf16 with bf16 weights) unless compressed to bf16."""
    half = compression == "bf16" or (plan.precision == "bf16" and plan.on("bf16_weights"))
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
    lengths = getattr(getattr(run.source, "data", None), "lengths", None) or []
    samples = o.batch_size * o.grad_accum
    return {
        "recipe": run.cfg.model.recipe,
        "model": run.task.describe().get("model"),
        "seconds_per_step": seconds_per_step,
        "samples_per_step": samples,
        "tokens_per_sample": tokens_per_step / samples,
        "data_tokens_per_sample": sum(lengths) / len(lengths) if lengths else 0.0,
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


def _first(batch: Batch, samples: int) -> Batch:
    return {k: v[:samples] if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def calibrate(cfg: TrainConfig, sizes: list[int], steps: int = 12) -> dict[str, Any]:
    """Time ``steps`` steps of ``cfg``'s job on this node at each batch size of ``sizes`` (the
    largest is ``cfg``'s batch), in turns, after a warm-up: the first rows of the same batches.
    The forecast inputs with ``step_seconds_by_batch``: each size's mean step, as a run's varied
    lengths (and the new shapes they bring) make it."""
    run = build_run(cfg, start(cfg).plan)
    step = run.train_step()
    batch_size = cfg.optimization.batch_size
    sizes = sorted({min(max(1, s), batch_size) for s in [*sizes, batch_size]})
    warm = 2
    timed: dict[int, list[float]] = {s: [] for s in sizes}
    tokens = []
    ticker = Ticker("calibrating", steps + warm)
    for i, batch in zip(range(steps + warm), run.source.iterate(0), strict=False):
        for size in sizes if i % 2 else sizes[::-1]:  # in turns: drift weighs on all alike
            started = time.perf_counter()
            stats = step(_first(batch, size))
            if i >= warm:
                timed[size].append(time.perf_counter() - started)
                if size == batch_size:
                    tokens.append(stats.tokens)
        ticker.advance()
    if not tokens:
        raise CpuftError("--calibrate: the data gave too few batches to time")
    means = {s: sum(t) / len(t) for s, t in timed.items()}
    inputs = forecast_inputs(run, seconds_per_step=means[batch_size],
                             tokens_per_step=sum(tokens) / len(tokens),
                             comm_wait_fraction=0.0, nodes=1)
    return {**inputs, "samples_per_step": batch_size,
            "tokens_per_sample": sum(tokens) / len(tokens) / batch_size,
            "step_seconds_by_batch": {str(s): t for s, t in means.items()},
            "steps_timed": len(tokens)}
