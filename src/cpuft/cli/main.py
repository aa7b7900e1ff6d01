"""``cpuft`` entry point: parse, dispatch, turn each CpuftError into one line and an exit code."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any

from cpuft import __version__
from cpuft.cli.args_file import expand_args_file
from cpuft.errors import CpuftError


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit with 2 after one line (argparse's own code is 2 too), a
    flag is never taken for a longer one that it begins (``--bf16`` is not ``--bf16-weights``),
    and an unknown flag is named with the nearest real ones of its own command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"cpuft: {message} (see `{self.prog} --help`)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            command = _command_parser(self, parsed)
            command.error(unknown_flags(unknown, command))
        return parsed


def _command_parser(parser: argparse.ArgumentParser,
                    parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)command that ``parsed`` went through."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
            if chosen is not None:
                return _command_parser(chosen, parsed)
    return parser


def unknown_flags(unknown: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """One line: the first unknown flag and the command's nearest real ones."""
    flag = next((u for u in unknown if u.startswith("-")), unknown[0]).split("=", 1)[0]
    # Compared with '_' as '-', so that HF's spelling finds cpuft's and the other way round.
    known: dict[str, str] = {}
    for action in parser._actions:
        for option in action.option_strings:  # cpuft's own spelling first, HF's after it
            if option.startswith("--"):
                known.setdefault(option.replace("_", "-"), option)
    typed = flag.replace("_", "-")
    begun = [k for k in known if k.startswith(typed) and k != typed]  # what a prefix meant
    close = difflib.get_close_matches(typed, known, n=3, cutoff=0.7)
    near = [known[k] for k in dict.fromkeys([*begun, *close])][:3]
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    what = "unknown flag" if flag.startswith("-") else "unexpected argument"
    return f"{what} {flag}{hint}"


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    found = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = found.choices[name]
    return sub


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
    # Not "command": that is what launch, slurm script and k8s manifest call what ranks run.
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)
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
    given = list(argv if argv is not None else sys.argv[1:])
    try:
        given = expand_args_file(given, _subcommand(parser, "train"))
    except CpuftError as e:
        print(f"cpuft: {e}", file=sys.stderr)
        return e.exit_code
    args = parser.parse_args(given)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    # Re-executing (to preload an allocator) is only safe when this process is the command itself.
    args.may_reexec = argv is None
    args.argv = given[1:]
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
