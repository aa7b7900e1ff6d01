"""Run a short command to completion: the one place outside a job's launch where cpuft starts a
process (the C compiler for its kernels, ``ip`` for namespaced test hosts, bench workers)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from cpuft.errors import CpuftError


def run_command(argv: Sequence[str], timeout: float = 300.0) -> str:
    """Run ``argv``; '' when it succeeded, else why not, in one line."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except OSError as err:
        return f"{argv[0]} could not run: {err.strerror or err}"
    except subprocess.TimeoutExpired:
        return f"{argv[0]} ran past {timeout:.0f} s"
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        return f"{argv[0]} failed (exit {proc.returncode}): {lines[0] if lines else 'no output'}"
    return ""


def run_python(argv: Sequence[str], env: dict[str, str], what: str,
               timeout: float | None = None) -> str:
    """Run a Python worker (``what``, for messages) with its own environment; its stderr passes
    through, its stdout is returned."""
    try:
        proc = subprocess.run(list(argv), env=env, stdout=subprocess.PIPE, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise CpuftError(f"{what} ran past {timeout:.0f}s") from None
    if proc.returncode != 0:
        raise CpuftError(f"{what} failed with exit code {proc.returncode}")
    return proc.stdout
