"""From what a user asked for (``LaunchRequest``) to the job to start (``LaunchConfig``): hosts,
ranks, placement, allocator and network. The command line only parses into a request."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field, replace

from cpuft.errors import CpuftError
from cpuft.launch.commands import (
    DEFAULT_REMOTE_SHELL,
    ELASTIC_ENV,
    WORLD_SIZE_ENV,
    LaunchConfig,
    forwarded_env,
)
from cpuft.launch.elastic import REJOIN_AFTER_S
from cpuft.launch.hostfile import Host, read_hostfile
from cpuft.launch.names import check_host, parse_endpoint
from cpuft.launch.run import address_toward, check_port, host_address, resolve_network
from cpuft.scheduler.node import scheduler_endpoint, scheduler_node_rank
from cpuft.scheduler.slurm import Allocation, allocation
from cpuft.speedplan.allocator import allocator_env, choose_allocator
from cpuft.topology import read_topology
from cpuft.topology.placement import auto_nproc, node_env, plan_node

LOCAL_SHELL = "sh -c {command}"
"""How the per-node mode runs its network probes: here, on this node."""


@dataclass(kw_only=True, frozen=True)
class LaunchRequest:
    """A job as asked for: flags of ``cpuft launch`` / ``cpuft train``, or a benchmark's."""

    nproc_per_node: str | None = None
    """A number, 'auto' (one per NUMA node, or the hostfile's slots) or None (the same)."""
    hostfile: str | None = None
    launcher: str | None = None
    """'local', 'ssh', 'mpirun' or 'slurm'; None: ssh with a hostfile, slurm inside a Slurm
    allocation, else local."""
    master_addr: str | None = None
    """The rendezvous address; None: the first host's, found from the network."""
    master_port: int = 29500
    max_restarts: int = 0
    remote_shell: str | None = None
    mpi: str = "openmpi"
    comm_cores: int = 0
    allocator: str = "auto"
    """The ranks' own ``--allocator``: which allocator each rank is started with."""
    train_args: list[str] = field(default_factory=list)
    """The arguments after ``program``."""
    program: tuple[str, ...] = ("-m", "cpuft", "train")
    """What each rank runs after the interpreter (cpuft.launch.program)."""
    nnodes: int | None = None
    """Per-node mode: the job's nodes (an elastic job's most), this launcher starting this
    node's ranks alone; with a hostfile, an elastic job's most nodes."""
    min_nodes: int | None = None
    """An elastic job (``--nnodes MIN:MAX``): the fewest nodes it goes on with."""
    rejoin_after_s: float = REJOIN_AFTER_S
    """An elastic job with a hostfile: how long before a lost host is tried again."""
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    """Per-node mode: HOST:PORT of node 0, where the rendezvous store listens."""
    rdzv_id: str | None = None
    """Per-node mode: the job's name, the same on every node (default: cpuft)."""
    resolve_wait_s: float = 180.0
    """Per-node mode: how long to wait for node 0's name to resolve."""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _nproc(req: LaunchRequest, hosts: list[Host]) -> int:
    if req.nproc_per_node in (None, "auto"):
        slots = {h.slots for h in hosts}
        only = slots.pop() if len(slots) == 1 else None
        return only if only is not None else auto_nproc(read_topology())
    try:
        return int(req.nproc_per_node)
    except ValueError:
        raise CpuftError("--nproc-per-node takes a number or 'auto'") from None


def _resolve(host: str, wait_s: float) -> str:
    """``host``'s address, waiting up to ``wait_s`` for its name to appear: a scheduler may
    start this node before node 0's name is in the cluster's DNS (a Kubernetes pod's is added
    when the pod starts)."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            return socket.gethostbyname(host)
        except OSError:
            if time.monotonic() >= deadline:
                raise CpuftError(f"--rdzv-endpoint {host}: the name does not resolve here"
                                 + (f" (waited {wait_s:.0f}s)" if wait_s else "")) from None
            if not said:
                print(f"cpuft: waiting up to {wait_s:.0f}s for {host} (node 0) to resolve",
                      file=sys.stderr)
                said = True
            time.sleep(1.0)


def _endpoint(req: LaunchRequest) -> tuple[str, int]:
    """Per-node mode's checks; node 0's address (resolved) and port."""
    if req.hostfile or req.launcher or req.master_addr:
        raise CpuftError("--nnodes starts this node's ranks alone: it takes no --hostfile, "
                         "--launcher or --master-addr (node 0 is --rdzv-endpoint)")
    if req.min_nodes is not None:  # c10d ranks the nodes itself; the store is served apart
        if not req.rdzv_endpoint:
            raise CpuftError(f"--nnodes {req.min_nodes}:{req.nnodes} needs --rdzv-endpoint "
                             "HOST:PORT, where `cpuft rendezvous` serves the job's store on a "
                             "host that no spot loss can take")
    elif req.node_rank is None or not req.rdzv_endpoint:
        raise CpuftError("--nnodes needs --node-rank R (or a scheduler that sets it: srun, "
                         "Kubeflow) and --rdzv-endpoint HOST:PORT")
    elif req.nnodes is None or req.nnodes < 1 or not 0 <= req.node_rank < req.nnodes:
        raise CpuftError(f"--node-rank {req.node_rank} is not a node of --nnodes {req.nnodes}")
    assert req.rdzv_endpoint is not None and req.nnodes is not None
    host, port = parse_endpoint(req.rdzv_endpoint, "--rdzv-endpoint")
    addr = _resolve(host.strip("[]"), req.resolve_wait_s)
    if req.nnodes > 1 and ipaddress.ip_address(addr).is_loopback:
        raise CpuftError(f"--rdzv-endpoint {host} is a loopback address ({addr}): the other "
                         f"{req.nnodes - 1} node(s) cannot reach it; give node 0's address")
    if req.rdzv_id is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", req.rdzv_id):
        raise CpuftError(f"--rdzv-id {req.rdzv_id!r}: letters, digits, '.', '_' and '-' only")
    return addr, port


def _slurm_launch(req: LaunchRequest, alloc: Allocation | None) -> LaunchConfig:
    """srun starts one launcher a node; each places its ranks from its own node's CPUs."""
    if alloc is None:
        raise CpuftError("--launcher slurm runs inside a Slurm allocation (an sbatch script or "
                         "an salloc shell): SLURM_JOB_ID is not set here, or this is already "
                         "an srun task")
    if req.hostfile or req.master_addr:
        raise CpuftError("--launcher slurm takes its nodes and rendezvous from the allocation: "
                         "drop --hostfile and --master-addr")
    nproc = 0 if req.nproc_per_node in (None, "auto") else _nproc(req, [])
    if req.max_restarts < 0:
        raise CpuftError("--max-restarts must be 0 or more")
    if req.nnodes is not None and req.min_nodes is None:
        raise CpuftError("--launcher slurm runs on the allocation's nodes: --nnodes takes "
                         "MIN:MAX there, an elastic job (sbatch --no-kill)")
    if req.nnodes is not None and req.nnodes != len(alloc.nodes):
        raise CpuftError(f"--nnodes {req.min_nodes}:{req.nnodes}: the allocation has "
                         f"{len(alloc.nodes)} node(s); MAX is their number")
    host, port = alloc.rendezvous
    check_host(host, "the allocation's first node")
    return LaunchConfig(
        hosts=[Host(check_host(n, "SLURM_JOB_NODELIST")) for n in alloc.nodes],
        nproc_per_node=nproc, launcher="slurm", master_addr=host, master_port=port,
        max_restarts=req.max_restarts, workdir=os.getcwd(), python=sys.executable,
        module_args=list(req.program), train_args=list(req.train_args),
        rdzv_id=f"slurm-{alloc.job_id}", cpus_per_node=min(alloc.cpus_per_node, default=0),
        comm_cores=req.comm_cores, nnodes=len(alloc.nodes), min_nodes=req.min_nodes or 0,
    )


def _elastic_hosts(req: LaunchRequest, hosts: list[Host]) -> str:
    """An elastic job over a hostfile: its checks; the host that serves the store."""
    if req.launcher not in (None, "ssh"):
        raise CpuftError(f"--nnodes {req.min_nodes}:{req.nnodes} starts one torchrun a host "
                         f"through the remote shell: --launcher {req.launcher} cannot")
    if req.nnodes != len(hosts):
        raise CpuftError(f"--nnodes {req.min_nodes}:{req.nnodes}: the hostfile lists "
                         f"{len(hosts)} host(s); MAX is their number")
    if not req.rdzv_endpoint:
        raise CpuftError(f"--nnodes {req.min_nodes}:{req.nnodes} needs --rdzv-endpoint "
                         "HOST:PORT: a host that no spot loss can take (the login host, an "
                         "on-demand node), where cpuft serves the job's rendezvous store")
    if req.master_addr:
        raise CpuftError("an elastic job meets at --rdzv-endpoint: drop --master-addr")
    if req.rejoin_after_s <= 0:
        raise CpuftError("--rejoin-after must be longer than nothing")
    host, _ = parse_endpoint(req.rdzv_endpoint, "--rdzv-endpoint")
    if host in {h.name for h in hosts}:
        raise CpuftError(f"--rdzv-endpoint {host} is a host of the job: its loss would end "
                         "the job; serve the store on a host that is not in the hostfile")
    return host


def build_launch(req: LaunchRequest, check_network: bool = True,
                 environ: dict[str, str] | None = None) -> LaunchConfig:
    """The LaunchConfig for ``req``. ``check_network=False`` leaves the network (master address,
    interfaces, port) unresolved; ``environ`` (default: this process's) says whether a
    scheduler started it."""
    environ = dict(os.environ) if environ is None else environ
    alloc = allocation(environ)
    per_node = req.nnodes is not None and not req.hostfile
    if req.launcher == "slurm" or (alloc and not per_node and not req.launcher
                                   and not req.hostfile):
        cfg = _slurm_launch(req, alloc)
        if cfg.elastic and check_network:
            # The store is served here, beside the batch script (or the salloc shell), on the
            # address that reaches the first node.
            cfg.remote_shell = LOCAL_SHELL
            cfg.master_addr = address_toward(cfg, _resolve(cfg.master_addr, req.resolve_wait_s))
        return cfg
    if per_node and req.node_rank is None:
        req = replace(req, node_rank=scheduler_node_rank(environ))
    if per_node and req.rdzv_endpoint is None:
        req = replace(req, rdzv_endpoint=scheduler_endpoint(environ))
    if req.nnodes is None and (req.node_rank is not None or req.rdzv_endpoint or req.rdzv_id):
        raise CpuftError("--node-rank, --rdzv-endpoint and --rdzv-id go with --nnodes")
    if req.hostfile and req.nnodes is not None and req.min_nodes is None:
        raise CpuftError("--nnodes with --hostfile takes MIN:MAX, an elastic job over the "
                         "hostfile's hosts (without --hostfile, --nnodes N starts one node's "
                         "ranks alone)")
    endpoint = _endpoint(req) if per_node else None
    hosts = ([Host(socket.gethostname())] if per_node else
             read_hostfile(req.hostfile) if req.hostfile else [Host("localhost")])
    store_host = (_elastic_hosts(req, hosts) if req.hostfile and req.nnodes is not None
                  else "")
    if req.master_addr is not None:
        check_host(req.master_addr, "--master-addr")
    launcher = "node" if per_node else req.launcher or ("ssh" if req.hostfile else "local")
    nproc = _nproc(req, hosts)
    for h in hosts:
        if h.slots is not None and nproc > h.slots:
            raise CpuftError(f"--nproc-per-node {nproc} is more than the {h.slots} slots of "
                             f"{h.name} in the hostfile")
    if req.max_restarts < 0:
        raise CpuftError("--max-restarts must be 0 or more")
    if not 0 < req.master_port < 65536:
        raise CpuftError(f"--master-port {req.master_port}: a port is 1 to 65535")
    placements = plan_node(read_topology(), nproc, comm_cores=req.comm_cores)
    if req.comm_cores and nproc * len(hosts) == 1:
        print(f"cpuft: warning: --comm-cores {req.comm_cores} with one process: it does not "
              "communicate, so those cores stay idle", file=sys.stderr)
    job = uuid.uuid4().hex[:12]
    env = {**forwarded_env(dict(os.environ)), **node_env(placements), "CPUFT_JOB": job}
    if req.min_nodes is not None:
        env[ELASTIC_ENV] = f"{req.min_nodes}:{req.nnodes}"
        # torchrun's agents share a store served by the first round's rank 0 and keep its
        # address across rounds: once that node is lost, the others wait on it for good. Each
        # round's rank 0 then serves its workers' store afresh.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    elif not (per_node and req.nproc_per_node in (None, "auto")):
        # Every node's count is known here (a per-node 'auto' is each node's own): a world
        # that forms otherwise is refused by its ranks (distributed.group.init_distributed).
        env[WORLD_SIZE_ENV] = str((req.nnodes or len(hosts)) * nproc)
    allocator, path, _ = choose_allocator(req.allocator)
    env.update(allocator_env(allocator, path, env))
    cfg = LaunchConfig(
        hosts=hosts, nproc_per_node=nproc, launcher=launcher,
        master_addr=endpoint[0] if endpoint else req.master_addr or "127.0.0.1",
        master_port=endpoint[1] if endpoint else req.master_port,
        max_restarts=req.max_restarts,
        remote_shell=req.remote_shell or DEFAULT_REMOTE_SHELL, mpi=req.mpi,
        workdir=os.getcwd(), python=sys.executable, module_args=list(req.program),
        train_args=list(req.train_args), env=env,
        run_as_root=os.geteuid() == 0, rdzv_id=(req.rdzv_id or "cpuft") if per_node else job,
        nnodes=req.nnodes if per_node and req.nnodes else 0, node_rank=req.node_rank or 0,
        min_nodes=req.min_nodes or 0, store_host=store_host,
        rejoin_after_s=req.rejoin_after_s,
    )
    if store_host:
        cfg.rdzv_id, cfg.master_port = req.rdzv_id or job, parse_endpoint(
            req.rdzv_endpoint or "", "--rdzv-endpoint")[1]
    if not check_network:
        return cfg
    if launcher == "local":
        cfg.host_env["localhost"] = {"CPUFT_HOST": socket.gethostname()}
        if not _port_free(cfg.master_port):
            raise CpuftError(f"port {cfg.master_port} is in use here: pass --master-port")
    elif launcher == "ssh" and store_host:
        cfg.master_addr = host_address(cfg, store_host)
        resolve_network(cfg, master_given=True)
        check_port(cfg, store_host)
    elif launcher == "ssh":
        resolve_network(cfg, master_given=bool(req.master_addr))
        check_port(cfg)
    elif launcher == "node":
        # This node's side of the network, found as the ssh launcher finds each host's.
        cfg.remote_shell = LOCAL_SHELL
        if cfg.nnodes > 1:
            resolve_network(cfg, master_given=True)
        else:
            cfg.host_env[hosts[0].name] = {"CPUFT_HOST": hosts[0].name}
        if cfg.node_rank == 0 and not cfg.elastic:  # an elastic job's store is served apart
            check_port(cfg)
    return cfg
