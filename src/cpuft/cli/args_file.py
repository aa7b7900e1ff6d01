"""``cpuft train ARGS.json [FLAGS]``: a JSON file of arguments, as HfArgumentParser reads one
(``python run_glue.py args.json``), taken as the flags it names typed before FLAGS."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError


def expand_args_file(argv: list[str], train: argparse.ArgumentParser) -> list[str]:
    """``argv`` with ``train ARGS.json`` replaced by ``train`` and the file's flags; ``argv``
    as it is where it names no such file."""
    if len(argv) < 2 or argv[0] != "train" or not argv[1].endswith(".json"):
        return argv
    path = argv[1]
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise CpuftError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise CpuftError(f"{path} does not parse as JSON: {e}") from None
    if not isinstance(data, dict):
        raise CpuftError(f"{path}: expected an object of arguments")
    options = train._option_string_actions
    flags: list[str] = []
    for key, value in data.items():
        flag = next((f for f in (f"--{key}", f"--{str(key).replace('_', '-')}")
                     if f in options), None)
        if flag is None or flag == "--config":
            raise CpuftError(f"{path}: {key!r} is not an argument cpuft train takes "
                             "(docs/hf-trainer.md)")
        flags += _as_flags(flag, options[flag], value)
    return ["train", *flags, *argv[2:]]


def _as_flags(flag: str, action: argparse.Action, value: Any) -> list[str]:
    """What one argument of the file is on the command line."""
    if value is None:
        return []
    if isinstance(action, argparse.BooleanOptionalAction):
        return [flag if value else f"--no-{flag[2:]}"]
    if action.nargs == 0:  # store_true, store_const: given or not
        return [flag] if value else []
    if isinstance(value, bool):
        return [flag, str(value).lower()]
    if isinstance(value, list):
        items = [str(v) for v in value]
        return [flag, *items] if action.nargs in ("+", "*") else [flag, ",".join(items)]
    return [flag, str(value)]
