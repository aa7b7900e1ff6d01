"""A metric logger that does nothing by itself and hands each record to its sinks."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from cpuft.log import get_logger

LOG = get_logger(__name__)


class MetricSink:
    """Receives step records; every method is optional."""

    def start(self, total_steps: int, first_step: int = 0) -> None:
        pass

    def step(self, record: dict[str, Any]) -> None:
        """Every optimizer step (cheap sinks only: a progress bar)."""

    def log(self, record: dict[str, Any]) -> None:
        """Every logging step."""

    def evaluation(self, record: dict[str, Any]) -> None:
        """Every evaluation while training: step, epoch and eval_<score> each."""

    def close(self) -> None:
        pass


class JsonlSink(MetricSink):
    """One JSON line per logged step, flushed at once so that a crash loses nothing."""

    def __init__(self, path: Path, append: bool = False) -> None:
        self._file: TextIO = path.open("a" if append else "w")

    def log(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    evaluation = log

    def close(self) -> None:
        self._file.close()


class ProgressSink(MetricSink):
    """A rich progress bar: steps, loss, samples/s and time left."""

    def __init__(self, description: str = "train") -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[speed]} samples/s"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            transient=False,
        )
        self._task = self._progress.add_task(description, total=None, loss="-", speed="-")

    def start(self, total_steps: int, first_step: int = 0) -> None:
        self._progress.update(self._task, total=total_steps, completed=first_step)
        self._progress.start()

    def step(self, record: dict[str, Any]) -> None:
        self._progress.update(
            self._task,
            completed=record["step"],
            loss=f"{record['loss']:.4f}",
            speed=f"{record['samples_per_second']:.1f}",
        )

    def log(self, record: dict[str, Any]) -> None:
        LOG.info(describe_log(record))

    def evaluation(self, record: dict[str, Any]) -> None:
        LOG.info(describe_evaluation(record))

    def close(self) -> None:
        self._progress.stop()


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


class LineProgressSink(MetricSink):
    """Progress as a plain line at most every ``every_s`` seconds, and at the last step: for a
    log file (Slurm, Kubernetes, nohup), where a progress bar draws nothing; and the logged
    metrics at every logging step, as Trainer prints them."""

    def __init__(self, description: str = "train", every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._description, self._every_s, self._clock = description, every_s, clock
        self._total = self._first = 0
        self._started = self._last = 0.0

    def start(self, total_steps: int, first_step: int = 0) -> None:
        self._total, self._first = total_steps, first_step
        self._started = self._last = self._clock()

    def step(self, record: dict[str, Any]) -> None:
        now, step = self._clock(), int(record["step"])
        if now - self._last < self._every_s and step < self._total:
            return
        self._last = now
        elapsed, done = now - self._started, step - self._first
        left = elapsed / done * (self._total - step) if done > 0 else 0.0
        LOG.info(f"{self._description}: step {step}/{self._total} "
                 f"({step / max(self._total, 1):.0%}), loss {record['loss']:.4f}, "
                 f"{record['samples_per_second']:.1f} samples/s, {_clock(elapsed)} elapsed, "
                 f"{_clock(left)} left")

    def log(self, record: dict[str, Any]) -> None:
        LOG.info(describe_log(record))

    def evaluation(self, record: dict[str, Any]) -> None:
        LOG.info(describe_evaluation(record))


LOGGED = (("loss", "loss {:.4f}"), ("lr", "learning_rate {:.3g}"),
          ("grad_norm", "grad_norm {:.4g}"), ("epoch", "epoch {:g}"),
          ("samples_per_second", "{:.1f} samples/s"))
"""What a logging step's console line says, in Trainer's words, where the record has it."""


def describe_log(record: dict[str, Any]) -> str:
    said = ", ".join(text.format(record[name]) for name, text in LOGGED if name in record)
    return f"step {record['step']}: {said}"


def describe_evaluation(record: dict[str, Any]) -> str:
    scores = ", ".join(f"{name.removeprefix('eval_')} {value:.4g}"
                       for name, value in record.items() if name.startswith("eval_"))
    return f"evaluation at step {record['step']} (epoch {record['epoch']:g}): {scores}"


class Ticker:
    """Plain progress lines for work without a bar (evaluation, calibration): one at most every
    ``every_s`` seconds, so that work shorter than that says nothing."""

    def __init__(self, description: str, total: int, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._description, self._total, self._every_s, self._clock = (
            description, total, every_s, clock)
        self._done = 0
        self._started = self._last = clock()

    def advance(self, n: int = 1) -> None:
        self._done += n
        now = self._clock()
        if now - self._last < self._every_s:
            return
        self._last = now
        elapsed = now - self._started
        left = elapsed / self._done * (self._total - self._done) if self._done else 0.0
        LOG.info(f"{self._description}: {self._done}/{self._total} "
                 f"({self._done / max(self._total, 1):.0%}), {_clock(elapsed)} elapsed, "
                 f"{_clock(left)} left")


def progress_sink(description: str) -> MetricSink:
    """A progress bar on a terminal; plain lines every so often anywhere else."""
    return ProgressSink(description) if sys.stdout.isatty() else LineProgressSink(description)


class MetricLogger:
    """Fans records out to sinks. With no sinks it does nothing (non-zero ranks, tests)."""

    def __init__(self, sinks: list[MetricSink] | None = None) -> None:
        self.sinks = list(sinks or [])

    def start(self, total_steps: int, first_step: int = 0) -> None:
        for s in self.sinks:
            s.start(total_steps, first_step)

    def step(self, record: dict[str, Any]) -> None:
        for s in self.sinks:
            s.step(record)

    def log(self, record: dict[str, Any]) -> None:
        for s in self.sinks:
            s.log(record)

    def evaluation(self, record: dict[str, Any]) -> None:
        for s in self.sinks:
            s.evaluation(record)

    def close(self) -> None:
        for s in self.sinks:
            s.close()
