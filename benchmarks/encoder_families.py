"""Base-size sequence classifiers of encoder families cpuft never special-cased, with random
weights (speed does not depend on them), each in a folder `cpuft bench --models` takes.

    python benchmarks/encoder_families.py /tmp/families            # every family below
    python benchmarks/encoder_families.py /tmp/families distilbert modernbert

Each folder holds the model (config and safetensors) and the MiniLM tokenizer (BERT's
WordPiece, 30522 ids), which every model here is sized to. Prints the folders, comma-separated,
as its last line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

VOCAB = 30522
FAMILIES: dict[str, dict[str, Any]] = {
    "distilbert": {},
    "ernie": {},
    "deberta-v2": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                   "intermediate_size": 3072, "max_position_embeddings": 512,
                   "position_buckets": 256,
                   "relative_attention": True, "pos_att_type": ["p2c", "c2p"]},
    "albert": {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
    "modernbert": {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102,
                   "cls_token_id": 101, "sep_token_id": 102},
    "convbert": {},
    "roformer": {},
    "roberta": {},
    "xlm-roberta": {},
    "electra": {"hidden_size": 768, "embedding_size": 768, "num_attention_heads": 12,
                "intermediate_size": 3072},
    "squeezebert": {},
    "funnel": {},
    "mobilebert": {},
    "fnet": {},
    "nystromformer": {},
}
"""transformers' model type, and what its defaults need to be base size on BERT's ids."""


def build(folder: Path, family: str) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    from cpuft.recipes.hf_models import default_model_path

    out = folder / family
    if (out / "config.json").is_file():
        return out
    config = AutoConfig.for_model(family, vocab_size=VOCAB, num_labels=2, pad_token_id=0,
                                  **{k: v for k, v in FAMILIES[family].items()
                                     if k != "pad_token_id"})
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(default_model_path()).save_pretrained(out)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"{family}: {params:.0f}M parameters in {out}", file=sys.stderr)
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    families = sys.argv[2:] or list(FAMILIES)
    print(",".join(str(build(folder, family)) for family in families))


if __name__ == "__main__":
    main()
