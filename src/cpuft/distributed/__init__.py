"""torch.distributed for training: the only package that touches process groups.

``cpuft.distributed.init()`` joins the job a launcher started (``cpuft launch``, torchrun,
mpirun) and returns ``(rank, world_size)``; in a plain single process it returns ``(0, 1)``.
A script that called ``torch.distributed.init_process_group()`` itself is joined as it is.
Nothing here loads torch until ``init`` or ``context`` is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cpuft.distributed.group import DistContext

_joined: list[DistContext | None] = []
"""The job this process joined (one entry, None for a single process), once ``init`` ran."""


def init(backend: str = "auto", timeout_s: float = 120.0) -> tuple[int, int]:
    """Join the job ``cpuft launch`` (or torchrun, mpirun, Slurm) started this process in.

    Args:
        backend: 'auto' (ccl where its binding imports, mpi under mpirun, else gloo), 'gloo',
            'mpi' or 'ccl'.
        timeout_s: how long a collective waits for the other ranks.

    Returns:
        ``(rank, world_size)``; ``(0, 1)`` in a single process. Calling it again returns the
        same.

    Raises:
        CpuftError: the job's environment names a world that cannot form (one line says why).
    """
    ctx = context(backend, timeout_s)
    return (ctx.info.rank, ctx.info.world_size) if ctx is not None else (0, 1)


def context(backend: str = "auto", timeout_s: float = 120.0,
            comm_cores: Sequence[int] | None = None) -> DistContext | None:
    """The job's context for cpuft's training loop (joining it first if needed); None in a
    single process.

    The process group's threads start on ``comm_cores``; by default on those ``cpuft launch
    --comm-cores`` kept for this rank, where the rank runs on the cores it was given.
    """
    if not _joined:
        _joined.append(_join(backend, timeout_s, comm_cores))
    return _joined[0]


def leave() -> None:
    """Leave the job this process joined through ``init`` or ``context``, if any: a later
    ``context`` joins afresh."""
    if _joined:
        from cpuft.distributed.group import shutdown

        shutdown(_joined.pop())


def joined() -> DistContext | None:
    """The job's context if this process is already in one (through ``init``, or its own
    ``init_process_group``); never joins one itself."""
    if _joined:
        return _joined[0]
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return context()
    return None


def rank0_value(value: float) -> float | None:
    """Rank 0's ``value`` on every rank of the job, so that what each rank measured for itself
    (channels-last's gain) becomes one choice and every rank runs the same model. ``value``
    itself in a single process; None in a launched rank that has not joined its job yet, which
    cannot learn rank 0's."""
    import os

    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if dist.get_world_size() == 1:
            return value
        box = torch.tensor([value], dtype=torch.float64)
        dist.broadcast(box, src=0)
        return float(box.item())
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return None
    return value


def _join(backend: str, timeout_s: float, comm_cores: Sequence[int] | None) -> Any:
    import os
    from dataclasses import replace

    import torch.distributed as dist

    from cpuft.distributed.env import rank_info
    from cpuft.distributed.group import DistContext, init_distributed

    if dist.is_available() and dist.is_initialized():  # the script's own process group
        world = dist.get_world_size()
        launched = rank_info(os.environ)
        info = replace(launched, rank=dist.get_rank(), world_size=world)
        local = launched.local_world_size if launched.launcher else world
        return DistContext(info=info, backend=str(dist.get_backend()),
                           nodes=max(1, world // max(local, 1)))
    if comm_cores is None:
        comm_cores = _launched_comm_cores()
    return init_distributed(backend, timeout_s, comm_cores=comm_cores)


def _launched_comm_cores() -> list[int]:
    """The communication cores ``cpuft launch`` kept for this rank, if the rank still runs on
    the cores it was given (a script pinned elsewhere keeps its own placement)."""
    import os

    from cpuft.distributed.env import launched_cores

    cores, comm = launched_cores(os.environ)
    if not comm or not hasattr(os, "sched_getaffinity") or os.sched_getaffinity(0) != set(cores):
        return []
    return comm
