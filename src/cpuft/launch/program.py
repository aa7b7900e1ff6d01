"""What each rank of ``cpuft launch`` runs: ``cpuft train``, or a script or module of the
user's, through ``cpuft.distributed.script`` (which pins the rank and names its errors)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from cpuft.errors import CpuftError

TRAIN = ("-m", "cpuft", "train")
SCRIPT_RUNNER = ("-m", "cpuft.distributed.script")
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
USAGE = ("give what each rank runs: `cpuft launch -- train ARGS`, `cpuft launch -- python "
         "SCRIPT.py ARGS`, `cpuft launch -- python -m MODULE ARGS` or `cpuft launch SCRIPT.py "
         "ARGS`")


@dataclass(frozen=True, slots=True)
class RankProgram:
    program: tuple[str, ...]
    """What follows the interpreter on every rank, before ``args``."""
    args: tuple[str, ...]
    is_train: bool


def rank_program(command: list[str]) -> RankProgram:
    """The rank program of ``cpuft launch``'s trailing command. The interpreter is the one
    cpuft runs under (``python`` in the command names it): its options are not passed on."""
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise CpuftError(USAGE)
    if command[0] == "train":
        return RankProgram(TRAIN, tuple(command[1:]), True)
    rest = command[1:] if os.path.basename(command[0]).startswith("python") else command
    if rest[:1] == ["-m"]:
        if len(rest) < 2 or not MODULE.fullmatch(rest[1]):
            raise CpuftError("-m needs a module name, e.g. `cpuft launch -- python -m my.train`")
        return RankProgram((*SCRIPT_RUNNER, "-m", rest[1]), tuple(rest[2:]), False)
    if not rest or rest[0].startswith("-"):
        raise CpuftError(USAGE)
    script = rest[0]
    if not script.endswith(".py") and rest is command:
        raise CpuftError(f"{script!r} is neither train nor a .py script: {USAGE}")
    if not os.path.isfile(script):
        raise CpuftError(f"{script}: no such file")
    return RankProgram((*SCRIPT_RUNNER, script), tuple(rest[1:]), False)


def user_command(program: tuple[str, ...] | list[str], args: list[str]) -> list[str]:
    """The trailing command of ``cpuft launch`` that gives ``program`` with ``args``: the
    inverse of ``rank_program``, for a launcher that starts another ``cpuft launch``."""
    program = tuple(program)
    if program == TRAIN:
        return ["train", *args]
    if program[:len(SCRIPT_RUNNER)] == SCRIPT_RUNNER:
        return ["python", *program[len(SCRIPT_RUNNER):], *args]
    raise CpuftError(f"cannot hand {' '.join(program)} to another launcher")
