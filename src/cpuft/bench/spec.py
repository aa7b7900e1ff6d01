"""What one benchmark configuration runs: shared by the runner and its worker processes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

CONFIGS = ("stock-2021", "trainer-best", "cpuft")
# Not run by default: cpuft with torch.compile forced on, to measure what compiling costs and
# gains here (the result feeds `cpuft train --compile auto`); Trainer with torch_compile=True.
OPTIONAL_CONFIGS = ("cpuft-compile", "trainer-compile")
VARIANTS: dict[str, dict[str, object]] = {
    "cpuft-no-allocator": {"allocator": "system"},
    "cpuft-no-pinning": {"pin_cores": False},
    "cpuft-no-fused-optimizer": {"fused_optimizer": False},
    "cpuft-no-fast-dropout": {"fast_dropout": False},
    "cpuft-no-attention": {"attention": "sdpa"},
    "cpuft-no-first-token-layer": {"first_token_layer": False},
    "cpuft-no-fused-gelu": {"fused_gelu": False},
    "cpuft-no-bf16-weights": {"bf16_weights": False},
    "cpuft-no-embedding-rows": {"embedding_rows": False},
    "cpuft-sparse-embeddings": {"sparse_embeddings": True},
}
"""cpuft with one setting changed, on a classifier (``--ablate``): each speed-up turned off
(attention: the model's own, sdpa), and the lazy embedding update turned on. cpuft's speed over
each is what that speed-up gives."""
MODELS = ("minilm", "bert-base")
LM_MODELS = {"smollm2-lora": "lora", "smollm2-full": "full"}
"""Causal-LM models: SmolLM2-135M-Instruct fine-tuned with LoRA or in full, on the default causal
job's verdicts. ``lora:PATH`` and ``full:PATH`` name another decoder (a folder or a .gguf file)."""
LM_CONFIGS = ("trainer-best", "cpuft")
"""2021 had no LoRA: causal-LM models are measured against today's stock way alone."""
LM_LR = {"lora": 1e-3, "full": 5e-5}
LOOP_MODELS = {"cnn": "cnn_digits", "rnn": "rnn_reviews"}
"""A training loop of one's own on an example's model: the ResNet and the GRU classifier."""
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
"""The examples of a source checkout, whose models and data the loop models train."""
LOOP_CONFIGS = ("plain-fp32", "plain-best", "cpuft")
LOOP_LR = {"cnn": 3e-3, "rnn": 2e-3}
"""The examples' learning rates."""


def example_path(model: str) -> Path:
    """The example file whose model the loop model ``model`` trains; a CpuftError where the
    checkout has none."""
    from cpuft.errors import CpuftError

    path = EXAMPLES / f"{LOOP_MODELS[model]}.py"
    if not path.is_file():
        raise CpuftError(f"--models {model} trains the model of {path.name}, which is not in "
                         f"{EXAMPLES}: run cpuft bench from a source checkout")
    return path


def configs_for(model: str) -> tuple[str, ...]:
    """The configurations a model is measured in, in order."""
    if model in LOOP_MODELS:
        return LOOP_CONFIGS
    if lm_model(model):
        return LM_CONFIGS
    return CONFIGS + OPTIONAL_CONFIGS + tuple(VARIANTS)


def lm_model(model: str) -> tuple[str, str] | None:
    """('lora' or 'full', the decoder's path, '' for SmolLM2) for a causal-LM model name, or
    None for a classifier model."""
    if model in LM_MODELS:
        return LM_MODELS[model], ""
    kind, sep, path = model.partition(":")
    if sep and kind in ("lora", "full") and path:
        return kind, path
    return None


@dataclass(kw_only=True, slots=True)
class RunSpec:
    """One configuration on one model: the same data, length, batch and steps for all three."""

    config: str
    model: str
    """'minilm' (the pretrained default model), 'bert-base' (bert-base size, random weights
    built from a config) or a local model folder; a causal-LM model (``LM_MODELS``); or a loop
    of one's own (``LOOP_MODELS``)."""
    steps: int
    batch_size: int
    max_seq_length: int = 128
    lr: float = 1e-4
    weight_decay: float = 0.01
    seed: int = 42
    eval_samples: int = 0
    """Validation rows to score (0: all)."""
    profile_steps: int = 0
    """Steps to run under torch.profiler after the measured ones (cpuft, causal LMs)."""
    image_size: int = 0
    """The side of the CNN's random images."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls(**json.loads(text))
