"""Hosts as network namespaces on this machine, for tests and ``cpuft bench --scaling``.

A bridge in a switch namespace, one veth per host, private addresses that exist only inside
the namespaces, optionally each link's rate shaped with ``tc`` (tbf: this kernel has no netem, so
no added delay). Each host gets a hosts file naming every host (``ip netns exec`` mounts
``/etc/netns/NAME/hosts`` over ``/etc/hosts``), so looking up a peer's address finds it there
instead of failing on a DNS server the namespace cannot reach. Everything is removed on exit,
also when the body fails. Needs root and iproute2.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cpuft.errors import CpuftError
from cpuft.launch.proc import run_command

NETNS_ETC = Path("/etc/netns")


def can_make_namespaces() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _run(args: list[str], ns: str | None = None) -> None:
    cmd = ["ip", "netns", "exec", ns, *args] if ns else args
    failed = run_command(cmd, timeout=30)
    if failed:
        raise CpuftError(f"`{' '.join(cmd)}`: {failed}")


def _ip(*args: str, ns: str | None = None) -> None:
    _run(["ip", *args], ns)


@dataclass(frozen=True)
class Cluster:
    hosts: list[str]
    addrs: dict[str, str]
    switch: str


@contextmanager
def namespace_cluster(n: int, subnet: int = 231, rate: str | None = None) -> Iterator[Cluster]:
    """``n`` hosts on one bridge; ``rate`` (e.g. '10gbit') shapes each host's outgoing link."""
    if not can_make_namespaces():
        raise CpuftError("network namespaces need root and iproute2 (ip)")
    tag = f"{os.getpid() % 100000}"
    switch = f"cpft-sw{tag}"
    hosts = [f"cpft-h{i}-{tag}" for i in range(1, n + 1)]
    made: list[str] = []
    previous = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM would end Python without running the clean-up below.
        def stop(signum: int, _frame: object) -> None:
            raise CpuftError("stopped by SIGTERM; the namespaced hosts were removed")

        previous = signal.signal(signal.SIGTERM, stop)
    try:
        for ns in (switch, *hosts):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("link", "set", "lo", "up", ns=ns)
        _ip("link", "add", "br0", "type", "bridge", ns=switch)
        _ip("link", "set", "br0", "up", ns=switch)
        addrs = {}
        for i, host in enumerate(hosts, 1):
            outer, inner = f"cpft{tag}s{i}", f"cpft{tag}h{i}"
            _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
            _ip("link", "set", inner, "netns", host)
            _ip("link", "set", outer, "netns", switch)
            _ip("link", "set", outer, "master", "br0", ns=switch)
            _ip("link", "set", outer, "up", ns=switch)
            _ip("link", "set", inner, "name", "eth0", ns=host)
            addrs[host] = f"10.{subnet}.{os.getpid() % 250}.{i}"
            _ip("addr", "add", f"{addrs[host]}/24", "dev", "eth0", ns=host)
            _ip("link", "set", "eth0", "up", ns=host)
            if rate:
                _run(["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate,
                      "burst", "4mb", "latency", "100ms"], ns=host)
        # Also as IPv4-mapped IPv6: c10d's store listens on a dual-stack socket and looks its
        # clients up by that form.
        names = "".join(f"{addrs[h]} {h}\n::ffff:{addrs[h]} {h}\n" for h in hosts)
        for host in hosts:
            (NETNS_ETC / host).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / host / "hosts").write_text(f"127.0.0.1 localhost\n::1 localhost\n"
                                                    f"{names}")
        yield Cluster(hosts=hosts, addrs=addrs, switch=switch)
    finally:
        for ns in reversed(made):
            run_command(["ip", "netns", "del", ns], timeout=30)
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        with contextlib.suppress(OSError):
            NETNS_ETC.rmdir()  # only when empty: another tool's files stay
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
