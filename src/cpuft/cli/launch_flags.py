"""Launch flags, shared by ``cpuft launch`` and ``cpuft train``, and the LaunchConfig they give."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import uuid
from typing import Any

LAUNCH_FLAGS = {  # flag -> takes a value
    "--nproc-per-node": True, "--hostfile": True, "--launcher": True, "--master-addr": True,
    "--master-port": True, "--max-restarts": True, "--remote-shell": True, "--mpi": True,
    "--comm-cores": True,
}


def add_launch_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("launching on several processes or hosts")
    g.add_argument("--nproc-per-node", default=None,
                   help="ranks per host: a number or 'auto' (one per NUMA node)")
    g.add_argument("--hostfile", help="hosts: one a line, 'host slots=N' or 'host:N'")
    g.add_argument("--launcher", choices=("local", "ssh", "mpirun"),
                   help="local (default without --hostfile), ssh (default with it), mpirun")
    g.add_argument("--master-addr", help="rendezvous address (default: the first host's)")
    g.add_argument("--master-port", type=int, default=29500)
    g.add_argument("--max-restarts", type=int, default=0,
                   help="restart the workers this often; they resume from the last checkpoint")
    g.add_argument("--remote-shell", default=None,
                   help="how to run a command on a host; {host} and optionally {command} "
                        "(default: 'ssh -o BatchMode=yes {host} {command}')")
    g.add_argument("--mpi", choices=("openmpi", "intelmpi"), default="openmpi")
    g.add_argument("--comm-cores", type=int, default=0,
                   help="cores per rank taken from compute for gloo's communication threads")


def wants_launch(args: argparse.Namespace) -> bool:
    return bool(args.nproc_per_node or args.hostfile or args.launcher)


def strip_launch_flags(argv: list[str]) -> list[str]:
    """``argv`` without the launch flags (and their values): what each rank runs."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in LAUNCH_FLAGS:
            skip = LAUNCH_FLAGS[name] and "=" not in arg
            continue
        out.append(arg)
    return out


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def build_launch(
    args: argparse.Namespace, train_args: list[str], check_network: bool = True
) -> Any:
    """The LaunchConfig for these flags: hosts, ranks, placement, allocator, network.

    ``check_network=False`` leaves the network (master address, interfaces, port) unresolved.
    """
    from cpuft.config import TrainConfig
    from cpuft.errors import CpuftError
    from cpuft.launch.commands import DEFAULT_REMOTE_SHELL, LaunchConfig, forwarded_env
    from cpuft.launch.hostfile import Host, read_hostfile
    from cpuft.launch.run import check_port, resolve_network
    from cpuft.speedups import allocator_env, make_plan
    from cpuft.topology import read_topology
    from cpuft.topology.placement import auto_nproc, node_env, plan_node

    hosts = read_hostfile(args.hostfile) if args.hostfile else [Host("localhost")]
    launcher = args.launcher or ("ssh" if args.hostfile else "local")
    topo = read_topology()
    nproc: int
    if args.nproc_per_node in (None, "auto"):
        slots = {h.slots for h in hosts}
        only = slots.pop() if len(slots) == 1 else None
        nproc = only if only is not None else auto_nproc(topo)
    else:
        try:
            nproc = int(args.nproc_per_node)
        except ValueError:
            raise CpuftError("--nproc-per-node takes a number or 'auto'") from None
    for h in hosts:
        if h.slots is not None and nproc > h.slots:
            raise CpuftError(f"--nproc-per-node {nproc} is more than the {h.slots} slots of "
                             f"{h.name} in the hostfile")
    if args.max_restarts < 0:
        raise CpuftError("--max-restarts must be 0 or more")
    if not 0 < args.master_port < 65536:
        raise CpuftError(f"--master-port {args.master_port}: a port is 1 to 65535")
    placements = plan_node(topo, nproc, comm_cores=args.comm_cores)
    if args.comm_cores and nproc * len(hosts) == 1:
        print(f"cpuft: warning: --comm-cores {args.comm_cores} with one process: it does not "
              "communicate, so those cores stay idle", file=sys.stderr)
    job = uuid.uuid4().hex[:12]
    env = {**forwarded_env(dict(os.environ)), **node_env(placements), "CPUFT_JOB": job}
    env.update(allocator_env(make_plan(TrainConfig(), topo), env))
    cfg = LaunchConfig(
        hosts=hosts, nproc_per_node=nproc, launcher=launcher,
        master_addr=args.master_addr or "127.0.0.1", master_port=args.master_port,
        max_restarts=args.max_restarts,
        remote_shell=args.remote_shell or DEFAULT_REMOTE_SHELL, mpi=args.mpi,
        workdir=os.getcwd(), python=sys.executable, train_args=train_args, env=env,
        run_as_root=os.geteuid() == 0, rdzv_id=job,
    )
    if not check_network:
        return cfg
    if launcher == "local":
        cfg.host_env["localhost"] = {"CPUFT_HOST": socket.gethostname()}
        if not _port_free(cfg.master_port):
            raise CpuftError(f"port {cfg.master_port} is in use here: pass --master-port")
    elif launcher == "ssh":
        resolve_network(cfg, master_given=bool(args.master_addr))
        check_port(cfg)
    return cfg
