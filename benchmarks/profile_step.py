"""Where one of cpuft's classifier steps spends its time: torch.profiler's top operators over a
few steps of the bench's model, after two warm-up steps.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 python benchmarks/profile_step.py
    ... python benchmarks/profile_step.py --model minilm --steps 10 --batch-size 32

Run it with the allocator cpuft would preload: without it, glibc maps a word embedding's dense
gradient afresh at every step and its zeroing reads many times slower. cpuft's C AdamW kernel
is no torch operator: its time is in the step but in no row.
"""

from __future__ import annotations

import argparse
import time

from torch.profiler import ProfilerActivity, profile

from cpuft.bench.spec import RunSpec
from cpuft.bench.worker import recipe, run_config
from cpuft.job.build import build_run
from cpuft.runtime import start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="bert-base", help="minilm, bert-base or a model folder")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--rows", type=int, default=15, help="operators shown")
    args = p.parse_args()
    spec = RunSpec(config="cpuft", model=args.model, steps=args.steps + 2,
                   batch_size=args.batch_size)
    cfg = run_config(spec)
    run = build_run(cfg, start(cfg).plan, recipe=recipe(spec))
    step = run.train_step()
    batches = [b for _, b in zip(range(args.steps + 2), run.source.iterate(0), strict=False)]
    for batch in batches[:2]:
        step(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for batch in batches[2:]:
            step(batch)
        wall = time.perf_counter() - started
    print(f"{args.model}: {wall / (len(batches) - 2) * 1e3:.0f} ms a step "
          f"({len(batches) - 2} steps of {args.batch_size})")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
