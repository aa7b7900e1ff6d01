"""TensorBoard events beside metrics.jsonl (``--report-to tensorboard``), which stays the
record, under HF Trainer's tag names: the logged training metrics under ``train/``
(``train/loss``, ``train/learning_rate``, ``train/grad_norm``, ``train/epoch``), the
evaluations under ``eval/``, and the run's settings as hyperparameters and as the ``args``
text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError
from cpuft.metrics.logger import MetricSink

FOLDER = "tensorboard"
TRAIN_TAGS = {"loss": "train/loss", "lr": "train/learning_rate", "grad_norm": "train/grad_norm",
              "epoch": "train/epoch", "samples_per_second": "train/samples_per_second",
              "tokens_per_second": "train/tokens_per_second"}
"""metrics.jsonl's fields and the tags they take (Trainer's, where Trainer logs the same)."""


def hparam(value: Any) -> bool | int | float | str:
    """A setting as TensorBoard's hyperparameters take it (no None, lists or paths)."""
    if isinstance(value, bool | int | float | str):
        return value
    return "" if value is None else str(value)


class TensorBoardSink(MetricSink):
    """Writes events in ``log_dir``; from ``purge_step`` on, a resumed run's events replace
    those of the steps it trains again. ``settings`` (the run's, by their flat names) go in
    as hyperparameters and as the ``args`` text, as Trainer writes its arguments."""

    def __init__(self, log_dir: Path, purge_step: int | None = None,
                 settings: dict[str, Any] | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise CpuftError("--report-to tensorboard needs TensorBoard: pip install "
                             "'cpuft[tensorboard]'") from None
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        if settings:
            self._writer.add_text("args", json.dumps(settings, indent=2, default=str))
            self._writer.add_hparams({k: hparam(v) for k, v in settings.items()},
                                     metric_dict={}, run_name=".")

    def log(self, record: dict[str, Any]) -> None:
        for name, tag in TRAIN_TAGS.items():
            if name in record:
                self._writer.add_scalar(tag, record[name], record["step"])
        self._writer.flush()

    def evaluation(self, record: dict[str, Any]) -> None:
        for name, value in record.items():
            if name.startswith("eval_"):
                self._writer.add_scalar(f"eval/{name.removeprefix('eval_')}", value,
                                        record["step"])
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
