"""``cpuft launch``: run ``cpuft train`` on N processes on N hosts, on torch.distributed."""

from __future__ import annotations

import argparse
from typing import Any

from cpuft.cli.launch_flags import add_launch_flags, launch_request

DESCRIPTION = """\
Run a cpuft command on several processes and hosts:

  cpuft launch --nproc-per-node 2 -- train --max-steps 100
  cpuft launch --hostfile hosts -- train --task mrpc --data-dir glue/MRPC
  cpuft launch --hostfile hosts --launcher mpirun -- train

local and ssh start one torchrun agent per host (c10d rendezvous on the first host); mpirun
starts every rank with Open MPI or Intel MPI. Each rank pins itself to its share of the host's
cores. `cpuft train --nproc-per-node N --hostfile FILE ...` does the same.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("launch", help="run training on several processes or hosts",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_launch_flags(p)
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- train [ARGS...]: the cpuft command each rank runs")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from cpuft.cli.flags import config_from_args
    from cpuft.cli.main import build_parser
    from cpuft.errors import CpuftError
    from cpuft.launch.request import build_launch
    from cpuft.launch.run import run_job

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if command[:1] != ["train"]:
        raise CpuftError("give the command to run after --, e.g. `cpuft launch -- train`")
    # The ranks' own settings, checked here once rather than on every rank, decide what the
    # launcher sets up for them (the allocator it preloads).
    cfg = config_from_args(build_parser().parse_args(command))
    request = launch_request(args, command[1:], cfg.speedups.allocator)
    return int(run_job(build_launch(request)))
