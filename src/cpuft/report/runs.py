"""What ``cpuft report`` reads from a run folder: its summary.json and metrics.jsonl."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError
from cpuft.log import get_logger

LOG = get_logger(__name__)


@dataclass(frozen=True)
class RunRecord:
    """One finished run of ``cpuft train``."""

    name: str
    recipe: str
    model: str
    precision: str
    nodes: int
    ranks: int
    samples_per_second: float
    train_seconds: float
    quality: tuple[str, float] | None
    """("accuracy", 0.83) or ("perplexity", 12.1): on the test split, else on validation."""
    steps: list[dict[str, Any]] = field(default_factory=list)
    """metrics.jsonl's records: step, loss, samples_per_second, seconds."""
    membership: list[dict[str, Any]] = field(default_factory=list)
    """An elastic job's changes of membership: time, step, world_size_before and _after,
    steps_trained_again."""


def _quality(summary: dict[str, Any]) -> tuple[str, float] | None:
    for split in ("test", "eval"):
        scores = summary.get(split)
        if not isinstance(scores, dict):
            continue
        for key in ("accuracy", "perplexity", "pearson"):
            if isinstance(scores.get(key), int | float):
                return key, float(scores[key])
    return None


def _steps(path: Path) -> list[dict[str, Any]]:
    """The records of metrics.jsonl with a step and a finite loss; how many others there were
    is logged."""
    if not path.is_file():
        return []
    records, skipped = [], 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None  # a line a stopped run left half-written
        if isinstance(record, dict) and isinstance(record.get("step"), int) \
                and isinstance(record.get("loss"), int | float) and math.isfinite(record["loss"]):
            records.append(record)
        elif line.strip():
            skipped += 1
    if skipped:
        LOG.warning(f"{path}: {skipped} line(s) left out: half-written, or without a step and a "
                    "finite loss")
    return records


def _membership(changes: Any) -> list[dict[str, Any]]:
    """The well-formed changes of summary.json's ``membership``."""
    keys = ("step", "world_size_before", "world_size_after", "steps_trained_again")
    return [c for c in changes or [] if isinstance(c, dict)
            and all(isinstance(c.get(k), int) for k in keys)]


def read_run(folder: Path) -> RunRecord:
    summary_path = folder / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except OSError:
        raise CpuftError(f"{folder}: no summary.json (not a finished run of cpuft train)") \
            from None
    except ValueError:
        raise CpuftError(f"{summary_path}: not JSON") from None
    if not isinstance(summary, dict):
        raise CpuftError(f"{summary_path}: not a summary of cpuft train (a JSON "
                         f"{type(summary).__name__}, not an object)")
    try:
        inputs = summary.get("forecast_inputs") or {}
        return RunRecord(
            name=folder.resolve().name,
            recipe=str(inputs.get("recipe") or summary.get("task") or "-"),
            model=str(summary.get("model") or "-"),
            precision=str(summary.get("precision") or "-"),
            nodes=int(summary.get("nodes") or 1),
            ranks=int(summary.get("world_size") or 1),
            samples_per_second=float(summary["train_samples_per_second"]),
            train_seconds=float(summary["train_seconds"]),
            quality=_quality(summary),
            steps=_steps(folder / "metrics.jsonl"),
            membership=_membership(summary.get("membership")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CpuftError(f"{summary_path}: not a summary of cpuft train ({e})") from None
