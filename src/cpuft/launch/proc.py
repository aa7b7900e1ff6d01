"""Run a short command to completion: the one place outside a job's launch where cpuft starts a
process (the C compiler for its kernels, ``ip`` for namespaced test hosts, bench workers, the
daemons of the test Slurm cluster)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

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


def run_output(argv: Sequence[str], env: dict[str, str] | None = None,
               timeout: float = 300.0) -> tuple[int, str, str]:
    """Run ``argv``; its exit code, stdout and stderr (127 where it could not start)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False, env=env, stdin=subprocess.DEVNULL)
    except OSError as err:
        return 127, "", f"{argv[0]} could not run: {err.strerror or err}"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} ran past {timeout:.0f} s"
    return proc.returncode, proc.stdout, proc.stderr


def start_daemon(argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
    """Start ``argv`` in a session of its own, its output to ``log``, and leave it running."""
    with log.open("w") as out:
        subprocess.Popen(list(argv), stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                         start_new_session=True, env=env)
