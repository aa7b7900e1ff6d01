"""Pure builders of the commands that start a job: ``(config) -> (argv, env)``, nothing started.

One torchrun agent per node (local, or through a remote shell), or one ``mpirun``.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from cpuft.errors import CpuftError
from cpuft.launch import elastic
from cpuft.launch.hostfile import Host
from cpuft.launch.names import check_env_name, check_host
from cpuft.launch.program import user_command

# "--" ends ssh's options: nothing after it is read as one, whatever the host is called.
DEFAULT_REMOTE_SHELL = "ssh -o BatchMode=yes -- {host} {command}"
# Environment a rank needs from the launching machine, forwarded to every node.
FORWARD_PREFIXES = ("CPUFT_", "OMP_", "KMP_", "GOMP_", "HF_", "TOKENIZERS_", "MALLOC_CONF",
                    "LD_PRELOAD", "GLOO_", "TORCH_", "ACCELERATE_")


WORLD_SIZE_ENV = "CPUFT_WORLD_SIZE"
"""The world the launcher asked for, where it knows it; a rank in another refuses to train."""
ELASTIC_ENV = "CPUFT_ELASTIC_NODES"
"""An elastic job's ``MIN:MAX`` nodes: its ranks' world changes as nodes come and go."""
ELASTIC_SAVE_EVERY = "10m"
"""An elastic job's --save-every where none is given: a node lost without notice costs at most
this much work."""


@dataclass(kw_only=True, slots=True)
class LaunchConfig:
    """A job: which hosts, how many ranks each, how they meet, and what each rank runs."""

    hosts: list[Host]
    nproc_per_node: int
    launcher: str = "local"
    """'local' (torchrun here), 'ssh' (torchrun on each host through --remote-shell), 'mpirun',
    'node' (this node's torchrun in a job of --nnodes, as a scheduler starts it) or 'slurm'
    (srun starts the per-node mode on every node of the allocation)."""
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    max_restarts: int = 0
    remote_shell: str = DEFAULT_REMOTE_SHELL
    mpi: str = "openmpi"
    """'openmpi' or 'intelmpi' (also MPICH's Hydra)."""
    workdir: str = "."
    python: str = sys.executable
    rdzv_id: str = "cpuft"
    module_args: list[str] = field(default_factory=lambda: ["-m", "cpuft", "train"])
    train_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """Environment for every rank (placement, allocator, forwarded variables)."""
    host_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per-host additions, e.g. GLOO_SOCKET_IFNAME for the interface that routes to the master."""
    host_addr: dict[str, str] = field(default_factory=dict)
    """Each host's address on the cluster network (torchrun's --local-addr)."""
    run_as_root: bool = False
    nnodes: int = 0
    """Per-node mode (a scheduler starts one launcher a node): the job's nodes; 0 otherwise."""
    node_rank: int = 0
    """Per-node mode: this node's rank (0 serves the rendezvous store)."""
    cpus_per_node: int = 0
    """Slurm: the CPUs srun gives each node's launcher (0: srun's default)."""
    comm_cores: int = 0
    """Slurm: handed to each node's launcher, which keeps them for communication."""
    min_nodes: int = 0
    """An elastic job's fewest nodes (``--nnodes MIN:MAX``); 0: a job of fixed nodes."""
    store_host: str = ""
    """An elastic job with a hostfile: the host where the launcher starts the rendezvous store
    (``cpuft rendezvous``) through the remote shell."""
    rejoin_after_s: float = elastic.REJOIN_AFTER_S
    """An elastic job with a hostfile: how long before a lost host is tried again."""

    @property
    def world_size(self) -> int:
        return (self.nnodes or len(self.hosts)) * self.nproc_per_node

    @property
    def elastic(self) -> bool:
        return self.min_nodes > 0


def torchrun_args(cfg: LaunchConfig, node_rank: int) -> list[str]:
    """The torchrun command of one node's agent (``python -m cpuft.distributed.agent``: torchrun
    with its rendezvous store bound to the rendezvous address)."""
    host = cfg.hosts[0 if cfg.nnodes else node_rank]
    if cfg.nnodes:
        node_rank = cfg.node_rank
    nodes = cfg.nnodes or len(cfg.hosts)
    if cfg.elastic:  # the store is served apart, by `cpuft rendezvous`
        shape = [f"--nnodes={cfg.min_nodes}:{nodes}", f"--rdzv-conf={elastic.rdzv_conf()}",
                 f"--max-restarts={max(cfg.max_restarts, elastic.RESTARTS)}"]
    else:  # the first host serves the rendezvous store; the others must not try to
        shape = [f"--nnodes={nodes}",
                 f"--rdzv-conf=is_host={'true' if node_rank == 0 else 'false'}",
                 f"--max-restarts={cfg.max_restarts}"]
    args = [
        cfg.python, "-m", "cpuft.distributed.agent", shape[0],
        f"--nproc-per-node={cfg.nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={cfg.master_addr}:{cfg.master_port}",
        f"--rdzv-id={cfg.rdzv_id}",
        *shape[1:],
        "--monitor-interval=1",
    ]
    if host.name in cfg.host_addr:
        args.append(f"--local-addr={cfg.host_addr[host.name]}")
    return [*args, *cfg.module_args, *cfg.train_args]


def _env_for(cfg: LaunchConfig, host: str) -> dict[str, str]:
    return {**cfg.env, **cfg.host_env.get(host, {}),
            "MASTER_ADDR": cfg.master_addr, "MASTER_PORT": str(cfg.master_port)}


def local_command(cfg: LaunchConfig) -> tuple[list[str], dict[str, str]]:
    """One torchrun agent on this machine; env is what to add to the caller's environment."""
    if len(cfg.hosts) != 1:
        raise CpuftError("the local launcher runs on one host: use --launcher ssh or mpirun")
    return torchrun_args(cfg, 0), _env_for(cfg, cfg.hosts[0].name)


def remote_command(template: str, host: str, script: str) -> list[str]:
    """The remote-shell argv that runs ``script`` (a POSIX shell line) on ``host``.

    ``{command}`` in the template receives the script as one argument (ssh hands it to the
    remote shell); a template without it gets ``sh -c SCRIPT`` appended (``ip netns exec``).
    """
    check_host(host.strip("[]"))
    parts = [p.replace("{host}", host) for p in shlex.split(template)]
    if "{command}" in parts:
        return [script if p == "{command}" else p for p in parts]
    return [*parts, "sh", "-c", script]


@dataclass(frozen=True, slots=True)
class RemoteStart:
    """A process to start on ``host`` through the remote shell: its argv, and the text to write
    to its standard input, where the environment travels (never in an argv, which every user of
    a machine can read in its process list)."""

    host: str
    argv: list[str]
    stdin: str


def env_script(env: dict[str, str]) -> str:
    """Shell lines that export ``env``, each value quoted."""
    return "".join(f"export {check_env_name(k)}={shlex.quote(v)}\n"
                   for k, v in sorted(env.items()))


def _remote_start(cfg: LaunchConfig, host: str, env: dict[str, str],
                  program: list[str]) -> RemoteStart:
    # The remote shell reads the exports from its standard input, then becomes the program.
    script = f'eval "$(cat)" && cd {shlex.quote(cfg.workdir)} && exec {shlex.join(program)}'
    return RemoteStart(host, remote_command(cfg.remote_shell, host, script), env_script(env))


def ssh_commands(cfg: LaunchConfig) -> list[RemoteStart]:
    """Per host, what starts its torchrun agent there."""
    return [ssh_command(cfg, rank) for rank in range(len(cfg.hosts))]


def ssh_command(cfg: LaunchConfig, rank: int) -> RemoteStart:
    """What starts the torchrun agent of the ``rank``-th host (again, after it was lost)."""
    host = cfg.hosts[rank].name
    return _remote_start(cfg, host, _env_for(cfg, host), torchrun_args(cfg, rank))


def store_argv(cfg: LaunchConfig) -> list[str]:
    """An elastic job's rendezvous store, served at the rendezvous address."""
    listen = f"{check_host(cfg.master_addr)}:{cfg.master_port}"
    return [cfg.python, "-m", "cpuft", "rendezvous", "--listen", listen]


def store_command(cfg: LaunchConfig) -> RemoteStart:
    """The store, on ``store_host`` through the remote shell."""
    return _remote_start(cfg, cfg.store_host, {}, store_argv(cfg))


def direct_commands(cfg: LaunchConfig) -> list[RemoteStart]:
    """One process per host, its rank set directly (no torchrun): for short probes."""
    out = []
    for rank, host in enumerate(cfg.hosts):
        env = {**_env_for(cfg, host.name), "RANK": str(rank), "WORLD_SIZE": str(len(cfg.hosts)),
               "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        out.append(_remote_start(cfg, host.name, env,
                                 [cfg.python, *cfg.module_args, *cfg.train_args]))
    return out


def mpirun_command(cfg: LaunchConfig) -> tuple[list[str], dict[str, str]]:
    """One mpirun for every rank on every host; ranks read PMI_* or OMPI_COMM_WORLD_*."""
    env = {**cfg.env, "MASTER_ADDR": cfg.master_addr, "MASTER_PORT": str(cfg.master_port)}
    program = [cfg.python, *cfg.module_args, *cfg.train_args]
    n = cfg.world_size
    if cfg.mpi == "openmpi":
        hosts = ",".join(f"{check_host(h.name)}:{cfg.nproc_per_node}" for h in cfg.hosts)
        argv = ["mpirun", "-np", str(n), "-H", hosts, "--map-by", f"ppr:{cfg.nproc_per_node}:node",
                "--bind-to", "none", "--wdir", cfg.workdir]
        if cfg.run_as_root:
            argv.append("--allow-run-as-root")
        for key in sorted(env):
            argv += ["-x", key]
        return [*argv, *program], env
    if cfg.mpi == "intelmpi":
        # -genvlist names the variables; their values stay in mpirun's environment.
        argv = ["mpirun", "-n", str(n), "-ppn", str(cfg.nproc_per_node),
                "-hosts", ",".join(h.name for h in cfg.hosts), "-wdir", cfg.workdir,
                "-genvlist", ",".join(check_env_name(k) for k in sorted(env))]
        return [*argv, *program], env
    raise CpuftError(f"unknown MPI {cfg.mpi!r}: use openmpi or intelmpi")


def srun_command(cfg: LaunchConfig) -> tuple[list[str], dict[str, str]]:
    """One srun task on every node of the allocation, each the per-node mode: that node's ranks,
    placed from that node's own CPUs (its task's affinity), meeting on the first node.

    ``--ntasks-per-node=1`` with ``--ntasks`` set: an allocation of several tasks a node would
    otherwise make srun start one launcher per task. The CPUs are passed explicitly, as Slurm
    22.05's srun does not take ``--cpus-per-task`` from the allocation.
    """
    n = len(cfg.hosts)
    # Elastic: a node lost ends neither the step nor the others' tasks; they meet at the store
    # the launcher serves here, beside the batch script.
    argv = ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
            *(["--kill-on-bad-exit=0", "--no-kill"] if cfg.elastic else
              ["--kill-on-bad-exit=1"]), f"--chdir={cfg.workdir}"]
    if cfg.cpus_per_node:
        argv.append(f"--cpus-per-task={cfg.cpus_per_node}")
    nodes = f"{cfg.min_nodes}:{n}" if cfg.elastic else str(n)
    argv += [cfg.python, "-m", "cpuft", "launch", f"--nnodes={nodes}",
             f"--rdzv-endpoint={check_host(cfg.master_addr)}:{cfg.master_port}",
             f"--rdzv-id={cfg.rdzv_id}", f"--nproc-per-node={cfg.nproc_per_node or 'auto'}",
             f"--max-restarts={cfg.max_restarts}"]
    if cfg.comm_cores:
        argv.append(f"--comm-cores={cfg.comm_cores}")
    return [*argv, "--", *user_command(cfg.module_args, cfg.train_args)], {}


def forwarded_env(
    environ: dict[str, str], names: Sequence[str] = FORWARD_PREFIXES
) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(tuple(names))}
