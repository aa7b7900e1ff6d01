"""What may stand for a host in a command line: a host name or an address, nothing else.

Every host and address that reaches a remote shell, ssh or mpirun passes through here, so that a
value such as ``-Fevil`` (an ssh option) or ``1.2.3.4;touch x`` (a shell command) never does.
"""

from __future__ import annotations

import re

from cpuft.errors import CpuftError
from cpuft.launch.netinfo import is_ip

_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_host(text: str, what: str = "host") -> str:
    """``text`` if it is a host name or an IP address; else one line saying it is not."""
    if is_ip(text) or (len(text) <= 253 and _HOSTNAME.fullmatch(text)):
        return text
    raise CpuftError(f"{what} {text!r} is not a host name or an IP address")


def check_env_name(name: str) -> str:
    if not _ENV_NAME.fullmatch(name):
        raise CpuftError(f"environment variable name {name!r} is not a shell name")
    return name


def parse_endpoint(text: str, flag: str) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT``, each checked; else one line naming ``flag``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise CpuftError(f"{flag} {text!r}: give HOST:PORT")
    return check_host(host, flag), int(port)
