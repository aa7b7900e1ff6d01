"""Checkpoints written atomically (temp dir, then rename) and read back with weights_only."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from cpuft.errors import CpuftError

PREFIX = "checkpoint-"
STATE_FILE = "state.pt"


def checkpoint_dirs(output_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (a half-written one has no final name yet)."""
    found = []
    for p in output_dir.glob(PREFIX + "*"):
        m = re.fullmatch(PREFIX + r"(\d+)", p.name)
        if m and (p / STATE_FILE).is_file():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: Path) -> Path | None:
    dirs = checkpoint_dirs(output_dir)
    return dirs[-1] if dirs else None


def save_checkpoint(output_dir: Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` as checkpoint-<step>; keep the newest ``keep`` checkpoints."""
    final = output_dir / f"{PREFIX}{step}"
    tmp = output_dir / f".{PREFIX}{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with (tmp / STATE_FILE).open("wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in checkpoint_dirs(output_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = torch.load(path / STATE_FILE, weights_only=True)
    except Exception as e:
        raise CpuftError(f"checkpoint {path} cannot be read: {e}") from None
    return state
