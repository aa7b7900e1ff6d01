"""Checks of the folders a command will write, made before any long work, and files written
whole or not at all. No torch here."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError


def check_writable_dir(path: str, flag: str) -> None:
    """Refuse a folder that could not be made or written, before a long run whose results
    would otherwise be lost at the end; makes nothing."""
    given = Path(path)
    if given.is_symlink():
        raise CpuftError(f"{flag} {path} is a symbolic link: give the folder it points to "
                         f"({given.resolve()})")
    at = given.absolute()
    while not at.exists():
        at = at.parent
    if not at.is_dir():
        raise CpuftError(f"{flag} {path}: {at} is a file, not a folder")
    try:  # a real write: access() says yes to root everywhere, /proc included
        with tempfile.TemporaryFile(dir=at):
            pass
    except OSError as e:
        raise CpuftError(f"{flag} {path}: cannot write in {at} ({e.strerror})") from None


def write_json(path: Path, data: Any) -> None:
    """``data`` as indented JSON in ``path``, whole or not at all: written beside it, synced,
    then moved over it, so that a kill or a full disk never leaves it empty or cut. A failed
    write is one line, and the file as it was stays."""
    text = json.dumps(data, indent=2) + "\n"
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise CpuftError(f"cannot write {path} ({e.strerror or e}): free some space or fix "
                         "the folder, then rerun with --resume") from None
