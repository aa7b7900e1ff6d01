"""Hugging Face TrainingArguments' names of cpuft's settings: flags on the command line, keys
in config files, in both with HF's meaning."""

from __future__ import annotations

HF_NAMES: dict[str, tuple[str, ...]] = {
    "model": ("--model_name_or_path",),
    "train_file": ("--train_file",),
    "validation_file": ("--validation_file",),
    "test_file": ("--test_file",),
    "max_seq_length": ("--max_seq_length",),
    "max_train_samples": ("--max_train_samples",),
    "max_eval_samples": ("--max_eval_samples",),
    "epochs": ("--num_train_epochs",),
    "max_steps": ("--max_steps",),
    "batch_size": ("--per_device_train_batch_size",),
    "eval_batch_size": ("--per_device_eval_batch_size",),
    "grad_accum": ("--gradient_accumulation_steps",),
    "lr": ("--learning_rate",),
    "warmup_ratio": ("--warmup_ratio",),
    "lr_schedule": ("--lr_scheduler_type",),
    "weight_decay": ("--weight_decay",),
    "max_grad_norm": ("--max_grad_norm",),
    "output_dir": ("--output_dir",),
    "overwrite": ("--overwrite_output_dir",),
    "save_steps": ("--save_steps",),
    "save_total_limit": ("--save_total_limit",),
    "eval_steps": ("--eval_steps",),
    "load_best_model_at_end": ("--load_best_model_at_end",),
    "metric_for_best_model": ("--metric_for_best_model",),
    "report_to": ("--report_to",),
    "log_steps": ("--logging_steps",),
    "gradient_checkpointing": ("--gradient_checkpointing",),
}
"""Hugging Face TrainingArguments' (and its example scripts') names of cpuft's settings, taken
with HF's meaning (docs/hf-trainer.md maps every argument, those cpuft lacks included)."""
HF_SETTING = {flag.removeprefix("--"): name for name, flags in HF_NAMES.items() for flag in flags}
"""A setting's name by its HF name, as a config file's key."""
