"""Who this process is in a job, from whichever launcher started it (no torch)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cpuft.errors import CpuftError
from cpuft.launch.commands import WORLD_SIZE_ENV
from cpuft.scheduler.slurm import srun_task
from cpuft.topology.placement import COMM_CORES_ENV, RANK_CORES_ENV, cores_for_local_rank

# (rank, world size, local rank) variables of each launcher, in order of preference.
# (rank, world size, local rank, ranks on this node)
LAUNCHER_VARS = {
    "torchrun": ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    "openmpi": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE"),
    "hydra": ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # Intel MPI, MPICH
}
"""Then Slurm's, in a task srun started (cpuft.scheduler.slurm)."""


@dataclass(frozen=True, slots=True)
class RankInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    """The ranks on this node (the whole world where the launcher did not say)."""
    launcher: str = ""
    """Who set them: a key of LAUNCHER_VARS, 'slurm', or '' (nobody: a single process)."""

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def rank_info(environ: Mapping[str, str]) -> RankInfo:
    """Rank, world size and local rank; a single process when no launcher set them."""
    for launcher, (rank_var, size_var, local_var, local_size_var) in LAUNCHER_VARS.items():
        if rank_var in environ and size_var in environ:
            world = int(environ[size_var])
            return RankInfo(
                rank=int(environ[rank_var]),
                world_size=world,
                local_rank=int(environ.get(local_var, "0")),
                local_world_size=int(environ.get(local_size_var, world)),
                launcher=launcher,
            )
    task = srun_task(environ)
    if task is not None:
        return RankInfo(rank=task.rank, world_size=task.world_size, local_rank=task.local_rank,
                        local_world_size=task.local_world_size, launcher="slurm")
    return RankInfo()


def rendezvous(environ: Mapping[str, str]) -> tuple[str, int] | None:
    """Where the job's ranks meet: ``MASTER_ADDR``:``MASTER_PORT`` as launchers set them, or,
    in srun's tasks, the step's first node on the job's port; None where nobody said."""
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if addr and port and port.isdigit():
        return addr, int(port)
    task = srun_task(environ)
    if task is not None:
        return task.master_addr, task.master_port
    return None


def launched_cores(environ: Mapping[str, str]) -> tuple[list[int], list[int]]:
    """This rank's compute cores and communication cores, as ``cpuft launch`` gave them
    (``CPUFT_RANK_CORES`` and ``CPUFT_COMM_CORES``, one group per local rank); empty lists for
    what it did not give."""
    local_rank = rank_info(environ).local_rank
    cores = (cores_for_local_rank(environ[RANK_CORES_ENV], local_rank)
             if environ.get(RANK_CORES_ENV) else [])
    comm = (cores_for_local_rank(environ[COMM_CORES_ENV], local_rank, COMM_CORES_ENV)
            if environ.get(COMM_CORES_ENV) else [])
    return cores, comm


def check_world(environ: Mapping[str, str], info: RankInfo) -> None:
    """Refuse a world other than the one the launcher asked for (nodes started with different
    counts of ranks), before joining it."""
    asked = environ.get(WORLD_SIZE_ENV, "")
    if asked.isdigit() and int(asked) != info.world_size:
        raise CpuftError(f"the job formed a world of {info.world_size} ranks, not the {asked} "
                         "asked for: every node must start with the same --nnodes and "
                         "--nproc-per-node")
