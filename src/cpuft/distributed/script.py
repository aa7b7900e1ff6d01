"""How ``cpuft launch`` runs a user's script on each rank: ``python -m cpuft.distributed.script
SCRIPT.py ARGS`` or ``... -m MODULE ARGS``.

Before the script (and torch) loads, the rank tags its output lines ``[host:rank]``, pins itself
to its share of the node's cores (``CPUFT_RANK_CORES``, by local rank) and sets
torch.distributed's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` where the launcher (mpirun, srun) named them otherwise, so
that a script calling ``torch.distributed.init_process_group()`` itself joins the job, as one
calling ``cpuft.distributed.init()`` does; ``ACCELERATE_USE_CPU=1`` too, without which an HF
Trainer script on a CPU-only torch trains a copy a rank. A ``CpuftError`` the script lets out
ends the rank with one line naming it, and exit code 2. A process group the script leaves open
is destroyed when it ends; a script that never made one, or never communicated in the one it
made, in a world of several ranks, is named in a warning.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

from cpuft.distributed.env import check_world, launched_cores, rank_info, rendezvous
from cpuft.errors import CpuftError
from cpuft.launch.tagged_output import tag_rank_output


def prepare_rank(environ: dict[str, str] | os._Environ[str]) -> list[int]:
    """Set the torch.distributed variables and pin this process; the cores it took."""
    info = rank_info(environ)
    if info.distributed:
        check_world(environ, info)
        environ.setdefault("RANK", str(info.rank))
        environ.setdefault("WORLD_SIZE", str(info.world_size))
        environ.setdefault("LOCAL_RANK", str(info.local_rank))
        environ.setdefault("LOCAL_WORLD_SIZE", str(info.local_world_size))
        meet = rendezvous(environ)
        if meet is not None:
            environ.setdefault("MASTER_ADDR", meet[0])
            environ.setdefault("MASTER_PORT", str(meet[1]))
        # accelerate (under HF Trainer) makes a DDP job on a CPU-only torch only when told to
        # use the CPU: without it every rank trains a copy of its own.
        environ.setdefault("ACCELERATE_USE_CPU", "1")
    cores = launched_cores(environ)[0] if hasattr(os, "sched_setaffinity") else []
    if cores:
        os.sched_setaffinity(0, cores)
    return cores


def main() -> None:
    argv = sys.argv[1:]
    info = rank_info(os.environ)
    if info.distributed:
        tag_rank_output(info.rank)
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
        joined, communicated = _leave_group()
    if not info.distributed or info.rank != 0:
        return
    if joined is False:
        print(f"cpuft: warning: {' '.join(argv)} ended without joining its job: its "
              f"{info.world_size} ranks ran as {info.world_size} separate copies of it. Call "
              "cpuft.distributed.init() (or torch.distributed.init_process_group()) in it, "
              "or run it on one process", file=sys.stderr)
    elif communicated is False:
        print(f"cpuft: warning: {' '.join(argv)} joined its job but never communicated in it: "
              f"its {info.world_size} ranks trained as {info.world_size} separate copies (a "
              "model that is not wrapped in DistributedDataParallel, or a library that was "
              "told not to use this process group)", file=sys.stderr)


def _leave_group() -> tuple[bool | None, bool | None]:
    """Destroy the process group a script left open: left to the interpreter's exit, its
    teardown can wait on a peer that is already gone. Whether the script ever made a process
    group, and whether its default group carried a collective (each None: torch does not
    say)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available():
        return False, None
    if dist.is_initialized():
        communicated = _communicated(dist)
        dist.destroy_process_group()
        return True, communicated
    # Counts every group made, also one the script has destroyed (a private name of torch's).
    world = getattr(sys.modules.get("torch.distributed.distributed_c10d"), "_world", None)
    count = getattr(world, "group_count", None)
    return (None if count is None else count > 0), None


def _communicated(dist: Any) -> bool | None:
    """Whether the default process group carried a collective: gloo counts them (a method of
    torch's that is not public; None where it is missing or not counted)."""
    try:
        group = dist.distributed_c10d._get_default_group()
        return int(group._get_sequence_number_for_group()) > 0
    except (AttributeError, RuntimeError):
        return None


if __name__ == "__main__":
    main()
