"""Stopping a run between steps: SIGTERM (a spot instance going away) or a first Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from cpuft.errors import CpuftError


class Interrupted(CpuftError):
    """Training stopped by a signal; a checkpoint was written when it could be."""

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


@contextlib.contextmanager
def stop_flag() -> Iterator[dict[str, int]]:
    """A flag set by SIGTERM or a first Ctrl-C, which the loop reads between steps, so that the
    checkpoint holds a whole step; a second Ctrl-C stops at once."""
    flag: dict[str, int] = {}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT and flag:
            raise KeyboardInterrupt
        flag["signal"] = signum

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
