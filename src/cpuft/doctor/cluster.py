"""``cpuft cluster check``: every host, through the launcher's remote shell, before a long run."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict
from typing import Any

from cpuft.doctor.checks import FAIL, OK, WARN, Finding
from cpuft.envlock import differences, make_lock, read_lock
from cpuft.errors import CpuftError
from cpuft.launch.commands import LaunchConfig
from cpuft.launch.run import check_port, probe, resolve_network, run_job
from cpuft.topology import Isa, parse_cpuinfo


def _finding(host: str, check: str, status: str, detail: str, fix: str = "") -> Finding:
    return Finding(check=check, status=status, detail=detail, fix=fix, host=host)


def _versions(cfg: LaunchConfig, host: str, here: dict[str, Any]) -> Finding:
    try:
        there = read_lock(probe(cfg, host, f"{shlex.quote(cfg.python)} -m cpuft env lock"),
                          f"{host}'s lock")
    except CpuftError as e:
        return _finding(host, "versions", FAIL, str(e),
                           f"install cpuft on {host} at {cfg.python}")
    diffs = differences(here, there)
    if not diffs:
        return _finding(host, "versions", OK, f"lock {there['hash']}, same as here")
    side = "; ".join(f"{n}: here {a or '(absent)'}, {host} {b or '(absent)'}" for n, a, b in diffs)
    return _finding(host, "versions", FAIL, side,
                       "cpuft env lock -o cpuft.lock here, then run the script of "
                       f"`cpuft env bootstrap --lock cpuft.lock` on {host}")


def _isa(cfg: LaunchConfig, host: str) -> Isa:
    _, flags = parse_cpuinfo(probe(cfg, host, "grep -m1 '^flags' /proc/cpuinfo"))
    return Isa.from_flags(flags)


def _allreduce(cfg: LaunchConfig) -> dict[str, Any] | None:
    # Started directly, one rank per host: rank 0 hosts the store, bound to the master address.
    cfg.launcher = "direct"
    cfg.module_args = ["-m", "cpuft.distributed.allreduce_probe"]
    cfg.train_args = []
    cfg.nproc_per_node = 1
    lines: list[str] = []
    if run_job(cfg, capture=lines) != 0:
        return None
    for line in lines:
        if "CPUFT_ALLREDUCE " in line:
            result: dict[str, Any] = json.loads(line.split("CPUFT_ALLREDUCE ", 1)[1])
            return result
    return None


def check_cluster(cfg: LaunchConfig, master_given: bool) -> dict[str, Any]:
    found: list[Finding] = []
    here = make_lock()
    reachable = []
    for h in cfg.hosts:
        try:
            probe(cfg, h.name, "true")
            reachable.append(h.name)
            found.append(_finding(h.name, "reachable", OK, f"through `{cfg.remote_shell}`"))
        except CpuftError as e:
            found.append(_finding(h.name, "reachable", FAIL, str(e),
                                     "check the host is up and the remote shell reaches it "
                                     "without a password (ssh keys, BatchMode)"))
    isas = {}
    for host in reachable:
        found.append(_versions(cfg, host, here))
        isas[host] = _isa(cfg, host)
    if len({i.native_bf16 for i in isas.values()}) > 1:
        for host, isa in isas.items():
            if not isa.native_bf16:
                found.append(_finding(host, "isa", WARN,
                                         "no native bf16 while other hosts have it: with "
                                         "--precision auto the whole job trains in fp32",
                                         "drop the host to train in bf16 where it is faster"))
    else:
        for host, isa in isas.items():
            features = " ".join(isa.names()) or "no AVX-512"
            found.append(_finding(host, "isa", OK, f"{isa.class_name} ({features})"))
    network_ok = len(reachable) == len(cfg.hosts)
    if network_ok:
        try:
            resolve_network(cfg, master_given)
            for h in cfg.hosts:
                found.append(_finding(h.name, "route", OK,
                                         f"reaches master {cfg.master_addr} via "
                                         f"{cfg.host_env[h.name]['GLOO_SOCKET_IFNAME']} "
                                         f"({cfg.host_addr[h.name]})"))
            check_port(cfg)
            found.append(_finding(cfg.hosts[0].name, "port", OK,
                                     f"{cfg.master_addr}:{cfg.master_port} is free"))
        except CpuftError as e:
            network_ok = False
            host = next((h.name for h in cfg.hosts if f"host {h.name} " in str(e)),
                        cfg.hosts[0].name)
            found.append(_finding(host, "route", FAIL, str(e),
                                     "bring its cluster interface up, or fix its routes"))
    allreduce = None
    if network_ok:
        allreduce = _allreduce(cfg)
        if allreduce is None:
            found.append(_finding(cfg.hosts[0].name, "allreduce", FAIL,
                                     "the all-reduce across hosts did not complete",
                                     "see the output above; check firewalls between hosts"))
    return {
        "hosts": [h.name for h in cfg.hosts],
        "master_addr": cfg.master_addr,
        "findings": [asdict(f) for f in found],
        "allreduce": allreduce,
        "ok": all(f.status != FAIL for f in found) and allreduce is not None,
    }
