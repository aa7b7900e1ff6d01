"""cpuft's messages, through Python's logging under the ``cpuft`` name.

Every module logs to ``get_logger(__name__)`` (``cpuft.job.train``...). On first use the
``cpuft`` logger gets the level INFO, unless the program set one, and, unless the program gave
it handlers, one of cpuft's: the messages as they are (after their time and level with
``CPUFT_LOG_FORMAT=time``), on standard output, from rank 0 of a job alone (every rank with
``CPUFT_LOG_ALL_RANKS=1``). Raise, lower or route them as any logger's:
``logging.getLogger("cpuft").setLevel(logging.WARNING)``, or handlers of your own.
"""

from __future__ import annotations

import logging
import os
import sys

NAME = "cpuft"
ALL_RANKS_ENV = "CPUFT_LOG_ALL_RANKS"
FORMAT_ENV = "CPUFT_LOG_FORMAT"
"""``time``: each message after its time and level (``2026-12-08 00:41:02 INFO ...``)."""
FORMATS = {"time": "%(asctime)s %(levelname)s %(message)s"}
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


class _Stdout(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is when a message comes (a test's capture, a rank's
    prefixed stream), not to the one there when cpuft started."""

    @property
    def stream(self) -> object:
        return sys.stdout

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


class _RankZero(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if os.environ.get(ALL_RANKS_ENV) == "1":
            return True
        rank = next((os.environ[v] for v in _RANK_VARS if v in os.environ), "0")
        return rank == "0"


def get_logger(name: str) -> logging.Logger:
    """The logger of cpuft module ``name``, the ``cpuft`` logger set up on first use."""
    root = logging.getLogger(NAME)
    if not getattr(root, "_cpuft_configured", False):
        root._cpuft_configured = True  # type: ignore[attr-defined]
        if root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
        if not root.handlers:
            handler = _Stdout()
            handler.setFormatter(logging.Formatter(
                FORMATS.get(os.environ.get(FORMAT_ENV, ""), "%(message)s"),
                datefmt="%Y-%m-%d %H:%M:%S"))
            handler.addFilter(_RankZero())
            root.addHandler(handler)
            root.propagate = False
    return logging.getLogger(name)


def quiet() -> None:
    """From here on, only cpuft's warnings and errors: for a worker whose output is its result."""
    get_logger(NAME).setLevel(logging.WARNING)
