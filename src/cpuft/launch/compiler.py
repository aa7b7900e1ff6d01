"""Run the C compiler for cpuft's kernels (see cpuft.kernels.build)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence


def compile_command(cc: str, flags: Sequence[str], source: str, output: str) -> list[str]:
    return [cc, *flags, source, "-o", output]


def run_compiler(argv: Sequence[str], timeout: float = 300.0) -> str:
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
