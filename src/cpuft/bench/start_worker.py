"""A benchmark worker: a Python module run in a fresh process with its own environment."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from cpuft.launch.proc import run_python


def worker_command(module: str, args: Sequence[str], extra_env: dict[str, str],
                   unset: Sequence[str] = (),
                   environ: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, env) for ``python -m module args`` with ``extra_env`` set and ``unset`` removed."""
    env = {k: v for k, v in (environ if environ is not None else os.environ).items()
           if k not in unset}
    env.update(extra_env)
    return [sys.executable, "-m", module, *args], env


def run_worker(module: str, args: Sequence[str], extra_env: dict[str, str],
               unset: Sequence[str] = (), timeout: float | None = None) -> str:
    """Run the worker to completion; its stderr passes through, its stdout is returned."""
    cmd, env = worker_command(module, args, extra_env, unset)
    return run_python(cmd, env, f"{module} {' '.join(args)}", timeout)
