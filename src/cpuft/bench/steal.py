"""CPU time a run did not get, from /proc/stat: what the hypervisor gave to other guests
("steal"), and what other processes of this machine took. A shared VM's speed drifts with the
first, and an unpinned process suffers far more from the second than a pinned one, so the bench
says how much of each every run saw."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STEAL_WARN = 0.05
"""A run that lost this share of its CPU time or more is flagged in the report."""
BUSY_WARN = 0.10
"""A run during which other processes took this share of the machine's CPU time or more is
flagged, and so is every ratio of its round."""
BUSY_FIELDS = (0, 1, 2, 5, 6)
"""user, nice, system, irq and softirq: /proc/stat's fields of CPU time spent working."""


@dataclass(frozen=True)
class Reading:
    """All CPUs' steal, busy and total ticks, and this process's own CPU seconds."""

    steal: int
    busy: int
    total: int
    own_seconds: float


def cpu_ticks(stat: str) -> tuple[int, int, int]:
    """(steal, busy, total) ticks of all CPUs from /proc/stat's ``cpu`` line.

    Its fields are user, nice, system, idle, iowait, irq, softirq, steal, then guest times,
    which user and nice already include.
    """
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(v) for v in fields[1:9]] + [0] * (9 - len(fields))
            return ticks[7], sum(ticks[i] for i in BUSY_FIELDS), sum(ticks)
    raise ValueError("no 'cpu' line in /proc/stat")


def own_cpu_seconds() -> float:
    """This process's CPU time, its threads' and waited-for children's included."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def read_ticks(path: str = "/proc/stat") -> Reading | None:
    """This machine's ticks and this process's CPU time now, or None where /proc/stat cannot be
    read."""
    try:
        steal, busy, total = cpu_ticks(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return Reading(steal, busy, total, own_cpu_seconds())


def steal_fraction(before: Reading | None, after: Reading | None) -> float:
    """The share of all CPU time between two readings that went to other guests."""
    if before is None or after is None or after.total <= before.total:
        return 0.0
    return (after.steal - before.steal) / (after.total - before.total)


def others_fraction(before: Reading | None, after: Reading | None,
                    hz: float | None = None) -> float:
    """The share of all CPU time between two readings that other processes of this machine
    spent working: the machine's busy time less this process's own."""
    if before is None or after is None or after.total <= before.total:
        return 0.0
    hz = hz or os.sysconf("SC_CLK_TCK")
    others = (after.busy - before.busy) / hz - (after.own_seconds - before.own_seconds)
    return min(1.0, max(0.0, others / ((after.total - before.total) / hz)))


def shares(before: Reading | None, after: Reading | None) -> dict[str, float]:
    """The report's fields for the time between two readings."""
    return {"steal_fraction": steal_fraction(before, after),
            "others_fraction": others_fraction(before, after)}
