"""From what a user asked for (``LaunchRequest``) to the job to start (``LaunchConfig``): hosts,
ranks, placement, allocator and network. The command line only parses into a request."""

from __future__ import annotations

import os
import socket
import sys
import uuid
from dataclasses import dataclass, field

from cpuft.errors import CpuftError
from cpuft.launch.commands import DEFAULT_REMOTE_SHELL, LaunchConfig, forwarded_env
from cpuft.launch.hostfile import Host, read_hostfile
from cpuft.launch.names import check_host
from cpuft.launch.run import check_port, resolve_network
from cpuft.speedplan.allocator import allocator_env, choose_allocator
from cpuft.topology import read_topology
from cpuft.topology.placement import auto_nproc, node_env, plan_node


@dataclass(kw_only=True, frozen=True)
class LaunchRequest:
    """A job as asked for: flags of ``cpuft launch`` / ``cpuft train``, or a benchmark's."""

    nproc_per_node: str | None = None
    """A number, 'auto' (one per NUMA node, or the hostfile's slots) or None (the same)."""
    hostfile: str | None = None
    launcher: str | None = None
    """'local', 'ssh' or 'mpirun'; None: ssh with a hostfile, else local."""
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


def build_launch(req: LaunchRequest, check_network: bool = True) -> LaunchConfig:
    """The LaunchConfig for ``req``. ``check_network=False`` leaves the network (master address,
    interfaces, port) unresolved."""
    hosts = read_hostfile(req.hostfile) if req.hostfile else [Host("localhost")]
    if req.master_addr is not None:
        check_host(req.master_addr, "--master-addr")
    launcher = req.launcher or ("ssh" if req.hostfile else "local")
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
    allocator, path, _ = choose_allocator(req.allocator)
    env.update(allocator_env(allocator, path, env))
    cfg = LaunchConfig(
        hosts=hosts, nproc_per_node=nproc, launcher=launcher,
        master_addr=req.master_addr or "127.0.0.1", master_port=req.master_port,
        max_restarts=req.max_restarts,
        remote_shell=req.remote_shell or DEFAULT_REMOTE_SHELL, mpi=req.mpi,
        workdir=os.getcwd(), python=sys.executable, module_args=list(req.program),
        train_args=list(req.train_args), env=env,
        run_as_root=os.geteuid() == 0, rdzv_id=job,
    )
    if not check_network:
        return cfg
    if launcher == "local":
        cfg.host_env["localhost"] = {"CPUFT_HOST": socket.gethostname()}
        if not _port_free(cfg.master_port):
            raise CpuftError(f"port {cfg.master_port} is in use here: pass --master-port")
    elif launcher == "ssh":
        resolve_network(cfg, master_given=bool(req.master_addr))
        check_port(cfg)
    return cfg
