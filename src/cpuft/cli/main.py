"""``cpuft`` entry point: parse, dispatch, turn each CpuftError into one line and an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cpuft import __version__
from cpuft.errors import CpuftError


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit with 2 after one line (argparse's own code is 2 too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"cpuft: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from cpuft.cli import (
        bench_cmd,
        cluster_cmd,
        doctor_cmd,
        env_cmd,
        forecast_cmd,
        k8s_cmd,
        launch_cmd,
        rendezvous_cmd,
        report_cmd,
        slurm_cmd,
        train_cmd,
    )

    parser = _Parser(prog="cpuft", description="Fast fine-tuning of PyTorch models on CPUs.")
    parser.add_argument("--version", action="version", version=f"cpuft {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    train_cmd.register(sub)
    launch_cmd.register(sub)
    bench_cmd.register(sub)
    doctor_cmd.register(sub)
    env_cmd.register(sub)
    cluster_cmd.register(sub)
    forecast_cmd.register(sub)
    report_cmd.register(sub)
    slurm_cmd.register(sub)
    k8s_cmd.register(sub)
    rendezvous_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    # Re-executing (to preload an allocator) is only safe when this process is the command itself.
    args.may_reexec = argv is None
    args.argv = list(argv or sys.argv[1:])[1:]
    try:
        code: int = args.handler(args)
        return code
    except CpuftError as e:
        print(f"cpuft: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("cpuft: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
