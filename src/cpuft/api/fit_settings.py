"""``cpuft.fit``'s settings as typed keyword arguments: ``cpuft train``'s flags that a loop of
your own can use, so that an editor completes them and a type checker checks them. Each means
what its flag's ``cpuft train --help`` says; a test keeps this list and the config's settings
the same."""

from __future__ import annotations

import os
from typing import TypedDict

from cpuft.config.sections import (
    Allocator,
    Attention,
    Backend,
    CompileMode,
    GradCompression,
    LrSchedule,
    Precision,
    ReportTo,
    Resume,
)


class FitSettings(TypedDict, total=False):
    """The keyword arguments of ``cpuft.fit`` after the model, the data and the loss."""

    # optimization
    epochs: float
    max_steps: int
    grad_accum: int
    lr: float
    warmup_ratio: float
    warmup_steps: int
    lr_schedule: LrSchedule
    weight_decay: float
    max_grad_norm: float
    seed: int
    # evaluation (with evaluate=)
    eval_steps: int
    load_best_model_at_end: bool
    metric_for_best_model: str
    # speed-ups
    precision: Precision
    fused_optimizer: bool
    compile: CompileMode
    attention: Attention
    fast_dropout: bool
    sparse_embeddings: bool
    embedding_rows: bool
    first_token_layer: bool
    counted_logits: bool
    fused_gelu: bool
    relative_span: bool
    dynamic_conv: bool
    channels_last: bool
    bf16_weights: bool
    threads: int
    pin_cores: bool
    allocator: Allocator
    # distributed (under cpuft launch)
    backend: Backend
    bucket_cap_mb: float
    grad_compression: GradCompression
    grad_sync: bool
    comm_timeout: float
    # output
    output_dir: str | os.PathLike[str]
    overwrite: bool
    resume: bool | Resume
    save_steps: int
    save_total_limit: int
    save_every: str
    log_steps: int
    progress: bool
    report_to: ReportTo


