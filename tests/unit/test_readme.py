"""The README stays short, and each figure in its results stands beside a command cpuft takes."""

import re
import shlex
from pathlib import Path

from cpuft.bench.runner import BenchOptions, plan_runs
from cpuft.cli.main import build_parser

README = Path(__file__).parents[2] / "README.md"


def test_the_readme_stays_under_14_kb():
    assert len(README.read_bytes()) <= 14_000


def test_every_results_command_is_a_bench_cpuft_runs():
    results = README.read_text().split("## Results", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"`(cpuft bench [^`]+)`", results)
    assert len(commands) >= 2
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[1:])
        runs = plan_runs(BenchOptions(
            models=args.models.split(","), configs=args.configs.split(","), quick=args.quick,
            rounds=args.rounds, seed_each_round=args.seed_each_round, ablate=args.ablate))
        assert {"trainer-best", "cpuft"} <= {r.config for r in runs}, command
        assert args.rounds >= 3, command
