"""How ``cpuft launch`` runs a user's script on each rank: ``python -m cpuft.distributed.script
SCRIPT.py ARGS`` or ``... -m MODULE ARGS``.

Before the script (and torch) loads, the rank pins itself to its share of the node's cores
(``CPUFT_RANK_CORES``, by local rank) and sets torch.distributed's ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` where the launcher
(mpirun, srun) named them otherwise, so
that a script calling ``torch.distributed.init_process_group()`` itself joins the job, as one
calling ``cpuft.distributed.init()`` does. A ``CpuftError`` the script lets out ends the rank
with one line naming it, and exit code 2. A process group the script leaves open is destroyed
when it ends.
"""

from __future__ import annotations

import os
import runpy
import sys

from cpuft.distributed.env import launched_cores, rank_info, rendezvous
from cpuft.errors import CpuftError


def prepare_rank(environ: dict[str, str] | os._Environ[str]) -> list[int]:
    """Set the torch.distributed variables and pin this process; the cores it took."""
    info = rank_info(environ)
    if info.distributed:
        environ.setdefault("RANK", str(info.rank))
        environ.setdefault("WORLD_SIZE", str(info.world_size))
        environ.setdefault("LOCAL_RANK", str(info.local_rank))
        environ.setdefault("LOCAL_WORLD_SIZE", str(info.local_world_size))
        meet = rendezvous(environ)
        if meet is not None:
            environ.setdefault("MASTER_ADDR", meet[0])
            environ.setdefault("MASTER_PORT", str(meet[1]))
    cores = launched_cores(environ)[0] if hasattr(os, "sched_setaffinity") else []
    if cores:
        os.sched_setaffinity(0, cores)
    return cores


def main() -> None:
    argv = sys.argv[1:]
    info = rank_info(os.environ)
    try:
        prepare_rank(os.environ)
        if argv[:1] == ["-m"] and len(argv) > 1:
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv:
            sys.argv = argv
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
        else:
            raise CpuftError("no script to run")
    except CpuftError as e:
        print(f"cpuft: rank {info.rank}: {e}", file=sys.stderr)
        sys.exit(2)
    finally:
        _leave_group()


def _leave_group() -> None:
    """Destroy the process group a script left open: left to the interpreter's exit, its
    teardown can wait on a peer that is already gone."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
