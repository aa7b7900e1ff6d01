"""One benchmark configuration, run in its own process: ``python -m cpuft.bench.worker SPEC``.

Speed is measured over the steps after a warm-up (the first tenth), cut the same way for all.

Prints its result as one JSON line. Each configuration gets a fresh process so that an
allocator preloaded for cpuft (or memory held by a previous run) cannot help or hurt another.
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import torch

from cpuft.bench.flops import nominal_terms, step_flops
from cpuft.bench.measure import pace, peak_memory_mb, run_fields
from cpuft.bench.placement import started_as
from cpuft.bench.spec import LOOP_MODELS, VARIANTS, RunSpec, lm_model
from cpuft.bench.steal import read_ticks, shares
from cpuft.bench.trainer import (
    same_batches_trainer,
    seconds_between,
    step_times,
    trainer_args,
    trainer_best_precision,
)
from cpuft.bench.utilisation import nominal_flops
from cpuft.config import TrainConfig, config_from
from cpuft.data.batching import Collator
from cpuft.data.prepare import Encoded
from cpuft.engine.fit import fit
from cpuft.engine.step import batch_counts
from cpuft.job.build import build_run
from cpuft.log import quiet
from cpuft.recipes.classifier import ClassifierRecipe, ClassifierTask
from cpuft.recipes.classifier_eval import evaluate
from cpuft.recipes.hf_models import default_model_path, load_tokenizer
from cpuft.runtime import start
from cpuft.runtime.start import place_only
from cpuft.speedplan.probe import matmul_gflops


def run_config(spec: RunSpec) -> TrainConfig:
    """The ``cpuft train`` settings of this run: the default job's data, the spec's sizes."""
    return config_from({
        "model": spec.model if spec.model not in ("minilm", "bert-base") else "",
        "max_seq_length": spec.max_seq_length, "batch_size": spec.batch_size,
        "max_steps": spec.steps, "lr": spec.lr, "weight_decay": spec.weight_decay,
        "seed": spec.seed, "log_steps": spec.steps, "progress": False, "warmup_ratio": 0.0,
        "compile": "on" if spec.config == "cpuft-compile" else "off",
        **VARIANTS.get(spec.config, {}),
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


def train_with_trainer(spec: RunSpec, model: Any, tokenizer: Any,
                       train: Encoded) -> tuple[tuple[str, str], list[float], list[int]]:
    """The precision with its reason, and the per-step seconds and real tokens of
    ``spec.steps`` steps with transformers' Trainer, set up as a user would."""
    from transformers import DataCollatorWithPadding, Trainer

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
        args = trainer_args(tmp, precision=precision, stock=stock, batch_size=spec.batch_size,
                            steps=spec.steps, lr=spec.lr, weight_decay=spec.weight_decay,
                            seed=spec.seed, compile=spec.config == "trainer-compile")
        times = step_times()
        padder = DataCollatorWithPadding(tokenizer)
        step_tokens: list[int] = []

        def collate(features: list[dict[str, Any]]) -> Any:
            # Batches are collated in step order (no loader workers), one step each.
            batch = padder(features)
            step_tokens.append(batch_counts(batch)[1])
            return batch

        trainer_class = Trainer if stock else same_batches_trainer(train.lengths, spec.batch_size,
                                                                    spec.seed)
        trainer = trainer_class(model=model, args=args, train_dataset=rows,
                                data_collator=collate, callbacks=[times])
        trainer.train()
    step_seconds = seconds_between(times.marks)
    return (precision, reason), step_seconds, step_tokens


def train_with_cpuft(spec: RunSpec) -> tuple[ClassifierTask, tuple[str, str], list[float],
                                            list[int], str]:
    """The task cpuft trained, the precision with its reason, the per-step seconds and real
    tokens, and how the optimizer stepped bf16 weights."""
    cfg = run_config(spec)
    run = build_run(cfg, start(cfg).plan, recipe=recipe(spec))
    result = fit(run.task.model, run.source, run.fit_config())
    assert isinstance(run.task, ClassifierTask)
    return (run.task, (str(run.plan.precision), run.plan.precision_reason), result.step_seconds,
            result.step_tokens, result.optimizer_kernel)


def run(spec: RunSpec) -> dict[str, Any]:
    if spec.config == "matmul" or started_as(spec.config) == "launcher":
        place_only()  # as torch's CPU launcher would: cpuft's threads and cores
    if spec.config == "matmul":
        return {"bf16_gflops": matmul_gflops("bf16"), "fp32_gflops": matmul_gflops("fp32"),
                "threads": torch.get_num_threads()}
    ticks = read_ticks()
    if lm_model(spec.model):
        from cpuft.bench.lm import run_lm

        return {**run_lm(spec), **shares(ticks, read_ticks())}
    if spec.model in LOOP_MODELS:
        from cpuft.bench.own_loops import run_loop

        return {**run_loop(spec), **shares(ticks, read_ticks())}
    optimizer_kernel = ""
    if spec.config.startswith("cpuft"):
        task, (precision, reason), step_seconds, step_tokens, optimizer_kernel = \
            train_with_cpuft(spec)
    else:
        task = recipe(spec).load(run_config(spec))
        (precision, reason), step_seconds, step_tokens = train_with_trainer(
            spec, task.model, task.tokenizer, task.encoded["train"])
    model, tokenizer, validation = task.model, task.tokenizer, task.encoded["validation"]
    if spec.eval_samples:
        n = spec.eval_samples
        validation = Encoded(validation.input_ids[:n], validation.labels[:n],
                             None if validation.token_type_ids is None
                             else validation.token_type_ids[:n])
    during = shares(ticks, read_ticks())

    def accuracy(rows: Encoded) -> float:
        return evaluate(model, rows, Collator(pad_id=tokenizer.pad_token_id), batch_size=128,
                        precision=precision, metrics=("accuracy",), regression=False)["accuracy"]

    scores = {"accuracy": accuracy(validation)}
    if not spec.eval_samples and "test" in task.encoded:  # a full run: the held-out test too
        scores["test_accuracy"] = accuracy(task.encoded["test"])
    speed = pace(step_seconds, step_tokens, spec.batch_size)
    terms = nominal_terms(model)
    # stock-2021's random batches hold other samples than cpuft's, so the work is counted in
    # tokens that are not padding; trainer-best's batches are cpuft's.
    return {
        **run_fields(spec, precision, reason, optimizer_kernel),
        **speed,
        "peak_memory_mb": peak_memory_mb(),
        **scores,
        **terms,
        "flops_per_sample": nominal_flops(**terms, tokens=speed["tokens_per_sample"]),
        **classifier_step_flops(spec, task, precision, speed["tokens_per_sample"]),
        **during,
    }


def classifier_step_flops(spec: RunSpec, task: ClassifierTask, precision: str,
                          tokens_per_sample: float) -> dict[str, float]:
    """``step_flops`` on a batch of the run's real length: samples of ``tokens_per_sample``
    tokens, the mean of its measured steps (length-grouped batches hold little padding), or of
    the full length for stock-2021, which pads every batch to it."""
    train = task.encoded["train"]
    length = spec.max_seq_length if spec.config == "stock-2021" else max(
        2, round(tokens_per_sample))
    n = min(spec.batch_size, len(train))

    def tiled(rows: list[list[int]]) -> list[list[int]]:  # each row repeated to the length
        return [(row * -(-length // len(row)))[:length] for row in rows[:n]]

    rows = Encoded(tiled(train.input_ids), train.labels[:n],
                   None if train.token_type_ids is None else tiled(train.token_type_ids))
    batch = Collator(pad_id=task.tokenizer.pad_token_id)(rows, list(range(n)))
    return step_flops(task.model, batch, precision)


def main() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    quiet()
    spec = RunSpec.from_json(sys.argv[1])
    print(json.dumps(run(spec)))


if __name__ == "__main__":
    main()
