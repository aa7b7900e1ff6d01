"""Start a Python worker process with its own environment and wait for it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from cpuft.errors import CpuftError


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
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        raise CpuftError(f"{module} {' '.join(args)} ran past {timeout:.0f}s") from None
    if proc.returncode != 0:
        raise CpuftError(f"{module} {' '.join(args)} failed with exit code {proc.returncode}")
    return proc.stdout
