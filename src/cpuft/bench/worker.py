"""One benchmark configuration, run in its own process: ``python -m cpuft.bench.worker SPEC``.

Speed is measured over the steps after a warm-up (the first tenth), cut the same way for all.

Prints its result as one JSON line. Each configuration gets a fresh process so that an
allocator preloaded for cpuft (or memory held by a previous run) cannot help or hurt another.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from typing import Any

import torch

from cpuft.bench.spec import RunSpec
from cpuft.bench.steal import read_ticks, steal_fraction
from cpuft.config import TrainConfig, config_from
from cpuft.data.batching import Collator, epoch_batches
from cpuft.data.prepare import Encoded
from cpuft.engine.fit import fit
from cpuft.engine.process import apply_plan, loaded_allocator
from cpuft.engine.step import batch_counts
from cpuft.job.build import build_run
from cpuft.metrics.pace import steady_seconds, warmup_steps
from cpuft.plan.probe import matmul_gflops
from cpuft.plan.resolve import settle_precision
from cpuft.plan.speed_plan import make_plan
from cpuft.recipes.classifier import ClassifierRecipe, ClassifierTask
from cpuft.recipes.classifier_eval import evaluate
from cpuft.recipes.hf_models import default_model_path, load_tokenizer
from cpuft.topology import read_topology


def trainer_best_precision() -> tuple[str, str]:
    """bf16 where native and faster: the same measured rule as cpuft's, so that neither side
    loses by a precision that is slower on this CPU."""
    plan = settle_precision(make_plan(TrainConfig(), read_topology()), "auto")
    return str(plan.precision), plan.precision_reason


def run_config(spec: RunSpec) -> TrainConfig:
    """The ``cpuft train`` settings of this run: the default job's data, the spec's sizes."""
    return config_from({
        "model": spec.model if spec.model not in ("minilm", "bert-base") else "",
        "max_seq_length": spec.max_seq_length, "batch_size": spec.batch_size,
        "max_steps": spec.steps, "lr": spec.lr, "weight_decay": spec.weight_decay,
        "seed": spec.seed, "log_steps": spec.steps, "progress": False, "warmup_ratio": 0.0,
        "compile": "on" if spec.config == "cpuft-compile" else "off",
    })


def recipe(spec: RunSpec) -> ClassifierRecipe:
    """The classifier recipe; for 'bert-base', a bert-base size model with random weights."""
    if spec.model != "bert-base":
        return ClassifierRecipe()

    def bert_base(label_map: Any) -> tuple[Any, Any]:
        from transformers import BertConfig, BertForSequenceClassification

        config = BertConfig(id2label=label_map.id2label(),  # bert-base's default sizes
                            label2id={v: k for k, v in label_map.id2label().items()})
        return BertForSequenceClassification(config), load_tokenizer(default_model_path())

    return ClassifierRecipe(build_model=bert_base)


def flops_per_sample(model: Any, mean_tokens: float) -> float:
    """Training FLOPs for one sample: 6 x non-embedding params x tokens, plus attention."""
    params = sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)
    cfg = model.config
    attention = 12 * cfg.num_hidden_layers * cfg.hidden_size * mean_tokens**2
    return float(6 * params * mean_tokens + attention)


def same_batches_trainer(lengths: list[int], spec: RunSpec) -> Any:
    """transformers' Trainer taking cpuft's length-grouped batches, in cpuft's order.

    Both samplers group by length in mega-batches of 50 batches, but each orders the epoch its
    own way, so over part of an epoch their measured steps would hold different samples: in a
    ``--quick`` run of bert-base size (10 measured steps of 8), trainer-best's held 39.6 tokens
    a sample against cpuft's 29.4. With the same batches, both configurations do the same work.
    """
    from torch.utils.data import DataLoader
    from transformers import Trainer

    batches = epoch_batches(lengths, spec.batch_size, seed=spec.seed, epoch=0)

    class SameBatches(Trainer):
        def get_train_dataloader(self) -> Any:
            loader = DataLoader(self.train_dataset,  # type: ignore[arg-type]
                                batch_sampler=batches, collate_fn=self.data_collator,
                                num_workers=0)
            return self.accelerator.prepare(loader)

    return SameBatches


def train_with_trainer(spec: RunSpec, model: Any, tokenizer: Any,
                       train: Encoded) -> tuple[tuple[str, str], list[float], list[int]]:
    """The precision with its reason, and the per-step seconds and real tokens of
    ``spec.steps`` steps with transformers' Trainer, set up as a user would."""
    from transformers import DataCollatorWithPadding, Trainer, TrainerCallback, TrainingArguments

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            if not self.marks:
                self.marks.append(time.perf_counter())

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            self.marks.append(time.perf_counter())

    stock = spec.config == "stock-2021"
    width = spec.max_seq_length
    rows = []
    for i, ids in enumerate(train.input_ids):
        pad = width - len(ids) if stock else 0
        row = {"input_ids": ids + [tokenizer.pad_token_id] * pad,
               "attention_mask": [1] * len(ids) + [0] * pad, "labels": train.labels[i]}
        if train.token_type_ids is not None:
            row["token_type_ids"] = train.token_type_ids[i] + [0] * pad
        rows.append(row)
    precision, reason = ("fp32", "2021's Trainer") if stock else trainer_best_precision()
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            use_cpu=True,
            bf16=precision == "bf16",
            # 2021's Trainer: the unfused torch AdamW, random batches padded to max_length.
            optim="adamw_torch" if stock else "adamw_torch_fused",
            train_sampling_strategy="random" if stock else "group_by_length",
            per_device_train_batch_size=spec.batch_size,
            max_steps=spec.steps,
            learning_rate=spec.lr,
            weight_decay=spec.weight_decay,
            warmup_steps=0,
            seed=spec.seed,
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        times = StepTimes()
        padder = DataCollatorWithPadding(tokenizer)
        step_tokens: list[int] = []

        def collate(features: list[dict[str, Any]]) -> Any:
            # Batches are collated in step order (no loader workers), one step each.
            batch = padder(features)
            step_tokens.append(batch_counts(batch)[1])
            return batch

        trainer_class = Trainer if stock else same_batches_trainer(train.lengths, spec)
        trainer = trainer_class(model=model, args=args, train_dataset=rows,
                                data_collator=collate, callbacks=[times])
        trainer.train()
    step_seconds = [b - a for a, b in zip(times.marks, times.marks[1:], strict=False)]
    return (precision, reason), step_seconds, step_tokens


def train_with_cpuft(spec: RunSpec) -> tuple[ClassifierTask, tuple[str, str], list[float],
                                            list[int], str]:
    """The task cpuft trained, the precision with its reason, the per-step seconds and real
    tokens, and how the optimizer stepped bf16 weights."""
    cfg = run_config(spec)
    plan = apply_plan(make_plan(cfg, read_topology()), pin_cores=True)
    run = build_run(cfg, plan, recipe=recipe(spec), say=lambda _line: None)
    result = fit(run.task.model, run.source, run.fit_config())
    assert isinstance(run.task, ClassifierTask)
    return (run.task, (str(run.plan.precision), run.plan.precision_reason), result.step_seconds,
            result.step_tokens, result.optimizer_kernel)


def run(spec: RunSpec) -> dict[str, Any]:
    if spec.config == "matmul":
        return {"bf16_gflops": matmul_gflops("bf16"), "fp32_gflops": matmul_gflops("fp32"),
                "threads": torch.get_num_threads()}
    ticks = read_ticks()
    optimizer_kernel = ""
    if spec.config.startswith("cpuft"):
        task, (precision, reason), step_seconds, step_tokens, optimizer_kernel = \
            train_with_cpuft(spec)
    else:
        task = recipe(spec).load(run_config(spec), lambda _line: None)
        (precision, reason), step_seconds, step_tokens = train_with_trainer(
            spec, task.model, task.tokenizer, task.encoded["train"])
    model, tokenizer, validation = task.model, task.tokenizer, task.encoded["validation"]
    if spec.eval_samples:
        n = spec.eval_samples
        validation = Encoded(validation.input_ids[:n], validation.labels[:n],
                             None if validation.token_type_ids is None
                             else validation.token_type_ids[:n])
    steal = steal_fraction(ticks, read_ticks())
    scores = evaluate(model, validation, Collator(pad_id=tokenizer.pad_token_id),
                      batch_size=128, precision=precision, metrics=("accuracy",),
                      regression=False)
    seconds = steady_seconds(step_seconds)
    measured = slice(warmup_steps(len(step_seconds)), len(step_seconds))
    measured_steps = measured.stop - measured.start
    samples = measured_steps * spec.batch_size
    # stock-2021's random batches hold other samples than cpuft's, so the work is counted in
    # tokens that are not padding; trainer-best's batches are cpuft's.
    tokens = sum(step_tokens[measured])
    return {
        "config": spec.config,
        "model": spec.model,
        "precision": precision,
        "precision_reason": reason,
        "optimizer_kernel": optimizer_kernel,
        "allocator": loaded_allocator(),
        "threads": torch.get_num_threads(),
        "train_seconds": seconds,
        "measured_steps": measured_steps,
        "samples_per_second": samples / seconds,
        "tokens_per_second": tokens / seconds,
        "tokens_per_sample": tokens / samples,
        "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "accuracy": scores["accuracy"],
        "flops_per_sample": flops_per_sample(model, tokens / samples),
        "step_seconds": step_seconds,
        "steal_fraction": steal,
        "torch": torch.__version__,
    }


def main() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    spec = RunSpec.from_json(sys.argv[1])
    print(json.dumps(run(spec)))


if __name__ == "__main__":
    main()
