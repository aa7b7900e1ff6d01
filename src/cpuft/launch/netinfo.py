"""Which address and interface a host uses to reach the master, from ``ip`` output text."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

_ADDR = re.compile(r"^\d+:\s+(?P<dev>[^\s@]+)(?:@\S+)?\s+inet\s+(?P<addr>[\d.]+)/\d+")
_ROUTE_DEV = re.compile(r"\bdev\s+(?P<dev>\S+)")
_ROUTE_SRC = re.compile(r"\bsrc\s+(?P<src>[\d.]+)")


@dataclass(frozen=True, slots=True)
class Route:
    ifname: str
    """The interface gloo should use (GLOO_SOCKET_IFNAME)."""
    local_addr: str
    """This host's address on that interface."""


def parse_addrs(text: str) -> list[tuple[str, str]]:
    """(interface, IPv4 address) pairs from ``ip -o -4 addr show``, loopback left out."""
    out = []
    for line in text.splitlines():
        m = _ADDR.match(line.strip())
        if m and not ipaddress.ip_address(m.group("addr")).is_loopback:
            out.append((m.group("dev"), m.group("addr")))
    return out


def route_to(master: str, route_text: str, addr_text: str) -> Route | None:
    """The interface and source address used to reach ``master``.

    For the master itself the kernel answers with a ``local`` route through ``lo``; then the
    interface is the one that holds the master's address.
    """
    addrs = parse_addrs(addr_text)
    line = route_text.strip().splitlines()[0] if route_text.strip() else ""
    if is_ip(master) and ipaddress.ip_address(master.strip("[]")).is_loopback:
        dev_match = _ROUTE_DEV.search(line)  # a one-machine job: the loopback device
        return Route(ifname=dev_match.group("dev") if dev_match else "lo", local_addr=master)
    if line.startswith("local") or master in {a for _, a in addrs}:
        for dev, addr in addrs:
            if addr == master:
                return Route(ifname=dev, local_addr=addr)
        return None
    dev_match, src_match = _ROUTE_DEV.search(line), _ROUTE_SRC.search(line)
    if not dev_match or not src_match:
        return None
    return Route(ifname=dev_match.group("dev"), local_addr=src_match.group("src"))


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True
