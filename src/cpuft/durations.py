"""Durations as people write them (``30m``, ``1h30m``) and as cpuft prints them."""

from __future__ import annotations

import re

from cpuft.errors import CpuftError

DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, flag: str) -> float:
    """Seconds in ``30m``, ``2h``, ``1h30m``, ``90s`` or ``90``."""
    parts = DURATION.findall(text.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != text.strip().lower():
        raise CpuftError(f"{flag} {text!r}: give a duration such as 30m, 2h, 1h30m")
    seconds = sum(float(n) * UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise CpuftError(f"{flag} {text!r} must be longer than nothing")
    return seconds


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds // 3600:.0f}h{seconds % 3600 / 60:02.0f}m"
