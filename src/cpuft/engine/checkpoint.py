"""Checkpoints written atomically (temp dir, then rename) and read back with weights_only."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn

from cpuft.errors import CpuftError, first_line

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


def _mount_point(path: Path) -> Path:
    at = path.absolute()
    while not os.path.ismount(at) and at != at.parent:
        at = at.parent
    return at


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_stale_temps(output_dir: Path) -> None:
    """Half-written checkpoints that a process which is gone left behind (a full disk, a kill)."""
    for tmp in output_dir.glob(f".{PREFIX}*.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                os.kill(int(pid), 0)
                continue  # its writer still runs
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        shutil.rmtree(tmp, ignore_errors=True)


KEEP = 2
"""Checkpoints kept while training where no limit is given: the newest, and one more in case the
newest turns out damaged."""


def save_checkpoint(output_dir: Path, step: int, state: dict[str, Any], keep: int = KEEP,
                    protect: int = 0) -> Path:
    """Write ``state`` as checkpoint-<step>; keep the newest ``keep`` checkpoints, and the one
    of step ``protect`` (the best model so far) besides.

    The checkpoint is written whole under a temporary name, synced, then renamed into place, and
    the folder synced: a crash leaves the last checkpoint as it was. A write that fails (a full
    disk) removes its own part and says which disk.
    """
    return _save(output_dir, step, lambda f: torch.save(state, f), keep, protect)


def save_checkpoint_bytes(output_dir: Path, step: int, data: bytes, keep: int = KEEP) -> Path:
    """Write a checkpoint's file as another node read it (``checkpoint_bytes``), as
    ``save_checkpoint`` writes one."""
    return _save(output_dir, step, lambda f: f.write(data), keep, 0)


def checkpoint_bytes(path: Path) -> bytes:
    return (path / STATE_FILE).read_bytes()


def checkpoint_step(path: Path) -> int:
    return int(path.name.removeprefix(PREFIX))


def _save(output_dir: Path, step: int, write: Callable[[BinaryIO], object], keep: int,
          protect: int) -> Path:
    _remove_stale_temps(output_dir)
    final = output_dir / f"{PREFIX}{step}"
    tmp = output_dir / f".{PREFIX}{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        with (tmp / STATE_FILE).open("wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
    except (OSError, RuntimeError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        disk = _mount_point(output_dir)
        free = shutil.disk_usage(disk).free // 2**20 if disk.exists() else 0
        last = latest_checkpoint(output_dir)
        kept = f"; the last checkpoint, {last}, is intact" if last else ""
        why = e.strerror if isinstance(e, OSError) and e.strerror else first_line(e)
        raise CpuftError(f"cannot write checkpoint {final} on {disk} ({free} MiB free: {why})"
                         f"{kept}: free some space, then rerun with --resume") from None
    old = None
    if final.exists():  # moved aside, not deleted, until the new one is in place
        old = output_dir / f".{PREFIX}{step}.old-{os.getpid()}"
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(output_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    for stale in checkpoint_dirs(output_dir)[:-keep]:
        if checkpoint_step(stale) != protect:
            shutil.rmtree(stale, ignore_errors=True)
    return final


def remove_checkpoints(output_dir: Path) -> int:
    """Remove every checkpoint in ``output_dir`` (the final model is saved); how many."""
    found = checkpoint_dirs(output_dir)
    for path in found:
        shutil.rmtree(path, ignore_errors=True)
    return len(found)


def _readable(path: Path) -> str:
    """'' if the checkpoint at ``path`` loads; else why not, in a few words."""
    try:
        torch.load(path / STATE_FILE, weights_only=True)
    except Exception as e:
        first = first_line(e, 10_000)
        # torch's own advice (weights_only=False) would run code from the file: never given.
        return "not a checkpoint cpuft wrote" if "weights_only" in first else first[:160]
    return ""


def _frozen_names(model: nn.Module) -> set[str]:
    return {name for name, p in model.named_parameters(remove_duplicate=False)
            if not p.requires_grad}


def trained_state(model: nn.Module, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` without the frozen parameters: a LoRA checkpoint holds its adapters (megabytes),
    not the base model it can load again (hundreds of megabytes)."""
    frozen = _frozen_names(model)
    return {k: v for k, v in state.items() if k not in frozen}


def load_model_state(model: nn.Module, state: dict[str, Any]) -> None:
    """Load a checkpoint's model state; only frozen parameters may be missing from it."""
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # a tensor of another shape: another architecture
        first = str(e).splitlines()[1].strip() if "\n" in str(e) else str(e)[:160]
        raise CpuftError(f"the checkpoint does not fit this model ({first}): resume with the "
                         "model it was written with") from None
    wrong = sorted(set(missing) - _frozen_names(model)) + sorted(unexpected)
    if wrong:
        raise CpuftError(f"the checkpoint does not fit this model ({', '.join(wrong[:3])}...): "
                         "resume with the model and settings it was written with")


def load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = torch.load(path / STATE_FILE, weights_only=True)
    except Exception:
        why = _readable(path)
        older = [p for p in checkpoint_dirs(path.parent) if p != path
                 and int(p.name.removeprefix(PREFIX)) < int(path.name.removeprefix(PREFIX) or 0)]
        good = next((p for p in reversed(older) if not _readable(p)), None)
        advice = (f"{good} loads: move {path} away to resume from it" if good
                  else "no older checkpoint loads: start again without --resume")
        raise CpuftError(f"checkpoint {path} is damaged ({why}); {advice}") from None
    return state
