"""The settings of a fine-tuning run: one dataclass, a config file, and flags on top.

Every field carries its help text in ``metadata``; the CLI builds its flags from these fields, so
a setting exists once. Precedence: defaults < ``--config FILE`` (TOML or YAML) < flags.
"""

from __future__ import annotations

import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError

DEFAULT_TASK = "rotten_tomatoes"


def _opt(default: Any, help: str, **extra: Any) -> Any:
    metadata = {"help": help, **extra}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def field_default(f: Any) -> Any:
    return f.default_factory() if f.default is MISSING else f.default


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    """Everything ``cpuft train`` needs; the defaults are the embedded default job."""

    # model and data
    model: str = _opt("", "Local model folder or hub id (default: all-MiniLM-L6-v2 from PyPI).")
    task: str = _opt(
        "",
        "Task name: rotten_tomatoes (built in), or a GLUE task (mrpc, sst2, cola, qnli, qqp, "
        "rte, stsb, mnli) read from --data-dir. Default: rotten_tomatoes unless files are given.",
    )
    data_dir: str = _opt("", "Folder with a GLUE task's train.tsv and dev.tsv.")
    train_file: str = _opt("", "Training data: CSV, TSV, JSON, JSONL or parquet.")
    validation_file: str = _opt("", "Validation data, same formats (default: --validation-split).")
    test_file: str = _opt("", "Optional labelled test data, evaluated after training.")
    text_columns: list[str] = _opt(
        [], "One or two text columns, comma separated (with --train-file).", kind="list"
    )
    label_column: str = _opt("label", "Label column (strings, integers or floats for regression).")
    validation_split: float = _opt(
        0.1, "Fraction of the training data held out (seeded) when there is no validation file."
    )
    max_seq_length: int = _opt(128, "Truncate inputs to this many tokens.")
    # schedule
    epochs: float = _opt(1.0, "Epochs to train (ignored when --max-steps > 0).")
    max_steps: int = _opt(0, "Optimizer steps to train; 0 means use --epochs.")
    batch_size: int = _opt(32, "Samples per optimizer step on one process, before accumulation.")
    grad_accum: int = _opt(1, "Micro-batches accumulated into one optimizer step.")
    eval_batch_size: int = _opt(128, "Samples per evaluation batch.")
    lr: float = _opt(1e-4, "Peak learning rate.")
    warmup_ratio: float = _opt(0.06, "Fraction of steps of linear warm-up.")
    lr_schedule: str = _opt(
        "linear", "linear (warm-up, then decay to 0) or constant (after warm-up).",
        choices=("linear", "constant"),
    )
    weight_decay: float = _opt(0.01, "AdamW weight decay (not applied to biases and norms).")
    max_grad_norm: float = _opt(1.0, "Clip the gradient norm to this; 0 disables clipping.")
    seed: int = _opt(42, "Seed for initialisation, data order and dropout.")
    # output
    output_dir: str = _opt("runs/default", "Where the model, metrics and checkpoints go.")
    overwrite: bool = _opt(False, "Replace an output dir that holds another run.")
    resume: bool = _opt(False, "Resume from the newest checkpoint in --output-dir.")
    save_steps: int = _opt(0, "Write a checkpoint every N steps (0: only at the end).")
    log_steps: int = _opt(10, "Log loss and speed every N steps to metrics.jsonl.")
    progress: bool = _opt(True, "Show a progress bar.")
    # speed
    precision: str = _opt(
        "auto", "auto (bf16 where the CPU has native bf16), bf16 or fp32.",
        choices=("auto", "bf16", "fp32"),
    )
    fused_optimizer: bool = _opt(
        True, "Use a fused AdamW kernel: torch's, and with bf16 weights cpuft's one-pass kernel "
        "for the fp32 masters (compiled for this CPU with the C compiler on first use).")
    dynamic_padding: bool = _opt(True, "Pad each batch to its longest sequence, not max length.")
    group_by_length: bool = _opt(True, "Batch samples of similar length together.")
    compile: str = _opt(
        "auto", "torch.compile: auto (only where a measurement shows it pays), on, off.",
        choices=("auto", "on", "off"),
    )
    attention: str = _opt(
        "auto", "Attention kernel: auto (matmul attention for short sequences, the model's "
        "default for long ones), eager or sdpa.",
        choices=("auto", "eager", "sdpa"),
    )
    fast_dropout: bool = _opt(
        True, "Draw dropout masks 64 bits at a time (3x cheaper than torch's CPU dropout)."
    )
    sparse_embeddings: bool = _opt(
        True, "Word-embedding gradients as sparse rows, with a lazy AdamW on them: only the "
        "rows a batch uses are updated (and, across ranks, sent).",
    )
    first_token_layer: bool = _opt(
        True, "For classifiers that read only the first token (BERT family), compute the last "
        "layer for that token alone; the loss and gradients are unchanged.",
    )
    bf16_weights: bool = _opt(
        True, "With bf16: hold the weights (not the embeddings) in bf16 while training, with "
        "fp32 masters in the optimizer, instead of fp32 weights cast at every use.",
    )
    threads: int = _opt(0, "Intra-op threads; 0 means one per physical core.")
    pin_cores: bool = _opt(True, "Pin the process to one logical CPU per physical core.")
    allocator: str = _opt(
        "auto", "Preloaded allocator: auto (tcmalloc, else jemalloc), tcmalloc, jemalloc, system.",
        choices=("auto", "tcmalloc", "jemalloc", "system"),
    )

    # distributed (ranks started by `cpuft launch` or `cpuft train --nproc-per-node/--hostfile`)
    backend: str = _opt(
        "auto", "Collective backend: auto (ccl where its binding imports, mpi under mpirun when "
        "torch has it, else gloo), gloo, mpi or ccl.", choices=("auto", "gloo", "mpi", "ccl"),
    )
    bucket_cap_mb: float = _opt(
        0.0, "DDP gradient bucket size in MB; 0 means 25 for fp32 gradients and 12.5 for bf16 "
        "(the same number of gradients per bucket).",
    )
    grad_compression: str = _opt(
        "none", "Gradients sent as they are, as bf16 (half the bytes), or as powersgd: rank-4 "
        "PowerSGD with error feedback (far fewer bytes, an approximation; plain all-reduce for "
        "the first 10 steps).",
        choices=("none", "bf16", "powersgd"),
    )
    grad_sync: bool = _opt(
        True, "Reduce gradients across ranks, as data parallelism needs. --no-grad-sync sends "
        "none (torch's noop_hook): a benchmark of what communication costs; each rank then "
        "trains on its own share and the ranks' models drift apart.",
    )

    def validate(self) -> None:
        """Reject settings that cannot work, before anything is loaded."""
        checks = [
            (self.batch_size > 0, "--batch-size must be positive"),
            (self.grad_accum > 0, "--grad-accum must be positive"),
            (self.eval_batch_size > 0, "--eval-batch-size must be positive"),
            (self.max_seq_length > 1, "--max-seq-length must be at least 2"),
            (self.max_steps >= 0, "--max-steps must be 0 or positive"),
            (self.max_steps > 0 or self.epochs > 0, "--epochs must be positive"),
            (self.lr > 0, "--lr must be positive"),
            (0 <= self.warmup_ratio < 1, "--warmup-ratio must be in [0, 1)"),
            (0 < self.validation_split < 1, "--validation-split must be in (0, 1)"),
            (self.save_steps >= 0, "--save-steps must be 0 or positive"),
            (self.log_steps > 0, "--log-steps must be positive"),
            (self.weight_decay >= 0, "--weight-decay must be 0 or positive"),
            (self.max_grad_norm >= 0, "--max-grad-norm must be 0 (no clipping) or positive"),
            (self.threads >= 0, "--threads must be 0 (one per physical core) or positive"),
            (self.bucket_cap_mb >= 0, "--bucket-cap-mb must be 0 (by gradient type) or positive"),
            (len(self.text_columns) <= 2, "--text-columns takes one or two columns"),
        ]
        for ok, message in checks:
            if not ok:
                raise CpuftError(message)


def config_fields() -> list[Any]:
    return list(fields(TrainConfig))


def load_config_file(path: str) -> dict[str, Any]:
    """Read a TOML or YAML file of TrainConfig fields (dashes or underscores in keys)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise CpuftError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            raise CpuftError(f"config file {path}: use a .toml, .yaml or .yml file")
    except (tomllib.TOMLDecodeError, ValueError) as e:
        raise CpuftError(f"config file {path} does not parse: {e}") from None
    except Exception as e:  # yaml.YAMLError without importing yaml at module level
        if type(e).__module__.startswith("yaml"):
            raise CpuftError(f"config file {path} does not parse: {e}") from None
        raise
    if not isinstance(data, dict):
        raise CpuftError(f"config file {path}: expected a table of settings")
    data = data.get("train", data)
    known = {f.name: f for f in fields(TrainConfig)}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise CpuftError(f"config file {path}: unknown setting {key!r}")
        if known[name].metadata.get("kind") == "list" and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        out[name] = value
    return out


def build_config(file_values: dict[str, Any], flag_values: dict[str, Any]) -> TrainConfig:
    """Defaults, overridden by the config file, overridden by flags the user gave."""
    merged = {**file_values, **flag_values}
    cfg = TrainConfig(**merged)
    for f in fields(TrainConfig):
        value = getattr(cfg, f.name)
        default = field_default(f)
        if not isinstance(value, type(default)) or isinstance(value, bool) != isinstance(
            default, bool
        ):
            if isinstance(default, float) and isinstance(value, int):
                setattr(cfg, f.name, float(value))
            else:
                raise CpuftError(
                    f"setting {f.name}: expected {type(default).__name__}, got {value!r}"
                )
    cfg.validate()
    return cfg
