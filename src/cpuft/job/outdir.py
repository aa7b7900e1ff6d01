"""The run folder: check it before anything loads, clear it only once the new run is ready,
and keep a resumed run's settings and metrics consistent."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from cpuft.config import TrainConfig, to_flat
from cpuft.engine.checkpoint import latest_checkpoint
from cpuft.errors import CpuftError

RUN_MARKER = "cpuft_run.json"
RESUME_KEEPS = ("model", "task", "data_dir", "train_file", "validation_file", "text_columns",
                "label_column", "validation_split", "max_seq_length", "batch_size", "grad_accum",
                "lr", "warmup_ratio", "lr_schedule", "weight_decay", "max_grad_norm", "seed",
                "group_by_length")
"""Settings a resumed run must share with the run it continues: with any other, its remaining
steps would see other data or other updates. Steps, epochs, saving, logging and the speed
options may change."""


def check_output_dir(cfg: TrainConfig) -> tuple[Path, Path | None]:
    """The output dir and the checkpoint to resume from (if --resume); changes nothing.

    Clearing waits for ``clear_output_dir``, after the data and the model have loaded, so a run
    that fails its checks leaves the run already there as it was.
    """
    out = Path(cfg.output.output_dir)
    if out.exists() and not out.is_dir():
        raise CpuftError(f"--output-dir {out} is a file")
    holds_run = (out / RUN_MARKER).is_file()
    if cfg.output.resume:
        ckpt = latest_checkpoint(out) if holds_run else None
        if ckpt is None:
            raise CpuftError(f"--resume: no checkpoint in {out}")
        return out, ckpt
    if out.is_dir() and any(out.iterdir()):
        if not holds_run:
            raise CpuftError(f"--output-dir {out} is not empty and holds no cpuft run: use another")
        if not cfg.output.overwrite:
            raise CpuftError(
                f"--output-dir {out} holds another run: pass --overwrite to replace it, "
                "or --resume to continue it"
            )
    return out, None


def check_resume_settings(out: Path, cfg: TrainConfig) -> None:
    """Refuse to resume the run in ``out`` with settings that would make it another run."""
    try:
        saved = json.loads((out / RUN_MARKER).read_text())["config"]
    except (OSError, ValueError, KeyError):
        raise CpuftError(f"--resume: {out / RUN_MARKER} cannot be read") from None
    now = json.loads(json.dumps(to_flat(cfg)))
    changed = [key for key in RESUME_KEEPS if key in saved and saved[key] != now[key]]
    if changed:
        def shown(value: Any) -> str:
            return ",".join(map(str, value)) if isinstance(value, list) else str(value)

        diffs = "; ".join(f"--{key.replace('_', '-')} was {shown(saved[key]) or '(unset)'}, now "
                          f"{shown(now[key]) or '(unset)'}" for key in changed)
        raise CpuftError(f"--resume: the run in {out} had other settings ({diffs}): resume with "
                         "its settings, or start a new run in another --output-dir")


def clear_output_dir(out: Path, resume_from: Path | None) -> None:
    """Empty the output dir for a new run (``check_output_dir`` allowed it); keep it to resume."""
    if resume_from is None and out.is_dir():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def trim_metrics(path: Path, last_step: int) -> None:
    """Drop records after the checkpoint being resumed, so steps are not logged twice."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= last_step]
    path.write_text("".join(line + "\n" for line in kept))
