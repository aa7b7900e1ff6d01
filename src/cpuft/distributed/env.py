"""Who this process is in a job, from whichever launcher started it (no torch)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cpuft.topology.placement import COMM_CORES_ENV, RANK_CORES_ENV, cores_for_local_rank

# (rank, world size, local rank) variables of each launcher, in order of preference.
LAUNCHER_VARS = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),  # torchrun
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),  # Open MPI
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),  # Intel MPI, MPICH (Hydra)
)


@dataclass(frozen=True, slots=True)
class RankInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def rank_info(environ: Mapping[str, str]) -> RankInfo:
    """Rank, world size and local rank; a single process when no launcher set them."""
    for rank_var, size_var, local_var in LAUNCHER_VARS:
        if rank_var in environ and size_var in environ:
            return RankInfo(
                rank=int(environ[rank_var]),
                world_size=int(environ[size_var]),
                local_rank=int(environ.get(local_var, "0")),
            )
    return RankInfo()


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
