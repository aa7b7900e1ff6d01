"""TensorBoard events beside metrics.jsonl (``--report-to tensorboard``), which stays the
record: the logged training metrics under ``train/``, the evaluations under ``eval/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError
from cpuft.metrics.logger import MetricSink

FOLDER = "tensorboard"
TRAIN_SCALARS = ("loss", "lr", "epoch", "samples_per_second", "tokens_per_second")


class TensorBoardSink(MetricSink):
    """Writes events in ``log_dir``; from ``purge_step`` on, a resumed run's events replace
    those of the steps it trains again."""

    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise CpuftError("--report-to tensorboard needs TensorBoard: pip install "
                             "'cpuft[tensorboard]'") from None
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log(self, record: dict[str, Any]) -> None:
        for name in TRAIN_SCALARS:
            if name in record:
                self._writer.add_scalar(f"train/{name}", record[name], record["step"])
        self._writer.flush()

    def evaluation(self, record: dict[str, Any]) -> None:
        for name, value in record.items():
            if name.startswith("eval_"):
                self._writer.add_scalar(f"eval/{name.removeprefix('eval_')}", value,
                                        record["step"])
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
