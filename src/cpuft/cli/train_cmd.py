"""``cpuft train``: fine-tune a model with every CPU speed-up that pays on this machine."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from cpuft.cli.flags import add_train_flags, config_from_args
from cpuft.cli.launch_flags import (
    add_launch_flags,
    launch_request,
    strip_launch_flags,
    wants_launch,
)

DESCRIPTION = """\
Fine-tune a pretrained model with a recipe: classifier (sequence classification or
regression, the default), causal-lm (a decoder, in full or with LoRA), or one registered with
cpuft.config.register_recipe. Each recipe's own settings are refused by the others.

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
    add_launch_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from cpuft.distributed.env import rank_info
    from cpuft.launch.reexec import already_reexecuted, reexec
    from cpuft.speedplan.allocator import allocator_env, choose_allocator

    cfg = config_from_args(args)
    me = rank_info(os.environ)
    if wants_launch(args) and not me.distributed:
        from cpuft.launch.elastic import check_batch_splits
        from cpuft.launch.request import build_launch
        from cpuft.launch.run import run_job

        request = launch_request(args, strip_launch_flags(args.argv), cfg.speedups.allocator)
        if request.min_nodes is not None and request.nnodes is not None:
            check_batch_splits(cfg.optimization.batch_size, request.min_nodes, request.nnodes)
        return run_job(build_launch(request))
    if me.distributed:
        from cpuft.launch.tagged_output import tag_rank_output

        tag_rank_output(me.rank)
    allocator, path, _ = choose_allocator(cfg.speedups.allocator)
    preload = allocator_env(allocator, path)
    if preload and args.may_reexec and not already_reexecuted():
        failed = reexec(sys.argv[1:], preload)
        print(f"cpuft: could not restart with {allocator} preloaded ({failed}): running "
              "with the system allocator", file=sys.stderr)

    from cpuft.job.train import train

    summary = train(cfg)
    if summary:
        print_summary(summary, cfg.output.output_dir)
    return 0


def print_summary(summary: dict[str, Any], output_dir: str) -> None:
    print(
        f"trained {summary['steps']} steps in {summary['train_seconds']:.1f}s "
        f"({summary['train_samples_per_second']:.1f} samples/s on {summary['world_size']} "
        f"rank(s), precision {summary['precision']}, allocator {summary['speedups']['allocator']})"
    )
    for split in ("eval", "test"):
        if summary.get(split):
            scores = ", ".join(f"{k} {v:.4f}" for k, v in summary[split].items())
            print(f"{'validation' if split == 'eval' else 'test'}: {scores}")
    print(f"model, metrics.jsonl and summary.json in {output_dir}")
    print(json.dumps({"eval": summary["eval"], "test": summary.get("test")}))
