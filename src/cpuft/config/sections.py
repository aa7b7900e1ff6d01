"""The settings of a run, in sections: what to train on, which model, how to optimise, which
speed-ups, how ranks work together, and where the output goes; and each recipe's own section
(``ClassifierConfig``, ``CausalLmConfig``), whose settings the other recipes refuse.

Each field's docstring is its help text (``cpuft train --help`` reads it, see
``cpuft.config.fields``); each choice is a ``Literal``, checked when the config is built.
No torch here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from cpuft.errors import CpuftError

Precision = Literal["auto", "bf16", "fp32"]
CompileMode = Literal["auto", "on", "off"]
Attention = Literal["auto", "eager", "sdpa"]
Allocator = Literal["auto", "tcmalloc", "jemalloc", "system"]
Backend = Literal["auto", "gloo", "mpi", "ccl"]
GradCompression = Literal["none", "bf16", "powersgd"]
LrSchedule = Literal["linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                     "constant_with_warmup", "inverse_sqrt"]
Resume = Literal["no", "yes", "auto"]
ReportTo = Literal["none", "tensorboard"]

DEFAULT_TASK = "rotten_tomatoes"
T = TypeVar("T")


def setting(default: Any = MISSING, *, factory: Any = MISSING,
            same_on_resume: bool = False) -> Any:
    """A field with what cpuft must know of it besides its value: whether a resumed run must
    keep it (with another value its remaining steps would see other data or other updates)."""
    return field(default=default, default_factory=factory,
                 metadata={"same_on_resume": same_on_resume})


@dataclass(kw_only=True, frozen=True)
class ModelConfig:
    recipe: str = setting("classifier", same_on_resume=True)
    """What to fine-tune the model for: classifier (sequence classification or regression),
    causal-lm (a decoder on text, prompt/response pairs or chats), or a recipe registered with
    cpuft.config.recipes.register_recipe."""
    model: str = setting("", same_on_resume=True)
    """Local model folder, a .gguf file, or a hub id (default: all-MiniLM-L6-v2 for classifier,
    SmolLM2-135M-Instruct for causal-lm, both from PyPI)."""


@dataclass(kw_only=True, frozen=True)
class ClassifierConfig:
    """The classifier recipe's own settings."""

    data_dir: str = setting("", same_on_resume=True)
    """Folder with a GLUE task's train.tsv and dev.tsv."""
    text_columns: list[str] = setting(factory=list, same_on_resume=True)
    """One or two text columns, comma separated (with --train-file)."""
    label_column: str = setting("label", same_on_resume=True)
    """Label column (strings, integers or floats for regression)."""


@dataclass(kw_only=True, frozen=True)
class CausalLmConfig:
    """The causal-LM recipe's own settings."""

    lora_r: int = setting(8, same_on_resume=True)
    """The rank of LoRA adapters; 0 fine-tunes every weight instead."""
    lora_alpha: int = setting(16, same_on_resume=True)
    """LoRA's scale numerator (the adapters' update is scaled by alpha / r)."""
    lora_dropout: float = setting(0.05, same_on_resume=True)
    """Dropout on the LoRA adapters' input."""
    lora_targets: list[str] = setting(factory=list, same_on_resume=True)
    """Module names the adapters go on, comma separated (default: the attention and
    MLP projections)."""
    merge: bool = False
    """With LoRA, also save the base model with the adapters merged in (merged/)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of keeping them: less memory, about a
    third more compute."""


@dataclass(kw_only=True, frozen=True)
class DataConfig:
    task: str = setting("", same_on_resume=True)
    """Task name: rotten_tomatoes (built in), or a GLUE task (mrpc, sst2, cola, qnli, qqp, rte,
    stsb, mnli) read from --data-dir. Default: rotten_tomatoes unless files are given."""
    train_file: str = setting("", same_on_resume=True)
    """Training data: CSV, TSV, JSON, JSONL or parquet."""
    validation_file: str = setting("", same_on_resume=True)
    """Validation data, same formats (default: --validation-split)."""
    test_file: str = ""
    """Optional labelled test data, evaluated after training."""
    validation_split: float = setting(0.1, same_on_resume=True)
    """Fraction of the training data held out (seeded) when there is no validation file."""
    max_seq_length: int = setting(128, same_on_resume=True)
    """Truncate inputs to this many tokens."""
    max_train_samples: int = setting(0, same_on_resume=True)
    """Train on a seeded subset of this many samples (0: all)."""
    max_eval_samples: int = 0
    """Evaluate on seeded subsets of this many samples of each held-out split (0: all)."""


@dataclass(kw_only=True, frozen=True)
class OptimizationConfig:
    epochs: float = 1.0
    """Epochs to train (ignored when --max-steps > 0)."""
    max_steps: int = 0
    """Optimizer steps to train; 0 means use --epochs."""
    batch_size: int = setting(32, same_on_resume=True)
    """Samples per optimizer step on one process, before accumulation."""
    grad_accum: int = setting(1, same_on_resume=True)
    """Micro-batches accumulated into one optimizer step."""
    eval_batch_size: int = 128
    """Samples per evaluation batch."""
    lr: float = setting(1e-4, same_on_resume=True)
    """Peak learning rate."""
    warmup_ratio: float = setting(0.06, same_on_resume=True)
    """Fraction of steps of linear warm-up."""
    warmup_steps: int = setting(0, same_on_resume=True)
    """Steps of linear warm-up, in place of --warmup-ratio's share (0: the share)."""
    lr_schedule: LrSchedule = setting("linear", same_on_resume=True)
    """The learning-rate schedule, as transformers.get_scheduler makes it (HF's
    lr_scheduler_type): linear and cosine decay after the warm-up, constant has none,
    constant_with_warmup warms up then holds."""
    weight_decay: float = setting(0.01, same_on_resume=True)
    """AdamW weight decay (not applied to biases and norms)."""
    max_grad_norm: float = setting(1.0, same_on_resume=True)
    """Clip the gradient norm to this; 0 disables clipping."""
    seed: int = setting(42, same_on_resume=True)
    """Seed for initialisation, data order and dropout."""


LOWER_IS_BETTER = ("loss", "perplexity")
"""Endings of the evaluation scores for which lower is better (the others: higher)."""


@dataclass(kw_only=True, frozen=True)
class EvaluationConfig:
    """Evaluation on the validation data while training, as HF Trainer's eval_steps."""

    eval_steps: int = 0
    """Evaluate on the validation data every N steps and at the last, each recorded in
    metrics.jsonl (0: only once training ends)."""
    load_best_model_at_end: bool = False
    """Save the model of the best evaluation (by --metric-for-best-model), not the last; needs
    --eval-steps. Its checkpoint is kept until the end whatever --save-total-limit says."""
    metric_for_best_model: str = ""
    """The evaluation score that picks the best model, with or without HF's eval_ prefix: loss
    (lower is better) where the evaluation gives one, else the recipe's first metric (higher is
    better), e.g. accuracy, f1, perplexity (lower is better)."""


@dataclass(kw_only=True, frozen=True)
class OutputConfig:
    output_dir: str = "runs/default"
    """Where the model, metrics and checkpoints go."""
    overwrite: bool = False
    """Replace an output dir that holds another run."""
    resume: Resume = "no"
    """Continue the run in --output-dir from its newest checkpoint (--resume); with 'auto', where
    it has one, else start afresh, replacing a run there that never reached a checkpoint (what a
    job that may be requeued passes every time)."""
    save_steps: int = 0
    """Write a checkpoint every N steps (0: only at the end)."""
    save_total_limit: int = 0
    """Keep the newest N checkpoints, the last included, once the model is saved (0: the
    newest two while training, and none once the final model is saved)."""
    save_every: str = ""
    """Also write a checkpoint once this much time has passed since the last one, e.g. 10m:
    the most work a node lost without notice can cost (default: none by time; 10m in an elastic
    job, --nnodes MIN:MAX)."""
    log_steps: int = 10
    """Log loss and speed every N steps to metrics.jsonl."""
    progress: bool = True
    """Show a progress bar."""
    report_to: ReportTo = "none"
    """Also write the logged metrics and evaluations as TensorBoard events in
    <output-dir>/tensorboard (needs the extra: pip install 'cpuft[tensorboard]');
    metrics.jsonl stays the record."""


@dataclass(kw_only=True, frozen=True)
class SpeedupConfig:
    """What the user asks for; ``cpuft.speedplan`` turns it into the decisions of one run."""

    precision: Precision = "auto"
    """auto (bf16 where the CPU has native bf16 and its matmuls measure faster), bf16 or fp32."""
    fused_optimizer: bool = True
    """Use a fused AdamW kernel: torch's, and with bf16 weights cpuft's one-pass kernel for the
    fp32 masters (compiled for this CPU with the C compiler on first use)."""
    dynamic_padding: bool = True
    """Pad each batch to its longest sequence, not max length."""
    group_by_length: bool = setting(True, same_on_resume=True)
    """Batch samples of similar length together."""
    compile: CompileMode = "auto"
    """torch.compile: auto (only where a measurement shows it pays), on, off."""
    attention: Attention = "auto"
    """Attention kernel: auto (matmul attention for short sequences, the model's default for
    long ones), eager or sdpa."""
    fast_dropout: bool = True
    """Draw dropout masks 64 bits at a time, several times cheaper than torch's CPU dropout."""
    sparse_embeddings: bool = False
    """Word-embedding gradients as sparse rows, with a lazy AdamW on them: only the rows a batch
    uses are updated (and, across ranks, sent). Off by default: it is not AdamW's update (rows a
    batch does not use get no decay of their moments or weights); benchmarks/RESULTS.md has its
    speed and quality beside the default's."""
    embedding_rows: bool = True
    """Word-embedding gradients as the rows a batch used, from which a kernel makes AdamW's
    step on the whole table: no dense gradient of vocabulary x width is written, zeroed and
    read at every step. The update is AdamW's (unlike --sparse-embeddings')."""
    first_token_layer: bool = True
    """Where a classifier's head reads only the first token of the last layer (checked by
    running it), compute that layer for that token alone; the loss and gradients are
    unchanged."""
    counted_logits: bool = True
    """For causal LMs, project onto the vocabulary only the positions whose next token counts
    in the loss (a response's, not its prompt's); the loss and gradients are unchanged."""
    fused_gelu: bool = True
    """Where a module computes GELU's tanh approximation op by op (checked by running it), use
    torch's fused kernel: the same formula in one pass."""
    relative_span: bool = True
    """For disentangled relative attention (DeBERTa's), project only the relative positions a
    batch's length reaches, not the whole span; the output is unchanged (checked)."""
    dynamic_conv: bool = True
    """For mixed attention with dynamic convolution heads (ConvBERT's), apply each position's
    kernel as shifted sums rather than gathered windows; the output is unchanged (checked)."""
    channels_last: bool = True
    """For convolutional networks, the channels-last memory format where a measurement finds it
    faster (1-d convolutions: run as height-1 2-d ones, which read such inputs as they lie)."""
    bf16_weights: bool = True
    """With bf16: hold the weights (not the embeddings) in bf16 while training, with fp32
    masters in the optimizer, instead of fp32 weights cast at every use."""
    threads: int = 0
    """Intra-op threads; 0 means one per physical core."""
    pin_cores: bool = True
    """Pin the process to one logical CPU per physical core."""
    allocator: Allocator = "auto"
    """Preloaded allocator: auto (tcmalloc, else jemalloc), tcmalloc, jemalloc, system."""


@dataclass(kw_only=True, frozen=True)
class DistributedConfig:
    """Ranks started by ``cpuft launch`` or ``cpuft train --nproc-per-node/--hostfile``."""

    backend: Backend = "auto"
    """Collective backend: auto (ccl where its binding imports, mpi under mpirun when torch has
    it, else gloo), gloo, mpi or ccl."""
    bucket_cap_mb: float = 0.0
    """DDP gradient bucket size in MB; 0 means 25 for fp32 gradients and 12.5 for bf16 (the same
    number of gradients per bucket)."""
    grad_compression: GradCompression = "none"
    """Gradients sent as they are, as bf16 (half the bytes), or as powersgd: rank-4 PowerSGD
    with error feedback (far fewer bytes, an approximation; plain all-reduce for the first 10
    steps)."""
    grad_sync: bool = True
    """Reduce gradients across ranks, as data parallelism needs. --no-grad-sync sends none
    (torch's noop_hook): a benchmark of what communication costs; each rank then trains on its
    own share and the ranks' models drift apart."""
    comm_timeout: float = 120.0
    """Seconds a rank waits in a collective for its peers before it gives up: how long a node
    lost without a word (its link cut, powered off) holds the others up; in an elastic job they
    then go on without it. Longer than the slowest checkpoint."""


@dataclass(kw_only=True, frozen=True)
class TrainConfig:
    """Everything ``cpuft train`` needs; the defaults are the embedded default job."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimization: OptimizationConfig = field(default_factory=OptimizationConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    speedups: SpeedupConfig = field(default_factory=SpeedupConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    recipes: Mapping[str, Any] = field(default_factory=lambda: default_recipe_settings())
    """Each registered recipe's own section by recipe name (the defaults where none was set)."""

    def of(self, section: type[T]) -> T:
        """The recipe section of class ``section``: ``cfg.of(CausalLmConfig).lora_r``."""
        for value in self.recipes.values():
            if isinstance(value, section):
                return value
        raise CpuftError(f"internal: no recipe registered {section.__name__}")


def default_recipe_settings() -> Mapping[str, Any]:
    from cpuft.config.recipes import registered_recipes

    return MappingProxyType({name: spec.settings() for name, spec in registered_recipes().items()
                             if spec.settings is not None})


SECTIONS: dict[str, type] = {
    "model": ModelConfig, "data": DataConfig, "optimization": OptimizationConfig,
    "evaluation": EvaluationConfig, "speedups": SpeedupConfig,
    "distributed": DistributedConfig, "output": OutputConfig,
}
"""The shared sections by name (a config file's table), in the order help shows them; each
recipe's own section follows, named as the recipe."""
