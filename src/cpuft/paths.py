"""Checks of the folders a command will write, made before any long work. No torch here."""

from __future__ import annotations

import tempfile
from pathlib import Path

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
