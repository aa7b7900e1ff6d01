"""Start a job's processes, stream their output with a host prefix, and stop them together."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cpuft.errors import CpuftError
from cpuft.launch.commands import (
    LaunchConfig,
    direct_commands,
    local_command,
    mpirun_command,
    remote_command,
    srun_command,
    ssh_commands,
    store_argv,
)
from cpuft.launch.elastic import STORE_READY
from cpuft.launch.names import check_host
from cpuft.launch.netinfo import is_ip, parse_addrs, route_to

PROBE_TIMEOUT_S = 15.0
STOP_GRACE_S = 10.0


def probe(cfg: LaunchConfig, host: str, script: str) -> str:
    """Run a short shell line on ``host`` through the remote shell; its stdout."""
    argv = remote_command(cfg.remote_shell, host, script)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise CpuftError(f"host {host} did not answer within {PROBE_TIMEOUT_S:.0f}s "
                         f"through `{cfg.remote_shell}`") from None
    except FileNotFoundError:
        raise CpuftError(f"remote shell not found: {argv[0]}") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise CpuftError(f"host {host} is not reachable through `{cfg.remote_shell}`: {why}")
    return proc.stdout


def host_address(cfg: LaunchConfig, host: str) -> str:
    """``host``'s address on the cluster's network: itself where it is one, else its first IPv4
    address besides loopback, as it says."""
    if is_ip(host):
        return host.strip("[]")
    addrs = parse_addrs(probe(cfg, host, "ip -o -4 addr show"))
    if not addrs:
        raise CpuftError(f"host {host} has no IPv4 address besides loopback: pass --master-addr")
    return addrs[0][1]


def address_toward(cfg: LaunchConfig, addr: str, host: str = "localhost") -> str:
    """``host``'s own address on the way to ``addr`` (through the remote shell)."""
    out = probe(cfg, host, f"ip -o -4 addr show; echo ---; ip -o route get {shlex.quote(addr)}")
    addr_text, _, route_text = out.partition("---")
    route = route_to(addr, route_text, addr_text)
    if route is None:
        raise CpuftError(f"{host} has no route to {addr}")
    return route.local_addr


def resolve_network(cfg: LaunchConfig, master_given: bool) -> None:
    """Master address from the first host; per host, the interface and address that reach it."""
    if not master_given:
        cfg.master_addr = host_address(cfg, cfg.hosts[0].name)
    check_host(cfg.master_addr, "the master address")
    machines: dict[frozenset[str], str] = {}
    for host in cfg.hosts:
        out = probe(cfg, host.name,
                    "ip -o -4 addr show; echo ---; ip -o route get "
                    f"{shlex.quote(cfg.master_addr)} || true")
        addr_text, _, route_text = out.partition("---")
        # Hosts with the same addresses are one machine (one network stack) under two names:
        # its ranks would share its cores, each placed as if it had them all.
        own = frozenset(addr for _, addr in parse_addrs(addr_text))
        if own and own in machines:
            raise CpuftError(f"hosts {machines[own]} and {host.name} are one machine (both have "
                             f"{', '.join(sorted(own))}): list it once, with slots=N for N ranks")
        machines[own] = host.name
        route = route_to(cfg.master_addr, route_text, addr_text)
        if route is None:
            raise CpuftError(f"host {host.name} has no route to the master {cfg.master_addr}")
        cfg.host_env.setdefault(host.name, {}).update(
            {"GLOO_SOCKET_IFNAME": route.ifname, "CPUFT_HOST": host.name})
        cfg.host_addr[host.name] = route.local_addr


def port_probe(addr: str, port: int) -> str:
    """Python that binds ``addr``:``port`` as the job's store will (``socket.create_server``:
    SO_REUSEADDR, so a past job's connections in TIME-WAIT do not make the port look taken)."""
    family = "socket.AF_INET6" if ":" in addr else "socket.AF_INET"
    return (f"import socket; socket.create_server(({addr.strip('[]')!r}, {port}), "
            f"family={family})")


def check_port(cfg: LaunchConfig, host: str = "") -> None:
    """The rendezvous port must be free on the host that serves it (the first), on the master
    address."""
    host = host or cfg.hosts[0].name
    code = port_probe(cfg.master_addr, cfg.master_port)
    try:
        probe(cfg, host, f"{shlex.quote(cfg.python)} -c {shlex.quote(code)}")
    except CpuftError:
        raise CpuftError(f"port {cfg.master_port} is in use on {host} ({cfg.master_addr}): "
                         "pass another --master-port") from None


@dataclass(slots=True)
class Proc:
    host: str
    popen: subprocess.Popen[str]
    reader: threading.Thread


# A line a rank tagged "[host:rank] ", or a per-node launcher under srun "[host] ".
_TAGGED = re.compile(r"^\[[^\]\s]+(:\d+)?\] ")
# torchrun's failure report: "rank      : 1 (local_rank: 0)" then "exitcode  : -9 (pid: 123)"
# What cpuft.distributed.agent prints for each rank that failed (agent.failure_lines).
FAILED_RANK = re.compile(r"^cpuft agent: rank (\d+) \(local rank \d+\) failed with exit code "
                         r"(-?\d+)")


@dataclass(slots=True)
class Failure:
    """A rank that ended badly, as its torchrun agent reported it."""

    host: str
    rank: int
    exitcode: int

    def describe(self) -> str:
        how = (f"killed by signal {-self.exitcode}" if self.exitcode < 0
               else f"exit code {self.exitcode}")
        return f"rank {self.rank} on host {self.host} died ({how})"


def _stream(host: str, pipe: object, lock: threading.Lock, failures: list[Failure],
            capture: list[str] | None, stopping: threading.Event) -> None:
    for line in pipe:  # type: ignore[attr-defined]
        if capture is not None:
            capture.append(line)
        from_rank = _TAGGED.match(line) is not None
        if stopping.is_set() and not from_rank:
            # Stopped on request, a torchrun agent prints a traceback of its own signal
            # handler; the ranks' lines and the launcher's last line say what happened.
            continue
        text = line if from_rank else f"[{host}] {line}"
        if m := FAILED_RANK.match(line):
            failures.append(Failure(host=host, rank=int(m.group(1)), exitcode=int(m.group(2))))
        with lock:
            sys.stdout.write(text)
            sys.stdout.flush()


def start_process(host: str, argv: Sequence[str], env: dict[str, str], stdin: str | None,
           lock: threading.Lock, failures: list[Failure], capture: list[str] | None,
           stopping: threading.Event) -> Proc:
    popen = subprocess.Popen(
        list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE, start_new_session=True,
        bufsize=1,
    )
    if stdin is not None and popen.stdin is not None:
        with contextlib.suppress(BrokenPipeError):  # a shell that died at once: its exit says
            popen.stdin.write(stdin)
            popen.stdin.close()
    reader = threading.Thread(target=_stream,
                              args=(host, popen.stdout, lock, failures, capture, stopping),
                              daemon=True)
    reader.start()
    return Proc(host, popen, reader)


def signal_all(procs: list[Proc], sig: int) -> None:
    for p in procs:
        if p.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.popen.pid, sig)


def _commands(cfg: LaunchConfig, base_env: dict[str, str]
              ) -> list[tuple[str, list[str], dict[str, str], str | None]]:
    """(host, argv, environment, standard input) of each process to start here."""
    if cfg.launcher in ("local", "node"):
        argv, env = local_command(cfg)
        return [(cfg.hosts[0].name, argv, {**base_env, **env}, None)]
    if cfg.launcher in ("ssh", "direct"):
        build = ssh_commands if cfg.launcher == "ssh" else direct_commands
        return [(s.host, s.argv, base_env, s.stdin) for s in build(cfg)]
    if cfg.launcher in ("mpirun", "slurm"):
        argv, env = (mpirun_command if cfg.launcher == "mpirun" else srun_command)(cfg)
        return [(cfg.launcher, argv, {**base_env, **env}, None)]
    raise CpuftError(f"unknown launcher {cfg.launcher!r}: use local, ssh, mpirun or slurm")


def run_job(cfg: LaunchConfig, capture: list[str] | None = None) -> int:
    """Start every process of the job and wait; the first failure stops all the others.

    Output is streamed with a host prefix; ``capture`` also receives every raw line. An elastic
    job over a hostfile goes on as its hosts come and go (cpuft.launch.elastic_run).
    """
    if cfg.elastic and cfg.store_host:
        from cpuft.launch.elastic_run import run_elastic_job

        return run_elastic_job(cfg, capture)
    lock = threading.Lock()
    base_env = dict(os.environ)
    commands = _commands(cfg, base_env)
    failures: list[Failure] = []
    stopping = threading.Event()
    # An elastic job under Slurm meets at a store served here, which outlives its nodes.
    store = (start_store("rendezvous", store_argv(cfg), base_env, None, lock, stopping)
             if cfg.launcher == "slurm" and cfg.elastic else None)
    seen = capture if capture is not None or store is None else []
    procs = [start_process(host, argv, env, stdin, lock, failures, seen, stopping)
             for host, argv, env, stdin in commands]
    stopped_by: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        # Ranks checkpoint on SIGTERM (spot preemption) before they exit.
        stopped_by.append(signum)
        stopping.set()
        signal_all(procs, signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    failed: tuple[str, int] | None = None
    try:
        while any(p.popen.poll() is None for p in procs):
            for p in procs:
                code = p.popen.poll()
                if code not in (None, 0) and failed is None:
                    failed = (p.host, code)
                    signal_all(procs, signal.SIGTERM)
                    deadline = time.monotonic() + STOP_GRACE_S
                    while any(q.popen.poll() is None for q in procs) and \
                            time.monotonic() < deadline:
                        time.sleep(0.1)
                    signal_all(procs, signal.SIGKILL)
            time.sleep(0.2)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        for p in procs:
            p.popen.wait()
            p.reader.join(timeout=5)
        if store is not None:
            stop_store(store)
    if failed is None:
        failed = next(((p.host, p.popen.returncode) for p in procs if p.popen.returncode), None)
    # Under srun (the per-node mode) every node says its own ending: name the node.
    tag = f"[{cfg.hosts[0].name}] " if cfg.launcher == "node" else ""
    if failed is None:
        if cfg.launcher == "node" and cfg.elastic:
            print(f"{tag}{NODE_FINISHED}", file=sys.stderr, flush=True)
        return 0
    if store is not None and not stopped_by and any(NODE_FINISHED in line for line in seen or []):
        print(f"cpuft: the job finished on the nodes left; srun's exit code {failed[1]} is the "
              "lost nodes'", file=sys.stderr)
        return 0
    if stopped_by:
        print(f"{tag}cpuft: stopped by signal {stopped_by[0]}; rank 0 wrote a checkpoint if it "
              "had finished a step: rerun the same command with --resume", file=sys.stderr)
        return 128 + stopped_by[0]
    if cfg.launcher == "slurm":
        print(srun_ending(failed[1]), file=sys.stderr)
        return failed[1]
    # A rank killed by a signal is the cause; ranks that lost their peer only followed it.
    # SIGTERM is how agents stop the surviving ranks, so it is the least likely cause.
    cause = min(failures, key=lambda f: (f.exitcode == -signal.SIGTERM, f.exitcode >= 0, f.rank),
                default=None)
    where = cause.describe() if cause else f"host {failed[0]} failed (exit code {failed[1]})"
    print(f"{tag}cpuft: {where}; every process of the job was stopped", file=sys.stderr)
    # The failing rank's own exit code (128 + N for signal N, as a shell says it), not its
    # agent's, so that whatever started the job can tell failures apart.
    code = cause.exitcode if cause else failed[1]
    return code if code > 0 else 128 - code if code < 0 else 1


NODE_FINISHED = "cpuft: this node's ranks finished the job"
"""What each node of an elastic job says at its end, under srun: a lost node's task makes srun
fail, while the job finished on the others."""
STORE_READY_S = 60.0


def start_store(host: str, argv: Sequence[str], env: dict[str, str], stdin: str | None,
                lock: threading.Lock, stopping: threading.Event) -> Proc:
    """An elastic job's rendezvous store (``cpuft rendezvous``), once it serves."""
    lines: list[str] = []
    store = start_process(host, argv, env, stdin, lock, [], lines, stopping)
    deadline = time.monotonic() + STORE_READY_S
    while not any(line.startswith(STORE_READY) for line in lines):
        if store.popen.poll() is not None or time.monotonic() > deadline:
            signal_all([store], signal.SIGKILL)
            raise CpuftError(f"the rendezvous store did not start on {host} "
                             f"({''.join(lines[-1:]).strip() or 'no output'})")
        time.sleep(0.1)
    return store


def stop_store(store: Proc) -> None:
    signal_all([store], signal.SIGTERM)
    try:
        store.popen.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        signal_all([store], signal.SIGKILL)
        store.popen.wait()
    store.reader.join(timeout=5)


def srun_ending(code: int) -> str:
    """The launcher's last line when srun ended badly (each node has said what it saw)."""
    if code == 128 + signal.SIGTERM:
        return ("cpuft: Slurm stopped the job's tasks with SIGTERM (scancel, or --signal ahead "
                "of the time limit); the ranks wrote a checkpoint if they had finished a step: "
                "requeue or resubmit the job, with --resume auto, to continue")
    return f"cpuft: srun ended with exit code {code}; the nodes' lines above say which rank failed"
