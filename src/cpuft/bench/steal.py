"""CPU time the hypervisor gave to other guests ("steal"), from /proc/stat: a shared VM's speed
drifts with it, so the bench says how much each run lost."""

from __future__ import annotations

from pathlib import Path

STEAL_WARN = 0.05
"""A run that lost this share of its CPU time or more is flagged in the report."""


def cpu_ticks(stat: str) -> tuple[int, int]:
    """(steal, total) ticks of all CPUs from /proc/stat's ``cpu`` line.

    Its fields are user, nice, system, idle, iowait, irq, softirq, steal, then guest times,
    which user and nice already include.
    """
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(v) for v in fields[1:9]] + [0] * (9 - len(fields))
            return ticks[7], sum(ticks)
    raise ValueError("no 'cpu' line in /proc/stat")


def read_ticks(path: str = "/proc/stat") -> tuple[int, int] | None:
    """This machine's (steal, total) ticks, or None where /proc/stat cannot be read."""
    try:
        return cpu_ticks(Path(path).read_text())
    except (OSError, ValueError):
        return None


def steal_fraction(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float:
    """The share of all CPU time between two readings that went to other guests."""
    if before is None or after is None or after[1] <= before[1]:
        return 0.0
    return (after[0] - before[0]) / (after[1] - before[1])
