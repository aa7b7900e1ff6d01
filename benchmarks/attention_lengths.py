"""Matmul attention against torch's CPU flash attention (sdpa) in a decoder's training step, at
document lengths: the measurement behind ``--attention auto``'s choice for causal LMs.

    python benchmarks/attention_lengths.py                    # SmolLM2 with LoRA, 512-2048
    python benchmarks/attention_lengths.py --lengths 64,512 --tokens 2048 --rounds 3

Each length trains batches of random token ids (``--tokens`` a batch, at least one sequence)
forward and back, with the two attentions in turns on one model, so that a machine whose speed
drifts slows both alike, each round starting with the other. Run it with the allocator cpuft
would preload. The last line of stdout is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from cpuft.config import config_from
from cpuft.recipes.causal_lm import apply_lora
from cpuft.recipes.hf_models import load_causal_lm, resolve_causal_lm
from cpuft.runtime import start
from cpuft.speedplan.choices import MATMUL_ATTENTION
from cpuft.speedups.attention import register_attention

ATTENTIONS = (MATMUL_ATTENTION, "sdpa")


def step_seconds(model: torch.nn.Module, ids: torch.Tensor) -> float:
    started = time.perf_counter()
    model(input_ids=ids, labels=ids).loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="a decoder (default: SmolLM2-135M)")
    parser.add_argument("--lengths", default="512,1024,2048")
    parser.add_argument("--tokens", type=int, default=2048, help="tokens a batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lora-r", type=int, default=8, help="0: full fine-tuning")
    args = parser.parse_args()
    cfg = config_from({"recipe": "causal-lm", "model": args.model, "lora_r": args.lora_r,
                       "lora_dropout": 0.0})
    runtime = start(cfg)
    model, _ = load_causal_lm(*resolve_causal_lm(cfg.model.model))
    model = apply_lora(model, cfg)
    model.train()
    register_attention()
    vocab = model.config.vocab_size
    report: dict[str, dict[str, float]] = {}
    for length in (int(x) for x in args.lengths.split(",")):
        ids = torch.randint(0, vocab, (max(1, args.tokens // length), length),
                            generator=torch.Generator().manual_seed(length))
        seconds = dict.fromkeys(ATTENTIONS, 0.0)
        for round_ in range(args.rounds + 1):  # round 0 warms up
            # The first step after the other kind runs slower: each round starts with the other.
            for attention in ATTENTIONS[::1 if round_ % 2 else -1]:
                model.set_attn_implementation(attention)
                took = step_seconds(model, ids)
                if round_:
                    seconds[attention] += took
        ratio = seconds["sdpa"] / seconds[MATMUL_ATTENTION]
        report[str(length)] = {**seconds, "sdpa_time_over_matmul": ratio,
                               "batch": ids.shape[0]}
        print(f"{length:5d} tokens x {ids.shape[0]}: matmul {seconds[MATMUL_ATTENTION]:.2f}s, "
              f"sdpa {seconds['sdpa']:.2f}s: sdpa takes {ratio:.3f}x matmul's time", flush=True)
    print(json.dumps({"cpu": runtime.topology.model_name, "threads": torch.get_num_threads(),
                      "lora_r": args.lora_r, "rounds": args.rounds, "lengths": report}))


if __name__ == "__main__":
    main()
