"""Causal-LM fine-tuning of a decoder, in full or with LoRA adapters (peft), on documents,
prompt/response pairs or chats.

With no data given, the default job asks SmolLM2-135M-Instruct whether Rotten Tomatoes
snippets are fresh or rotten (``Review: <snippet>\\nVerdict:`` -> `` fresh`` / `` rotten``), on
the classifier's seeded 80/10/10 split.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cpuft.config import CausalLmConfig, TrainConfig
from cpuft.data.batching import TokenBatches
from cpuft.data.lm import (
    LmCollator,
    LmRows,
    encode_lm,
    first_counted,
    learnable,
    read_lm_file,
)
from cpuft.data.prepare import Encoded
from cpuft.data.subset import SUBSET_SEED, seeded_subset
from cpuft.errors import CpuftError, first_line
from cpuft.log import get_logger
from cpuft.recipes.adapter_card import write_portable_adapter
from cpuft.recipes.base import Task
from cpuft.recipes.hf_models import load_causal_lm, resolve_causal_lm, shown_model
from cpuft.recipes.lm_eval import MAX_CHOICES, choice_accuracy, lm_loss
from cpuft.recipes.memory import check_memory
from cpuft.speedplan.speed_plan import SpeedPlan

LOG = get_logger(__name__)

DEFAULT_TASK = "rotten_tomatoes_verdicts"
TEXT_TASK = "rotten_tomatoes_text"
TASKS = (DEFAULT_TASK, TEXT_TASK)
"""Built-in data (--task): the snippets as verdict questions, or as plain text."""
DEFAULT_JOB_SAMPLES = (1024, 256)
"""The default job's seeded subsets (training, each held-out split), unless set: the full set
would take a 2-core machine over an hour."""


def builtin_rows(task: str) -> dict[str, LmRows]:
    """Rotten Tomatoes snippets, split as the classifier's job: as prompt/response pairs
    (verdicts), or as plain text (for perplexity)."""
    from cpuft.data import rotten_tomatoes

    splits = rotten_tomatoes.load_splits()
    if task == TEXT_TASK:
        return {name: LmRows("text", [row["text"] for row in ds]) for name, ds in splits.items()}
    return {name: LmRows("prompt_response",
                         [(f"Review: {row['text']}\nVerdict:", f" {row['category']}")
                          for row in ds])
            for name, ds in splits.items()}


def subset_rows(rows: LmRows, limit: int) -> LmRows:
    return LmRows(rows.kind, seeded_subset(rows.rows, limit))


def _load_rows(cfg: TrainConfig) -> tuple[str, dict[str, LmRows]]:
    d = cfg.data
    if d.task and d.task not in TASKS:
        raise CpuftError(f"--recipe causal-lm: unknown task {d.task!r}: use {', '.join(TASKS)}, "
                         "or --train-file")
    if d.task and d.train_file:
        raise CpuftError("give either --task or --train-file, not both")
    if not d.train_file:
        if d.validation_file or d.test_file:
            raise CpuftError("--validation-file and --test-file need --train-file")
        return d.task or DEFAULT_TASK, builtin_rows(d.task or DEFAULT_TASK)
    splits = {"train": read_lm_file(d.train_file)}
    if d.validation_file:
        splits["validation"] = read_lm_file(d.validation_file)
    else:
        rows = list(splits["train"].rows)
        random.Random(SUBSET_SEED).shuffle(rows)
        held = max(1, round(len(rows) * d.validation_split))
        if len(rows) - held < 1:
            raise CpuftError(f"{d.train_file}: {len(rows)} record(s) are too few to hold out "
                             "a validation share and train on the rest")
        kind = splits["train"].kind
        splits = {"train": LmRows(kind, rows[held:]), "validation": LmRows(kind, rows[:held])}
    if d.test_file:
        splits["test"] = read_lm_file(d.test_file)
    kinds = {rows.kind for rows in splits.values()}
    if len(kinds) > 1:
        raise CpuftError(f"the data files hold different kinds of records ({', '.join(kinds)})")
    return Path(d.train_file).stem, splits


def apply_lora(model: nn.Module, cfg: TrainConfig) -> nn.Module:
    """The model with LoRA adapters (only they train), or the model itself for --lora-r 0."""
    m = cfg.of(CausalLmConfig)
    if m.lora_r == 0:
        return model
    import warnings

    from peft import LoraConfig, get_peft_model

    # peft asks transformers a question transformers 5 renamed; the answer is the same.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*",
                            category=FutureWarning)
    targets: str | list[str] = m.lora_targets or "all-linear"
    config = LoraConfig(r=m.lora_r, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout,
                        target_modules=targets, task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, config)
    except ValueError as e:
        raise CpuftError(f"--lora-targets {','.join(m.lora_targets)}: "
                         f"{first_line(e, 200)}") from None


@dataclass(kw_only=True)
class CausalLmTask(Task):
    tokenizer: Any
    encoded: dict[str, Encoded]
    choices: dict[str, tuple[Encoded, list[int], int]]
    """Per held-out split, where accuracy is scored: every prompt with each of the data set's
    responses, the index of each sample's own, and how many responses there are."""
    collator: LmCollator


@dataclass
class CausalLmRecipe:
    name: str = "causal-lm"

    def load(self, cfg: TrainConfig) -> CausalLmTask:
        task_name, splits = _load_rows(cfg)
        d = cfg.data
        if task_name in TASKS and not (d.max_train_samples or d.max_eval_samples):
            d = replace(d, max_train_samples=DEFAULT_JOB_SAMPLES[0],
                        max_eval_samples=DEFAULT_JOB_SAMPLES[1])
            cfg = replace(cfg, data=d)
            LOG.info(f"{task_name} trains on a seeded subset of {d.max_train_samples} reviews "
                     f"and evaluates on {d.max_eval_samples} of each held-out split "
                     "(--max-train-samples and --max-eval-samples set other sizes)")
        splits = {name: subset_rows(rows, d.max_train_samples if name == "train"
                              else d.max_eval_samples) for name, rows in splits.items()}
        folder, gguf_file = resolve_causal_lm(cfg.model.model)
        check_memory(folder, gguf_file, cfg)
        torch.manual_seed(cfg.optimization.seed)
        model, tokenizer = load_causal_lm(folder, gguf_file)
        model = apply_lora(model, cfg)
        own = cfg.of(CausalLmConfig)
        if own.gradient_checkpointing:
            model.gradient_checkpointing_enable()  # type: ignore[operator]
            if own.lora_r:
                model.enable_input_require_grads()  # type: ignore[operator]
        limit = getattr(model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and d.max_seq_length > limit:
            cfg = replace(cfg, data=replace(d, max_seq_length=limit))
        encoded = {name: encode_lm(rows, tokenizer, cfg.data.max_seq_length)
                   for name, rows in splits.items()}
        splits, encoded, left_out = _learnable(splits, encoded, tokenizer, cfg.data.max_seq_length)
        collator = LmCollator(pad_id=tokenizer.pad_token_id)
        choices = _choices(splits, tokenizer, cfg.data.max_seq_length)
        model_name = shown_model(cfg.model.model) if cfg.model.model else str(gguf_file)

        def batches(plan: SpeedPlan, rank: int, world: int) -> TokenBatches:
            return TokenBatches(encoded["train"], collator, cfg.optimization.batch_size,
                                cfg.optimization.seed, group_by_length=plan.group_by_length,
                                rank=rank, world_size=world)

        def scores(trained: nn.Module, plan: SpeedPlan, split: str) -> dict[str, float]:
            found = lm_loss(trained, encoded[split], collator,
                            batch_size=cfg.optimization.eval_batch_size, precision=plan.precision)
            if split in choices:
                candidates, references, n = choices[split]
                found["accuracy"] = choice_accuracy(
                    trained, candidates, references, n, collator,
                    batch_size=cfg.optimization.eval_batch_size, precision=plan.precision)
            return found

        def evaluate(trained: nn.Module, plan: SpeedPlan,
                     validation: dict[str, float] | None = None) -> dict[str, Any]:
            found = {key: scores(trained, plan, split)
                     for split, key in (("validation", "eval"), ("test", "test"))
                     if split in encoded and not (validation and key == "eval")}
            return {"eval": validation, **found} if validation else found

        def save(trained: nn.Module, out: Path) -> None:
            trained.save_pretrained(out, safe_serialization=True)  # type: ignore[operator]
            tokenizer.save_pretrained(out)
            if own.lora_r:  # PEFT wrote this machine's path to the base, twice
                write_portable_adapter(out, folder, gguf_file, lora, task_name)
            if own.merge and own.lora_r:
                from peft import PeftModel

                # Into the base as it was loaded: a base held in bf16 while training comes
                # back rounded, and the adapters are meant for the original weights.
                base, _ = load_causal_lm(folder, gguf_file)
                merged = PeftModel.from_pretrained(base, out).merge_and_unload()
                merged.save_pretrained(out / "merged", safe_serialization=True)
                tokenizer.save_pretrained(out / "merged")

        lora = {"r": own.lora_r, "alpha": own.lora_alpha, "dropout": own.lora_dropout,
                "targets": own.lora_targets or "all-linear"}
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return CausalLmTask(
            name=task_name, cfg=cfg, model=model, train_samples=len(encoded["train"]),
            batches=batches, evaluate=evaluate, save=save, evaluate_before=True,
            validate=lambda trained, plan: scores(trained, plan, "validation"),
            describe=lambda: {"model": model_name, "task": task_name,
                              "data_kind": splits["train"].kind,
                              "records_left_out": left_out,
                              "lora": lora if own.lora_r else None,
                              "trainable_parameters": trainable,
                              "parameters": sum(p.numel() for p in model.parameters())},
            tokenizer=tokenizer, encoded=encoded, choices=choices, collator=collator,
        )


def _learnable(splits: dict[str, LmRows], encoded: dict[str, Encoded], tokenizer: Any,
               max_length: int) -> tuple[dict[str, LmRows], dict[str, Encoded], dict[str, int]]:
    """Each split without the records whose every counted token lies past ``max_length`` (a
    prompt that long leaves nothing to learn or score), and how many were left out; a split
    left with none is refused."""
    left_out = {}
    for name in list(splits):
        rows, kept = learnable(splits[name], encoded[name])
        total = len(splits[name].rows)
        if not rows.rows:
            needed = [first_counted(labels) for labels in
                      encode_lm(splits[name], tokenizer, 1 << 30).labels]
            shortest = min((n for n in needed if n), default=0)
            raise CpuftError(f"{name}: no record keeps a token to learn within --max-seq-length "
                             f"{max_length}: the first counted token comes at token {shortest} "
                             "at the earliest; raise --max-seq-length, or shorten the prompts")
        if len(rows.rows) < total:
            left_out[name] = total - len(rows.rows)
            LOG.info(f"{name}: {left_out[name]} of {total} records left out: nothing of them to "
                     f"learn within --max-seq-length {max_length}")
        splits[name], encoded[name] = rows, kept
    return splits, encoded, left_out


def _choices(splits: dict[str, LmRows], tokenizer: Any,
             max_length: int) -> dict[str, tuple[Encoded, list[int], int]]:
    """For prompt/response data with at most MAX_CHOICES distinct responses: per held-out
    split, every prompt with every response, the index of each sample's own, and how many."""
    if splits["train"].kind != "prompt_response":
        return {}
    responses = sorted({r for rows in splits.values() for _, r in rows.rows})
    if len(responses) > MAX_CHOICES:
        return {}
    out: dict[str, tuple[Encoded, list[int], int]] = {}
    for split in ("validation", "test"):
        if split not in splits:
            continue
        rows = splits[split].rows
        pairs = LmRows("prompt_response", [(p, r) for p, _ in rows for r in responses])
        out[split] = (encode_lm(pairs, tokenizer, max_length),
                      [responses.index(r) for _, r in rows], len(responses))
    return out
