"""Re-start this command in a fresh process whose environment preloads the allocator.

LD_PRELOAD only works when a process starts, so ``cpuft train`` re-executes itself once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

MARKER = "CPUFT_REEXEC"


def already_reexecuted(environ: dict[str, str] | None = None) -> bool:
    return (environ if environ is not None else os.environ).get(MARKER) == "1"


def reexec_command(argv: Sequence[str], extra_env: dict[str, str],
                   environ: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of the re-executed command: the same cpuft arguments, the new environment."""
    env = dict(environ if environ is not None else os.environ)
    env.update(extra_env)
    env[MARKER] = "1"
    return [sys.executable, "-m", "cpuft", *argv], env


def reexec(argv: Sequence[str], extra_env: dict[str, str]) -> str:
    """Become the same command with ``extra_env``; returns only if that failed, saying why."""
    cmd, env = reexec_command(argv, extra_env)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(cmd[0], cmd, env)
    except OSError as e:
        return f"{cmd[0]}: {e.strerror or e}"
    return "execve returned"  # it never does on success
