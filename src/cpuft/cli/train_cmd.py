"""``cpuft train``: fine-tune a model with every CPU speed-up that pays on this machine."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cpuft.cli.flags import add_train_flags, given_flags

DESCRIPTION = """\
Fine-tune a pretrained model for sequence classification (or regression).

With no arguments it runs the default job: all-MiniLM-L6-v2 on Rotten Tomatoes review snippets
(fresh/rotten) for one epoch, with a fixed seeded train/validation/test split.

Data comes from a built-in task (--task rotten_tomatoes), a GLUE task in its TSV layout
(--task mrpc --data-dir DIR), or your files (--train-file, --text-columns, --label-column).
Speed-ups (bf16 where the CPU has it natively, fused AdamW, dynamic padding with length-grouped
batches, threads and pinning, tcmalloc/jemalloc, compile where it pays) are on by default, each
with an off switch, and each is recorded in OUTPUT_DIR/summary.json.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "train", help="fine-tune a model (the default job with no arguments)",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_train_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from cpuft.config import build_config, load_config_file
    from cpuft.launch.reexec import already_reexecuted, reexec
    from cpuft.speedups import allocator_env, make_plan
    from cpuft.topology import read_topology

    cfg = build_config(load_config_file(args.config) if args.config else {}, given_flags(args))
    plan = make_plan(cfg, read_topology())
    preload = allocator_env(plan)
    if preload and args.may_reexec and not already_reexecuted():
        reexec(sys.argv[1:], preload)

    from cpuft.train.job import run_train
    from cpuft.train.runtime import apply_plan

    apply_plan(plan, cfg.pin_cores)
    summary = run_train(cfg, plan)
    print_summary(summary, cfg.output_dir)
    return 0


def print_summary(summary: dict[str, Any], output_dir: str) -> None:
    print(
        f"trained {summary['steps']} steps in {summary['train_seconds']:.1f}s "
        f"({summary['train_samples_per_second']:.1f} samples/s, precision {summary['precision']}, "
        f"allocator {summary['speedups']['allocator']})"
    )
    for split in ("eval", "test"):
        if summary.get(split):
            scores = ", ".join(f"{k} {v:.4f}" for k, v in summary[split].items())
            print(f"{'validation' if split == 'eval' else 'test'}: {scores}")
    print(f"model, metrics.jsonl and summary.json in {output_dir}")
    print(json.dumps({"eval": summary["eval"], "test": summary.get("test")}))
