"""Hostfiles in the three formats users have: one host a line, Open MPI's ``host slots=N`` and
Intel MPI/MPICH's ``host:N``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cpuft.errors import CpuftError
from cpuft.launch.names import check_host

_HOST = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*|\[[0-9A-Fa-f:.]+\]"
_PLAIN = re.compile(rf"^(?P<host>{_HOST})$")
_OPENMPI = re.compile(
    rf"^(?P<host>{_HOST})(?:\s+(?:slots|max_slots|max-slots)\s*=\s*(?P<slots>\d+))+$"
)
_COLON = re.compile(rf"^(?P<host>{_HOST}):(?P<slots>\d+)$")


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    slots: int | None = None
    """Processes this host may run, when the hostfile says."""


def parse_hostfile(text: str, source: str = "hostfile") -> list[Host]:
    """Hosts in file order; comments (#) and blank lines skipped; any other line must parse."""
    hosts: list[Host] = []
    seen: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _PLAIN.match(line) or _OPENMPI.match(line) or _COLON.match(line)
        if m is None:
            raise CpuftError(
                f"{source} line {lineno}: cannot parse {raw.strip()!r} "
                "(expected 'host', 'host slots=N' or 'host:N')"
            )
        name = m.group("host")
        try:
            check_host(name.strip("[]"))
        except CpuftError as e:
            raise CpuftError(f"{source} line {lineno}: {e}") from None
        slots = int(m.group("slots")) if m.groupdict().get("slots") else None
        if slots == 0:
            raise CpuftError(f"{source} line {lineno}: {name} has 0 slots")
        if name in seen:
            raise CpuftError(f"{source} line {lineno}: {name} is listed twice")
        seen.add(name)
        hosts.append(Host(name=name, slots=slots))
    if not hosts:
        raise CpuftError(f"{source} lists no hosts")
    return hosts


def read_hostfile(path: str) -> list[Host]:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise CpuftError(f"cannot read hostfile {path}: {e.strerror}") from None
    return parse_hostfile(text, source=path)
