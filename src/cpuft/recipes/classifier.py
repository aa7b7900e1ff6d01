"""Sequence classification (or regression) of one or two texts, with a Hugging Face model."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cpuft.config import ClassifierConfig, TrainConfig
from cpuft.data.batching import Collator, TokenBatches
from cpuft.data.labels import LabelMap
from cpuft.data.prepare import Encoded, LabelledSplits, encode, load_labelled
from cpuft.data.subset import seeded_subset
from cpuft.errors import CpuftError
from cpuft.log import get_logger
from cpuft.recipes.base import Task
from cpuft.recipes.classifier_eval import evaluate
from cpuft.recipes.hf_models import (
    DEFAULT_MODEL_NAME,
    load_classifier,
    load_tokenizer,
    resolve_model,
    sequence_length_limit,
    shown_model,
)
from cpuft.speedplan.speed_plan import SpeedPlan

LOG = get_logger(__name__)

ModelBuilder = Callable[[LabelMap], tuple[nn.Module, Any]]
"""label map -> (model, tokenizer): a model not loaded from --model (the bench's bert-base)."""


@dataclass(kw_only=True)
class ClassifierTask(Task):
    """A classifier's task, with what the benchmarks read besides the engine's inputs."""

    tokenizer: Any
    data: LabelledSplits
    encoded: dict[str, Encoded]


def _subsets(data: LabelledSplits, cfg: TrainConfig) -> LabelledSplits:
    """``data`` cut to ``--max-train-samples`` and, each held-out split, ``--max-eval-samples``
    (seeded subsets)."""
    for split in list(data.labels):
        limit = cfg.data.max_train_samples if split == "train" else cfg.data.max_eval_samples
        if limit and data.size(split) > limit:
            LOG.info(f"{split}: a seeded subset of {limit} of its {data.size(split)} samples")
            rows = seeded_subset(list(zip(data.texts[split], data.labels[split], strict=True)),
                                 limit)
            data.texts[split] = [text for text, _ in rows]
            data.labels[split] = [label for _, label in rows]
    return data


@dataclass
class ClassifierRecipe:
    name: str = "classifier"
    build_model: ModelBuilder | None = None

    def load(self, cfg: TrainConfig) -> ClassifierTask:
        data = _subsets(load_labelled(cfg.data, cfg.of(ClassifierConfig)), cfg)
        if self.build_model is not None:
            torch.manual_seed(cfg.optimization.seed)
            model_name = shown = cfg.model.model or "built"
            model, tokenizer = self.build_model(data.label_map)
        else:
            model_name = resolve_model(cfg.model.model)
            shown = shown_model(cfg.model.model) if cfg.model.model else DEFAULT_MODEL_NAME
            tokenizer = load_tokenizer(model_name)
            torch.manual_seed(cfg.optimization.seed)
            model = load_classifier(model_name, data.label_map)
        if tokenizer.pad_token_id is None:
            raise CpuftError(f"--model {cfg.model.model}: the tokenizer has no padding token")
        limit = sequence_length_limit(model.config, tokenizer)
        if limit is not None and cfg.data.max_seq_length > limit:
            LOG.info(f"--max-seq-length {cfg.data.max_seq_length} is longer than this model "
                     f"takes: using {limit}")
            cfg = replace(cfg, data=replace(cfg.data, max_seq_length=limit))
        encoded = {split: encode(data.texts[split], data.labels[split], tokenizer,
                                 cfg.data.max_seq_length)
                   for split in data.texts}
        if "token_type_ids" not in inspect.signature(model.forward).parameters:
            for e in encoded.values():
                e.token_type_ids = None
        pad_id = tokenizer.pad_token_id

        def collator(plan: SpeedPlan | None) -> Collator:
            dynamic = plan is None or plan.dynamic_padding
            return Collator(pad_id=pad_id, fixed_length=0 if dynamic else cfg.data.max_seq_length)

        def batches(plan: SpeedPlan, rank: int, world: int) -> TokenBatches:
            return TokenBatches(encoded["train"], collator(plan), cfg.optimization.batch_size,
                                cfg.optimization.seed, group_by_length=plan.group_by_length,
                                rank=rank, world_size=world)

        def scores(trained: nn.Module, plan: SpeedPlan, split: str) -> dict[str, float]:
            return evaluate(trained, encoded[split], collator(plan),
                            batch_size=cfg.optimization.eval_batch_size,
                            precision=str(plan.precision), metrics=data.metrics,
                            regression=data.label_map.regression)

        def evaluate_splits(trained: nn.Module, plan: SpeedPlan,
                            validation: dict[str, float] | None = None) -> dict[str, Any]:
            return {"eval": validation or scores(trained, plan, "validation"),
                    "test": scores(trained, plan, "test") if "test" in encoded else None}

        def save(trained: nn.Module, out: Path) -> None:
            trained.save_pretrained(out, safe_serialization=True)  # type: ignore[operator]
            tokenizer.save_pretrained(out)

        return ClassifierTask(
            name=data.task, cfg=cfg, model=model, train_samples=len(encoded["train"]),
            batches=batches, evaluate=evaluate_splits, save=save,
            validate=lambda trained, plan: scores(trained, plan, "validation"),
            best_metric=data.metrics[0],
            describe=lambda: {"model": shown, "task": data.task,
                              "labels": data.label_map.to_json()},
            write_metadata=lambda out: data.label_map.save(out / "label_map.json"),
            tokenizer=tokenizer, data=data, encoded=encoded,
        )
