"""What one benchmark configuration runs: shared by the runner and its worker processes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

CONFIGS = ("stock-2021", "trainer-best", "cpuft")
# Not run by default: cpuft with torch.compile forced on, to measure what compiling costs and
# gains here (the result feeds `cpuft train --compile auto`).
OPTIONAL_CONFIGS = ("cpuft-compile",)
MODELS = ("minilm", "bert-base")


@dataclass(kw_only=True, slots=True)
class RunSpec:
    """One configuration on one model: the same data, length, batch and steps for all three."""

    config: str
    model: str
    """'minilm' (the pretrained default model), 'bert-base' (bert-base size, random weights
    built from a config) or a local model folder."""
    steps: int
    batch_size: int
    max_seq_length: int = 128
    lr: float = 1e-4
    weight_decay: float = 0.01
    seed: int = 42
    eval_samples: int = 0
    """Validation rows to score (0: all)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls(**json.loads(text))
