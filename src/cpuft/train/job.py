"""The ``cpuft train`` job: check everything, load, fine-tune, evaluate, save, summarise."""

from __future__ import annotations

import inspect
import json
import math
import shutil
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from cpuft import compile_cache
from cpuft.config import TrainConfig
from cpuft.data.batching import Collator, TokenBatches
from cpuft.data.prepare import encode, load_labelled
from cpuft.dist.group import DistContext
from cpuft.errors import CpuftError
from cpuft.metrics import JsonlSink, MetricLogger, MetricSink, ProgressSink
from cpuft.metrics.pace import steady_rate, steady_seconds
from cpuft.speedups import SpeedPlan, choose_compile
from cpuft.train.checkpoint import latest_checkpoint
from cpuft.train.evaluate import evaluate
from cpuft.train.loop import FitConfig, fit
from cpuft.train.model_io import (
    apply_model_speedups,
    load_classifier,
    load_tokenizer,
    resolve_model,
    sequence_length_limit,
)
from cpuft.train.precision import resolve_precision
from cpuft.train.runtime import versions

RUN_MARKER = "cpuft_run.json"
RESUME_KEEPS = ("model", "task", "data_dir", "train_file", "validation_file", "text_columns",
                "label_column", "validation_split", "max_seq_length", "batch_size", "grad_accum",
                "lr", "warmup_ratio", "lr_schedule", "weight_decay", "max_grad_norm", "seed",
                "group_by_length")
"""Settings a resumed run must share with the run it continues: with any other, its remaining
steps would see other data or other updates. Steps, epochs, saving, logging and the speed
options may change."""


def check_output_dir(cfg: TrainConfig) -> tuple[Path, Path | None]:
    """The output dir and the checkpoint to resume from (if --resume); changes nothing.

    Clearing waits for ``clear_output_dir``, after the data and the model have loaded, so a run
    that fails its checks leaves the run already there as it was.
    """
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():
        raise CpuftError(f"--output-dir {out} is a file")
    holds_run = (out / RUN_MARKER).is_file()
    if cfg.resume:
        ckpt = latest_checkpoint(out) if holds_run else None
        if ckpt is None:
            raise CpuftError(f"--resume: no checkpoint in {out}")
        return out, ckpt
    if out.is_dir() and any(out.iterdir()):
        if not holds_run:
            raise CpuftError(f"--output-dir {out} is not empty and holds no cpuft run: use another")
        if not cfg.overwrite:
            raise CpuftError(
                f"--output-dir {out} holds another run: pass --overwrite to replace it, "
                "or --resume to continue it"
            )
    return out, None


def check_resume_settings(out: Path, cfg: TrainConfig) -> None:
    """Refuse to resume the run in ``out`` with settings that would make it another run."""
    try:
        saved = json.loads((out / RUN_MARKER).read_text())["config"]
    except (OSError, ValueError, KeyError):
        raise CpuftError(f"--resume: {out / RUN_MARKER} cannot be read") from None
    now = json.loads(json.dumps(asdict(cfg)))
    changed = [key for key in RESUME_KEEPS if key in saved and saved[key] != now[key]]
    if changed:
        def shown(value: Any) -> str:
            return ",".join(map(str, value)) if isinstance(value, list) else str(value)

        diffs = "; ".join(f"--{key.replace('_', '-')} was {shown(saved[key]) or '(unset)'}, now "
                          f"{shown(now[key]) or '(unset)'}" for key in changed)
        raise CpuftError(f"--resume: the run in {out} had other settings ({diffs}): resume with "
                         "its settings, or start a new run in another --output-dir")


def clear_output_dir(out: Path, resume_from: Path | None) -> None:
    """Empty the output dir for a new run (``check_output_dir`` allowed it); keep it to resume."""
    if resume_from is None and out.is_dir():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def _trim_metrics(path: Path, last_step: int) -> None:
    """Drop records after the checkpoint being resumed, so steps are not logged twice."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= last_step]
    path.write_text("".join(line + "\n" for line in kept))


def decide_compile(plan: SpeedPlan, cfg: TrainConfig, samples: int) -> None:
    """Compile only if a measurement on this machine says it pays back over ``samples``."""
    m = compile_cache.lookup(compile_cache.key(
        cpu=plan.cpu, model=cfg.model, precision=plan.precision,
        max_seq_length=cfg.max_seq_length, torch_version=torch.__version__,
    ))
    plan.compile, plan.compile_reason = choose_compile(
        "auto",
        estimated_eager_seconds=m.eager_seconds_per_sample * samples if m else None,
        measured_speedup=m.speedup if m else None,
        compile_seconds=m.compile_seconds if m else None,
    )
    if m is None:
        plan.compile_reason += " (measure it: cpuft bench --configs cpuft,cpuft-compile)"


def run_train(cfg: TrainConfig, plan: SpeedPlan, say: Callable[[str], None] = print,
              dist: DistContext | None = None) -> dict[str, Any]:
    """Run the whole job and return the summary (also written to summary.json by rank 0)."""
    main = dist is None or dist.info.is_main
    if main:
        out, resume_from = check_output_dir(cfg)
    data = load_labelled(cfg)
    model_name = resolve_model(cfg.model)
    tokenizer = load_tokenizer(model_name)
    torch.manual_seed(cfg.seed)
    model = load_classifier(model_name, data.label_map)
    apply_model_speedups(model, plan)
    if tokenizer.pad_token_id is None:
        raise CpuftError(f"--model {cfg.model}: the tokenizer has no padding token")
    limit = sequence_length_limit(model.config, tokenizer)
    if limit is not None and cfg.max_seq_length > limit:
        if main:
            say(f"--max-seq-length {cfg.max_seq_length} is longer than this model takes: "
                f"using {limit}")
        cfg = replace(cfg, max_seq_length=limit)
    if main:
        if resume_from is not None:
            check_resume_settings(out, cfg)
        clear_output_dir(out, resume_from)
    if dist is not None:
        dist.barrier()  # rank 0 has checked, cleared or found the output dir
        if not main:
            out = Path(cfg.output_dir)
            resume_from = latest_checkpoint(out) if cfg.resume else None
    encoded = {
        split: encode(data.texts[split], data.labels[split], tokenizer, cfg.max_seq_length)
        for split in data.texts
    }
    if "token_type_ids" not in inspect.signature(model.forward).parameters:
        for e in encoded.values():
            e.token_type_ids = None
    collator = Collator(
        pad_id=tokenizer.pad_token_id,
        fixed_length=0 if plan.dynamic_padding else cfg.max_seq_length,
    )
    rank, world = (dist.info.rank, dist.info.world_size) if dist else (0, 1)
    source = TokenBatches(encoded["train"], collator, cfg.batch_size, cfg.seed,
                          group_by_length=plan.group_by_length, rank=rank, world_size=world)
    steps_per_epoch = math.ceil(source.num_batches(0) / cfg.grad_accum)
    total_steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    resolve_precision(plan, cfg.precision, dist.on_every_rank if dist else None)
    if plan.compile == "auto":
        decide_compile(plan, cfg, samples=total_steps * cfg.batch_size * cfg.grad_accum)

    sinks: list[MetricSink] = []
    if main:
        (out / RUN_MARKER).write_text(json.dumps({"config": asdict(cfg)}, indent=2) + "\n")
        data.label_map.save(out / "label_map.json")
        if resume_from is not None:
            say(f"resuming from {resume_from}")
            _trim_metrics(out / "metrics.jsonl", int(resume_from.name.split("-")[-1]))
        sinks.append(JsonlSink(out / "metrics.jsonl", append=resume_from is not None))
        if cfg.progress:
            sinks.append(ProgressSink(f"{data.task}"))
        say(
            f"fine-tuning {model_name} on {data.task}: {len(encoded['train'])} samples, "
            f"{total_steps} steps of {cfg.batch_size * world * cfg.grad_accum} samples on "
            f"{world} rank(s), precision {plan.precision}, {plan.threads} threads, "
            f"allocator {plan.allocator}, compile {plan.compile}"
        )
        if dist is not None and not cfg.grad_sync:
            say("--no-grad-sync: the ranks send no gradients, so each trains apart on its own "
                "share; this run measures speed, its model is rank 0's alone")
    result = fit(
        model,
        source,
        FitConfig(
            total_steps=total_steps,
            lr=cfg.lr,
            warmup_steps=math.ceil(cfg.warmup_ratio * total_steps),
            lr_schedule=cfg.lr_schedule,
            weight_decay=cfg.weight_decay,
            max_grad_norm=cfg.max_grad_norm,
            grad_accum=cfg.grad_accum,
            precision=plan.precision,
            bf16_weights=plan.bf16_weights,
            fused_optimizer=plan.fused_optimizer,
            compile=plan.compile == "on",
            output_dir=out,
            save_steps=cfg.save_steps,
            log_steps=cfg.log_steps,
            resume_from=resume_from,
            bucket_cap_mb=cfg.bucket_cap_mb,
            grad_compression=cfg.grad_compression,
            grad_sync=cfg.grad_sync,
        ),
        logger=MetricLogger(sinks),
        dist=dist,
    )
    samples, tokens, comm_wait = float(result.samples), float(result.tokens), \
        result.comm_wait_seconds
    train_seconds, pace_seconds = result.train_seconds, steady_seconds(result.step_seconds)
    if dist is not None:
        samples, tokens, comm_wait = dist.all_reduce_sum([samples, tokens, comm_wait])
        comm_wait /= world
        # The job goes at its slowest rank's pace (ranks that do not sync can differ).
        train_seconds, pace_seconds = dist.all_reduce_max([train_seconds, pace_seconds])
    if not main:
        return {}
    evals = {
        split: evaluate(model, encoded[split], collator, batch_size=cfg.eval_batch_size,
                        precision=plan.precision, metrics=data.metrics,
                        regression=data.label_map.regression)
        for split in ("validation", "test") if split in encoded
    }
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    summary: dict[str, Any] = {
        "model": model_name,
        "task": data.task,
        "precision": plan.precision,
        "compile": plan.compile,
        "world_size": world,
        "nodes": dist.nodes if dist else 1,
        "backend": dist.backend if dist else None,
        "bucket_cap_mb": round(dist.bucket_cap_mb, 2) if dist else None,
        "grad_compression": cfg.grad_compression if dist else None,
        "grad_sync": cfg.grad_sync if dist else None,
        "train_samples": len(encoded["train"]),
        "steps": result.steps,
        "epochs": round(result.steps / steps_per_epoch, 4),
        "batch_size": cfg.batch_size,
        "grad_accum": cfg.grad_accum,
        "train_seconds": round(train_seconds, 3),
        "train_samples_per_second": round(samples / train_seconds, 3),
        "train_tokens_per_second": round(tokens / train_seconds, 1),
        # after the first tenth of the steps, as `cpuft bench` measures
        "steady_samples_per_second": round(steady_rate(
            result.step_seconds, samples / max(1, len(result.step_seconds)), pace_seconds), 3),
        "steady_tokens_per_second": round(steady_rate(
            result.step_seconds, tokens / max(1, len(result.step_seconds)), pace_seconds), 3),
        "step_time_split": {
            "seconds_per_step": round(train_seconds / max(1, len(result.step_seconds)), 5),
            "comm_wait_fraction": round(comm_wait / train_seconds, 4),
            "compute_fraction": round(1 - comm_wait / train_seconds, 4),
        },
        "final_loss": result.final_loss,
        "eval": evals["validation"],
        "test": evals.get("test"),
        "labels": data.label_map.to_json(),
        "speedups": plan.to_dict(),
        "optimizer_kernel": result.optimizer_kernel,
        "versions": versions(),
        "resumed_from": str(resume_from) if resume_from else None,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
