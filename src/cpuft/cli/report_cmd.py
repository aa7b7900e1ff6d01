"""``cpuft report RUN_DIR...``: finished runs side by side, in markdown with its pictures."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cpuft.cli.numbers import finite_float


def register(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="markdown report of finished runs: table, speed-up, loss, throughput",
        description="Read the summary.json and metrics.jsonl of each run folder and write "
                    "report.md with loss.png and throughput.png beside it: the runs side by "
                    "side (recipe, model, precision, nodes, samples/s, accuracy or perplexity, "
                    "time, cost), and each run's speed-up against the first.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--output-dir", default="report-out", help="where report.md and its PNGs go")
    p.add_argument("--price-per-node-hour", type=finite_float, default=0.0,
                   help="US$ a node an hour, to price each run's training time")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from cpuft.cli.output import check_writable_dir
    from cpuft.errors import CpuftError
    from cpuft.report.document import FILES, write_report
    from cpuft.report.runs import read_run

    if args.price_per_node_hour < 0:
        raise CpuftError("--price-per-node-hour must be positive")
    check_writable_dir(args.output_dir, "--output-dir")
    out = Path(args.output_dir)
    others = sorted(p.name for p in out.iterdir() if p.name not in FILES) \
        if out.is_dir() else []
    if others:
        raise CpuftError(f"--output-dir {out} holds other files ({', '.join(others[:3])}): "
                         "give a new folder, or one that holds only a report")
    runs = [read_run(Path(folder)) for folder in args.runs]
    written = write_report(runs, Path(args.output_dir), args.price_per_node_hour or None)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
