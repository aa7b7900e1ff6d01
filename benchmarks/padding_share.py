"""How much of a causal-LM batch is padding, with cpuft's length-grouped batches and with random
ones: the most that packing samples end to end could save.

    python benchmarks/padding_share.py                          # the default job's verdicts
    python benchmarks/padding_share.py --task rotten_tomatoes_text --batch-size 32

Packing would fill every row with tokens; with length-grouped batches it can save at most the
padding share, and its attention must not cross sample boundaries, which on CPU means a mask
over the whole packed row. Only the tokenizer loads. The last line of stdout is one JSON
document.
"""

from __future__ import annotations

import argparse
import json

from cpuft.config import config_from
from cpuft.data.batching import epoch_batches
from cpuft.data.lm import encode_lm
from cpuft.recipes.causal_lm import (
    DEFAULT_JOB_SAMPLES,
    DEFAULT_TASK,
    builtin_rows,
    subset_rows,
)
from cpuft.recipes.hf_models import resolve_causal_lm


def padding_share(lengths: list[int], batches: list[list[int]]) -> float:
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1 - real / padded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=DEFAULT_TASK)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=512)
    parser.add_argument("--samples", type=int, default=DEFAULT_JOB_SAMPLES[0],
                        help="training samples (0: all)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    cfg = config_from({"recipe": "causal-lm"})
    folder, gguf_file = resolve_causal_lm(cfg.model.model)
    tokenizer = AutoTokenizer.from_pretrained(folder, **({"gguf_file": gguf_file}
                                                         if gguf_file else {}))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows = subset_rows(builtin_rows(args.task)["train"], args.samples)
    lengths = encode_lm(rows, tokenizer, args.max_seq_length).lengths
    report = {"task": args.task, "samples": len(lengths), "batch_size": args.batch_size,
              "mean_tokens": sum(lengths) / len(lengths)}
    for name, grouped in (("length_grouped", True), ("random", False)):
        batches = epoch_batches(lengths, args.batch_size, seed=42, epoch=0,
                                group_by_length=grouped)
        report[f"{name}_padding_share"] = padding_share(lengths, batches)
        print(f"{name:15s} batches: {report[f'{name}_padding_share']:.1%} of the tokens are "
              "padding")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
