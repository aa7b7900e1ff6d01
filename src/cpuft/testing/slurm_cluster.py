"""A real two-node Slurm on this machine, for tests: ``python -m cpuft.testing.slurm_cluster up``
(or ``down``, ``status``). Needs root, iproute2 and Debian's Slurm packages (``up`` installs them).

One ``slurmctld`` and two ``slurmd`` (``n1``, ``n2``), each in its own network, UTS and mount
namespace, joined to this host (the login node, 10.213.7.1) by a bridge, so that each node has
its own name and address. ``ip netns exec`` cannot start slurmd (it remounts /sys and slurmd
then finds no cgroup filesystem): the daemons are entered with ``nsenter --net`` and
``unshare --mount --uts``, with the cluster's hosts file bound over /etc/hosts. One munged on the
host serves all of them through its socket. Everything lives under ``STATE`` (a tmpfs) and goes
with ``down``. The nodes share this host's file systems, and jobs run as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from cpuft.errors import CpuftError
from cpuft.launch.proc import run_output, start_daemon

STATE = Path("/run/cpuft-slurm")
CONF = STATE / "slurm.conf"
NODES = ("n1", "n2")
SUBNET = "10.213.7"
HOST_ADDR = f"{SUBNET}.1"
CTL = ("slurmctl", f"{SUBNET}.10")
NODE_ADDRS = {name: f"{SUBNET}.{11 + i}" for i, name in enumerate(NODES)}
BRIDGE = "cpftslurm0"
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
IDLE_TIMEOUT_S = 60.0


def _run(*argv: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    """``argv``'s standard output; with ``check``, one line where it failed."""
    code, out, err = run_output(argv, env={**os.environ, **environment(), **(env or {})})
    if check and code:
        raise CpuftError(f"`{' '.join(argv)}` failed: {err.strip()[-400:]}")
    return out


def environment() -> dict[str, str]:
    """What a client of this cluster (sbatch, srun, squeue) needs in its environment."""
    return {"SLURM_CONF": str(CONF)}


def _conf() -> str:
    cpus = os.cpu_count() or 1
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
    nodes = "".join(
        f"NodeName={n} NodeAddr={a} CPUs={cpus} Boards=1 SocketsPerBoard=1 "
        f"CoresPerSocket={cpus} ThreadsPerCore=1 RealMemory={memory_mb} State=UNKNOWN\n"
        for n, a in NODE_ADDRS.items())
    return f"""\
ClusterName=cpuft
SlurmctldHost={CTL[0]}({CTL[1]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={STATE}/run/munge.socket
StateSaveLocation={STATE}/ctld
SlurmdSpoolDir={STATE}/spool/%n
SlurmctldPidFile={STATE}/run/slurmctld.pid
SlurmdPidFile={STATE}/run/slurmd-%n.pid
SlurmctldLogFile={STATE}/log/slurmctld.log
SlurmdLogFile={STATE}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={STATE}/log/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
{nodes}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _hosts() -> str:
    entries = [(HOST_ADDR, os.uname().nodename), CTL[::-1], *((a, n) for n, a in
                                                              NODE_ADDRS.items())]
    # IPv4-mapped forms too: c10d reverse-resolves its peers in that form.
    return "127.0.0.1 localhost\n::1 localhost\n" + "".join(
        f"{addr} {name}\n::ffff:{addr} {name}\n" for addr, name in entries)


def _install() -> None:
    if all(shutil.which(b) for b in ("slurmctld", "slurmd", "srun", "munged")):
        return
    policy = Path("/usr/sbin/policy-rc.d")
    added = not policy.exists()
    if added:  # no daemon may start from the packages' scripts
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        install = ("apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES)
        if run_output(install, env={**os.environ, **env})[0]:
            _run("apt-get", "update", "-qq", check=False, env=env)
            _run(*install, env=env)
    finally:
        if added:
            policy.unlink()


def _namespace(name: str, addr: str, index: int) -> None:
    ns = f"cpuft-{name}"
    _run("ip", "netns", "add", ns)
    outer, inner = f"cpftsl{index}", f"cpftsl{index}i"
    _run("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
    _run("ip", "link", "set", outer, "master", BRIDGE)
    _run("ip", "link", "set", outer, "up")
    _run("ip", "link", "set", inner, "netns", ns)
    for cmd in (("link", "set", "lo", "up"), ("link", "set", inner, "name", "eth0"),
                ("addr", "add", f"{addr}/24", "dev", "eth0"), ("link", "set", "eth0", "up")):
        _run("ip", "-n", ns, *cmd)


def _start_in(name: str, hostname: str, daemon: list[str]) -> None:
    """``daemon`` in namespace ``name``, with its own hostname and the cluster's hosts file."""
    line = (f"mount --bind {STATE}/hosts /etc/hosts && hostname {hostname} && "
            f"exec {' '.join(daemon)}")
    start_daemon(["nsenter", f"--net=/run/netns/cpuft-{name}", "unshare", "--mount", "--uts",
                  "--propagation", "slave", "sh", "-c", line],
                 STATE / "log" / f"start-{name}.log", env={**os.environ, **environment()})


def idle_nodes() -> list[str]:
    """The nodes the controller reports idle (none when it does not answer)."""
    if not CONF.exists() or shutil.which("sinfo") is None:
        return []
    out = _run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
    return sorted(line.split()[0] for line in out.splitlines()
                  if len(line.split()) == 2 and line.split()[1] == "idle")


def up() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nsenter") is None:
        raise CpuftError("a Slurm cluster of namespaces needs root, iproute2 and nsenter")
    if idle_nodes() == sorted(NODES):
        return
    down()
    started = time.monotonic()
    _install()
    for sub in ("run", "log", "ctld", *(f"spool/{n}" for n in NODES)):
        (STATE / sub).mkdir(parents=True, exist_ok=True)
    CONF.write_text(_conf())
    (STATE / "hosts").write_text(_hosts())
    munge = STATE / "run"
    key = STATE / "munge.key"
    key.write_bytes(os.urandom(128))
    shutil.chown(munge, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    key.chmod(0o600)
    _run("runuser", "-u", "munge", "--", "munged", f"--socket={munge}/munge.socket",
         f"--key-file={key}", f"--pid-file={munge}/munged.pid",
         f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed")
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "addr", "add", f"{HOST_ADDR}/24", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    _namespace("ctl", CTL[1], 0)
    for i, (name, addr) in enumerate(NODE_ADDRS.items(), 1):
        _namespace(name, addr, i)
    _start_in("ctl", CTL[0], ["slurmctld", "-f", str(CONF)])
    for name in NODES:
        _start_in(name, name, ["slurmd", "-f", str(CONF), "-N", name])
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while idle_nodes() != sorted(NODES):
        if time.monotonic() > deadline:
            logs = "; ".join(f"{p.name}: {p.read_text().strip()[-200:]}"
                             for p in sorted((STATE / "log").glob("*.log")) if p.stat().st_size)
            raise CpuftError(f"Slurm's nodes did not become idle in {IDLE_TIMEOUT_S:.0f}s: {logs}")
        time.sleep(0.3)
    print(f"slurm up: nodes {', '.join(NODES)} idle in {time.monotonic() - started:.1f}s "
          f"(SLURM_CONF={CONF})")


def _kill_pidfile(path: Path) -> None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        os.kill(int(path.read_text().split()[0]), signal.SIGTERM)


def down() -> None:
    """Cancel every job, stop the daemons and remove the namespaces, whatever state they are in."""
    if CONF.exists() and shutil.which("scancel"):
        _run("scancel", "--user", "root", check=False)
        deadline = time.monotonic() + 15
        while _run("squeue", "-h", check=False).strip() and time.monotonic() < deadline:
            time.sleep(0.3)
        _run("scontrol", "shutdown", check=False)
    for pid_file in (STATE / "run").glob("*.pid") if (STATE / "run").exists() else []:
        _kill_pidfile(pid_file)
    time.sleep(0.5)
    for ns in ("ctl", *NODES):
        # Whatever still runs in a node (a job step's processes) goes with it.
        pids = _run("ip", "netns", "pids", f"cpuft-{ns}", check=False).split()
        for pid in pids:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _run("ip", "netns", "del", f"cpuft-{ns}", check=False)
    _run("ip", "link", "del", BRIDGE, check=False)
    shutil.rmtree(STATE, ignore_errors=True)


def main(argv: list[str]) -> int:
    what = argv[0] if argv else ""
    try:
        if what == "up":
            up()
        elif what == "down":
            down()
        elif what == "status":
            idle = idle_nodes()
            print(f"idle nodes: {', '.join(idle) or 'none'}")
            return 0 if idle == sorted(NODES) else 1
        else:
            print("usage: python -m cpuft.testing.slurm_cluster up|down|status", file=sys.stderr)
            return 2
    except CpuftError as e:
        print(f"slurm_cluster: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
