"""Interleaved A/B of cpuft's speed options on a recipe's default job, in one process.

Each variant is the default job with some settings changed (``cpuft train``'s names). Every batch is
trained by every variant in turn, so a machine whose speed drifts slows all of them alike, and
each batch starts with the next variant in rotation; the ratios are of total step times over
the same batches (after 5 warm-up batches).

    python benchmarks/step_ab.py                       # the default variants below
    python benchmarks/step_ab.py --variant fp32:precision=fp32 --batches 40
    python benchmarks/step_ab.py --base recipe=causal-lm --variant matmul: \\
        --variant sdpa:attention=sdpa --batches 12 --batch-size 16

Run it with the allocator cpuft would preload (LD_PRELOAD=.../libtcmalloc.so.4). The last line
of stdout is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from cpuft.config import config_from
from cpuft.config.fields import settings
from cpuft.data.batching import TokenBatches
from cpuft.engine.step import TrainStep
from cpuft.job.build import build_run
from cpuft.runtime import start

DEFAULT_VARIANTS = (
    "cpuft:",
    "torch-dropout:fast_dropout=false",
    "torch-dropout-sdpa:fast_dropout=false,attention=sdpa",
    "dense-embeddings:sparse_embeddings=false",
)
WARMUP = 5


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    name, _, options = text.partition(":")
    overrides: dict[str, Any] = {}
    for item in filter(None, options.split(",")):
        key, _, value = item.partition("=")
        kind = settings()[key].kind
        overrides[key] = value.lower() in ("1", "true", "on") if kind is bool else kind(value)
    return name, overrides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", help="NAME:option=value,...")
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--base", default="", metavar="option=value,...",
                        help="settings every variant shares, e.g. recipe=causal-lm")
    args = parser.parse_args()
    base = parse_variant(f"base:{args.base}")[1]
    variants = {name: {**base, **overrides} for name, overrides in
                (parse_variant(v) for v in (args.variant or DEFAULT_VARIANTS))}

    runtime = start(config_from({"seed": 0, **base}))
    steps: dict[str, TrainStep] = {}
    source = None
    for name, overrides in variants.items():
        cfg = config_from({"seed": 0, **overrides})  # seed 0: every variant's model alike
        run = build_run(cfg, runtime.plan_for(cfg))
        run.task.model.train()
        steps[name] = run.train_step()
        if source is None:
            assert isinstance(run.source, TokenBatches)
            source = TokenBatches(run.source.data, run.source.collator, args.batch_size, 42)
    assert source is not None
    batches = [b for _, b in zip(range(args.batches), source.iterate(0), strict=False)]
    seconds = dict.fromkeys(steps, 0.0)
    names = list(steps)
    for i, batch in enumerate(batches):
        # Each batch starts with the next variant: the first step after another model's runs
        # slower (measured: 5-8% on a 2-core VM), and every variant takes that turn alike.
        for name in names[i % len(names):] + names[: i % len(names)]:
            step = steps[name]
            started = time.perf_counter()
            step(batch)
            if i >= WARMUP:
                seconds[name] += time.perf_counter() - started
    first = next(iter(seconds))
    report = {"cpu": runtime.topology.model_name, "batches": len(batches) - WARMUP,
              "batch_size": args.batch_size, "seconds": seconds,
              f"slowdown_vs_{first}": {k: v / seconds[first] for k, v in seconds.items()}}
    for name, value in seconds.items():
        print(f"{name:24s} {value:7.2f}s  {value / seconds[first]:.3f}x the time of {first}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
