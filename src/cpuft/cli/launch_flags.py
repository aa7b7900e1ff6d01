"""Launch flags, shared by ``cpuft launch`` and ``cpuft train``, parsed into a LaunchRequest."""

from __future__ import annotations

import argparse

from cpuft.launch.request import LaunchRequest

LAUNCH_FLAGS = {  # flag -> takes a value
    "--nproc-per-node": True, "--hostfile": True, "--launcher": True, "--master-addr": True,
    "--master-port": True, "--max-restarts": True, "--remote-shell": True, "--mpi": True,
    "--comm-cores": True, "--nnodes": True, "--node-rank": True, "--rdzv-endpoint": True,
    "--rdzv-id": True, "--rejoin-after": True,
}


def add_launch_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("launching on several processes or hosts")
    g.add_argument("--nproc-per-node", default=None,
                   help="ranks per host: a number or 'auto' (one per NUMA node)")
    g.add_argument("--hostfile", help="hosts: one a line, 'host slots=N' or 'host:N'")
    g.add_argument("--launcher", choices=("local", "ssh", "mpirun", "slurm"),
                   help="local (the default), ssh (the default with --hostfile), mpirun, or "
                        "slurm (the default inside a Slurm allocation: srun starts each node)")
    g.add_argument("--master-addr", help="rendezvous address (default: the first host's)")
    g.add_argument("--master-port", type=int, default=29500,
                   help="the rendezvous port on the first host (default: 29500)")
    g.add_argument("--max-restarts", type=int, default=0,
                   help="restart the workers this often; they resume from the last checkpoint")
    g.add_argument("--remote-shell", default=None,
                   help="how to run a command on a host; {host} and optionally {command} "
                        "(default: 'ssh -o BatchMode=yes -- {host} {command}')")
    g.add_argument("--mpi", choices=("openmpi", "intelmpi"), default="openmpi",
                   help="with --launcher mpirun: Open MPI, or Intel MPI and MPICH's Hydra "
                        "(default: openmpi)")
    g.add_argument("--comm-cores", type=int, default=0,
                   help="cores per rank taken from compute for gloo's communication threads")
    n = parser.add_argument_group(
        "one launcher a node (as Slurm's srun or a Kubernetes pod starts it), torchrun's names")
    n.add_argument("--nnodes", default=None, metavar="N|MIN:MAX",
                   help="the job's nodes; MIN:MAX: an elastic job, which goes on while MIN "
                        "nodes are left and takes nodes back as they return (with --hostfile: "
                        "over the hostfile's MAX hosts)")
    n.add_argument("--node-rank", type=int, default=None,
                   help="this node's rank, 0 to NNODES-1 (node 0 serves the rendezvous)")
    n.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                   help="node 0's address and the rendezvous port; in an elastic job, the "
                        "stable host where `cpuft rendezvous` serves the job's store (with "
                        "--hostfile, cpuft starts it there)")
    n.add_argument("--rdzv-id", default=None, help="the job's name, the same on every node")
    n.add_argument("--rejoin-after", default="30s", metavar="DURATION",
                   help="an elastic job with --hostfile: how long before a lost host is tried "
                        "again, and its agent started once it answers")


def wants_launch(args: argparse.Namespace) -> bool:
    return bool(args.nproc_per_node or args.hostfile or args.launcher
                or args.nnodes is not None)


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


def launch_request(args: argparse.Namespace, train_args: list[str], allocator: str,
                   program: tuple[str, ...] = ("-m", "cpuft", "train")) -> LaunchRequest:
    """The request these flags make, for ranks that run ``program`` with ``train_args``, with
    ``allocator``."""
    from cpuft.durations import parse_duration
    from cpuft.launch.elastic import parse_nnodes

    low, high = parse_nnodes(args.nnodes) if args.nnodes is not None else (None, None)
    return LaunchRequest(
        nproc_per_node=args.nproc_per_node, hostfile=args.hostfile, launcher=args.launcher,
        master_addr=args.master_addr, master_port=args.master_port,
        max_restarts=args.max_restarts, remote_shell=args.remote_shell, mpi=args.mpi,
        comm_cores=args.comm_cores, allocator=allocator, train_args=train_args,
        program=program, nnodes=high, node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
        min_nodes=low if args.nnodes and ":" in args.nnodes else None,
        rejoin_after_s=parse_duration(args.rejoin_after, "--rejoin-after"),
    )
