"""``cpuft launch``: run ``cpuft train``, or any training script, on N processes on N hosts,
on torch.distributed."""

from __future__ import annotations

import argparse
from typing import Any

from cpuft.cli.launch_flags import add_launch_flags, launch_request

DESCRIPTION = """\
Run cpuft train, or a training script of your own, on several processes and hosts:

  cpuft launch --nproc-per-node 2 -- train --max-steps 100
  cpuft launch --hostfile hosts -- train --task mrpc --data-dir glue/MRPC
  cpuft launch --hostfile hosts --launcher mpirun -- train
  cpuft launch --nproc-per-node 2 -- python my_train.py --epochs 3
  cpuft launch --hostfile hosts my_train.py

A script's ranks get what cpuft train's get (pinned cores and threads, the preloaded allocator,
the OpenMP settings, the network interface, the rendezvous) and join the job with
cpuft.distributed.init(), cpuft.fit or torch.distributed.init_process_group(). "python" names
the interpreter cpuft runs under.

local and ssh start one torchrun agent per host (c10d rendezvous on the first host); mpirun
starts every rank with Open MPI or Intel MPI; inside a Slurm allocation (sbatch, salloc), srun
starts one launcher a node (--launcher slurm, the default there). Each rank pins itself to its
share of the host's cores, and every line it writes starts with [host:rank].
`cpuft train --nproc-per-node N --hostfile FILE ...` does the same.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("launch", help="run training on several processes or hosts",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_launch_flags(p)
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- train [ARGS...], -- python SCRIPT.py [ARGS...] or SCRIPT.py "
                        "[ARGS...]: what each rank runs")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from cpuft.cli.flags import rank_train_config
    from cpuft.launch.elastic import check_batch_splits
    from cpuft.launch.program import rank_program
    from cpuft.launch.request import build_launch
    from cpuft.launch.run import run_job

    rank = rank_program(list(args.command))
    if not rank.is_train:
        request = launch_request(args, list(rank.args), "auto", program=rank.program)
        return int(run_job(build_launch(request)))
    # The ranks' own settings decide what the launcher sets up for them (the allocator it
    # preloads).
    cfg = rank_train_config(rank.args)
    request = launch_request(args, list(rank.args), cfg.speedups.allocator)
    if request.min_nodes is not None and request.nnodes is not None:
        check_batch_splits(cfg.optimization.batch_size, request.min_nodes, request.nnodes)
    return int(run_job(build_launch(request)))
