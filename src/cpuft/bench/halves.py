"""What halving the batch costs one core: the ceiling of 2-node data parallelism here.

On 2 nodes each trains half of every global batch. This worker trains the same samples both
ways on one core and one thread, in turns: each global batch once whole, then as the two halves
the 2 ranks would get (``cpuft.data.batching.shard``); with ``grad_accum`` each step is that
many micro-batches, as ``fit`` takes them. The ratio of the times is the most 2
nodes can reach with free communication and nothing shared between them.

    python -m cpuft.bench.halves '{"global_batch": 32}'    # prints one JSON document
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

WARMUP = 3


@dataclass(kw_only=True, slots=True)
class HalvesSpec:
    model: str = ""
    """A model folder; empty means the default model."""
    global_batch: int = 32
    """Samples per optimizer step, over all nodes."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    batches: int = 33
    """Global batches (optimizer steps) to train both ways (the first few are warm-up)."""
    core: int = 0
    max_seq_length: int = 128

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def measure(spec: HalvesSpec) -> dict[str, Any]:
    import torch

    from cpuft.config import config_from
    from cpuft.data.batching import TokenBatches, epoch_batches, shard
    from cpuft.job.build import build_run
    from cpuft.recipes.classifier import ClassifierTask
    from cpuft.runtime import start

    os.sched_setaffinity(0, {spec.core})  # a one-core node's set-up: one thread, on this core
    cfg = config_from({"model": spec.model, "max_seq_length": spec.max_seq_length, "seed": 0})
    # as the nodes' runs settle the precision and patch the model
    run = build_run(cfg, start(cfg).plan)
    assert isinstance(run.task, ClassifierTask)
    run.task.model.train()
    train_step = run.train_step()
    train = run.task.encoded["train"]
    assert isinstance(run.source, TokenBatches)
    collate = run.source.collator
    # as fit takes them: micro-batches of global_batch / grad_accum, grad_accum of them a step
    accum = spec.grad_accum
    micro = epoch_batches(train.lengths, spec.global_batch // accum, seed=42, epoch=0)
    steps = [micro[i : i + accum] for i in range(0, spec.batches * accum, accum)]
    steps = [group for group in steps if len(group) == accum]

    def step(batches: list[dict[str, torch.Tensor]]) -> float:
        started = time.perf_counter()
        train_step(*batches)
        return time.perf_counter() - started

    whole = halves = 0.0
    for i, group in enumerate(steps):
        a = step([collate(train, indices) for indices in group])
        b = sum(step([collate(train, shard(indices, r, 2)) for indices in group])
                for r in range(2))
        if i >= min(WARMUP, len(steps) - 1):
            whole, halves = whole + a, halves + b
    return {"global_batch": spec.global_batch, "grad_accum": accum, "whole_seconds": whole,
            "halves_seconds": halves, "ceiling": whole / halves}


def main() -> None:
    from cpuft.log import quiet

    quiet()
    print(json.dumps(measure(HalvesSpec(**json.loads(sys.argv[1])))))


if __name__ == "__main__":
    main()
