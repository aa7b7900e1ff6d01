"""The causal-LM benchmark models: HF Trainer (with PEFT for LoRA) against cpuft on the same
decoder, data, batches and steps, then the same evaluation of both.

The data is the default causal job's (Rotten Tomatoes verdicts): a seeded subset of exactly the
steps' samples, so that both configurations train on every one of them once.
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch

from cpuft.bench.flops import step_flops
from cpuft.bench.measure import (
    pace,
    peak_memory_mb,
    peak_memory_since_reset_mb,
    reset_peak_memory,
    run_fields,
)
from cpuft.bench.profile import profile_steps
from cpuft.bench.spec import lm_model
from cpuft.bench.trainer import (
    same_batches_trainer,
    seconds_between,
    step_times,
    trainer_args,
    trainer_best_precision,
)
from cpuft.config import TrainConfig, config_from
from cpuft.data.lm import IGNORE
from cpuft.data.prepare import Encoded
from cpuft.engine.fit import fit
from cpuft.engine.step import batch_counts
from cpuft.job.build import build_run
from cpuft.recipes.causal_lm import CausalLmRecipe, CausalLmTask
from cpuft.recipes.lm_eval import choice_accuracy, lm_loss
from cpuft.runtime import start

EVAL_BATCH = 32


def lm_run_config(spec: Any) -> TrainConfig:
    kind, path = lm_model(spec.model) or ("lora", "")
    return config_from({
        "recipe": "causal-lm", "model": path, "lora_r": 8 if kind == "lora" else 0,
        "max_train_samples": spec.steps * spec.batch_size,
        "max_eval_samples": spec.eval_samples or 256,
        "max_seq_length": spec.max_seq_length, "batch_size": spec.batch_size,
        "max_steps": spec.steps, "lr": spec.lr, "weight_decay": spec.weight_decay,
        "seed": spec.seed, "log_steps": spec.steps, "progress": False, "warmup_ratio": 0.0,
        "compile": "off",
    })


def lm_flops_per_sample(model: Any, train: Encoded) -> float:
    """The FLOPs one training sample needs, on average over ``train``.

    Every token goes through the decoder's layers forward and back (2 + 2 FLOPs a weight);
    trained weights take their gradients too (2 more). The vocabulary head is needed only
    where the next token counts in the loss. Attention adds 12 x layers x width x length^2.
    """
    cfg = model.config
    embedding = model.get_input_embeddings().weight.numel()
    head = cfg.vocab_size * cfg.hidden_size
    total = sum(p.numel() for p in model.parameters())
    body = total - embedding - (0 if getattr(cfg, "tie_word_embeddings", False) else head)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    head_trained = model.get_output_embeddings().weight.requires_grad
    body_trained = min(trained, body)
    n = len(train)
    tokens = sum(train.lengths) / n
    counted = sum(sum(1 for label in labels[1:] if label != IGNORE)
                  for labels in train.labels) / n
    layers = (4 * body + 2 * body_trained) * tokens
    logits = (6 if head_trained else 4) * head * counted
    attention = 12 * cfg.num_hidden_layers * cfg.hidden_size * sum(
        length**2 for length in train.lengths) / n
    return float(layers + logits + attention)


def train_lm_with_trainer(spec: Any, task: CausalLmTask) -> tuple[tuple[str, str], list[float],
                                                                  list[int], float]:
    """Trainer's steps on cpuft's batches, padded alike, with the best CPU flags; also the peak
    memory before training (MB)."""
    precision, reason = trainer_best_precision()
    train = task.encoded["train"]
    step_tokens: list[int] = []

    def collate(indices: list[int]) -> dict[str, torch.Tensor]:
        batch = task.collator(train, indices)
        step_tokens.append(batch_counts(batch)[1])
        return batch

    with tempfile.TemporaryDirectory() as tmp:
        args = trainer_args(tmp, precision=precision, stock=False, batch_size=spec.batch_size,
                            steps=spec.steps, lr=spec.lr, weight_decay=spec.weight_decay,
                            seed=spec.seed)
        times = step_times()
        trainer = same_batches_trainer(train.lengths, spec.batch_size, spec.seed)(
            model=task.model, args=args, train_dataset=list(range(len(train))),
            data_collator=collate, callbacks=[times])
        loading = reset_peak_memory()
        trainer.train()
    return (precision, reason), seconds_between(times.marks), step_tokens, loading


def run_lm(spec: Any) -> dict[str, Any]:
    cfg = lm_run_config(spec)
    profile: dict[str, Any] = {}
    optimizer_kernel = ""
    if spec.config == "cpuft":
        run = build_run(cfg, start(cfg).plan)
        task = run.task
        assert isinstance(task, CausalLmTask)
        loading = reset_peak_memory()
        result = fit(task.model, run.source, run.fit_config())
        precision, reason = str(run.plan.precision), run.plan.precision_reason
        step_seconds, step_tokens = result.step_seconds, result.step_tokens
        optimizer_kernel = result.optimizer_kernel
    else:
        task = CausalLmRecipe().load(cfg)
        (precision, reason), step_seconds, step_tokens, loading = \
            train_lm_with_trainer(spec, task)
    train_peak = peak_memory_since_reset_mb()
    validation = task.encoded["validation"]
    scores = lm_loss(task.model, validation, task.collator, batch_size=EVAL_BATCH,
                     precision=precision)
    accuracy = float("nan")
    if "validation" in task.choices:
        candidates, references, n = task.choices["validation"]
        accuracy = choice_accuracy(task.model, candidates, references, n, task.collator,
                                   batch_size=EVAL_BATCH, precision=precision)
    if spec.config == "cpuft" and spec.profile_steps:
        # After the evaluation: these steps change the weights.
        profile = profile_steps(run.train_step(), run.source.iterate(0), spec.profile_steps)
    return {
        **run_fields(spec, precision, reason, optimizer_kernel),
        **pace(step_seconds, step_tokens, spec.batch_size),
        "peak_memory_mb": max(loading, peak_memory_mb()),
        "train_peak_memory_mb": train_peak,
        "accuracy": accuracy,
        "eval_loss": scores["loss"],
        "eval_perplexity": scores["perplexity"],
        "flops_per_sample": lm_flops_per_sample(task.model, task.encoded["train"]),
        **step_flops(task.model, task.collator(task.encoded["train"], list(range(
            min(spec.batch_size, len(task.encoded["train"]))))), precision),
        "profile": profile,
    }
