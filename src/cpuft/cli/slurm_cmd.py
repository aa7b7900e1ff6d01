"""``cpuft slurm script``: an sbatch script for a cpuft job on N Slurm nodes."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from typing import Any

DESCRIPTION = """\
Write an sbatch script that runs cpuft train, or a script of your own, on N Slurm nodes:

  cpuft slurm script --nodes 2 --time 4:00:00 -- train --output-dir /shared/runs/x
  cpuft slurm script --nodes 4 --partition cpu --submit -- python my_train.py

The script calls this interpreter and cpuft by absolute path, starts one cpuft launcher a node
with srun (each places its own node's ranks), asks Slurm for SIGTERM --signal-lead seconds
before the time limit so that the ranks checkpoint, and can be requeued: train resumes with
--resume auto. Keep --output-dir on a file system every node sees.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("slurm", help="run on a Slurm cluster: write an sbatch script",
                       description="Slurm: write (and submit) an sbatch script for a cpuft job.")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    s = verbs.add_parser("script", help="write an sbatch script for a job on N nodes",
                         description=DESCRIPTION,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--nodes", type=int, required=True, help="nodes to run on")
    s.add_argument("--min-nodes", type=int, default=None,
                   help="an elastic job: it goes on while this many nodes are left, from its "
                        "last checkpoint (sbatch --no-kill; its rendezvous store runs beside "
                        "the batch script)")
    s.add_argument("--time", help="time limit, as sbatch takes it (e.g. 4:00:00, 1-00:00:00)")
    s.add_argument("--partition", help="the partition to run in (default: the cluster's)")
    s.add_argument("--cpus-per-node", type=int,
                   help="CPUs to ask of each node (default: whole nodes, --exclusive)")
    s.add_argument("--nproc-per-node", default="auto",
                   help="ranks a node: a number or 'auto' (one per NUMA node)")
    s.add_argument("--signal-lead", type=int, default=300, metavar="SECONDS",
                   help="SIGTERM this long before the time limit, for a checkpoint (default: 300)")
    s.add_argument("--lock", help="a `cpuft env lock` file: every node is verified against it "
                                  "first (default: ./cpuft.lock where there is one)")
    s.add_argument("--job-name", default="cpuft", help="Slurm's name for the job")
    s.add_argument("--comm-cores", type=int, default=0,
                   help="cores per rank kept for communication (cpuft launch --comm-cores)")
    s.add_argument("--output", "-o", default="cpuft.sbatch",
                   help="where to write the script ('-': standard output; default: "
                        "cpuft.sbatch)")
    s.add_argument("--force", action="store_true", help="replace the --output file")
    s.add_argument("--submit", action="store_true", help="submit it with sbatch; print the job id")
    s.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- train [ARGS...] or -- python SCRIPT.py [ARGS...]: what the ranks run")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from cpuft import __version__
    from cpuft.cli.flags import rank_train_config
    from cpuft.cli.output import write_file
    from cpuft.errors import CpuftError
    from cpuft.launch.program import rank_program, user_command
    from cpuft.launch.sbatch import SbatchRequest, sbatch_script, submit

    rank = rank_program(list(args.command))
    if rank.is_train:  # the ranks' settings are checked now, not on the cluster
        rank_train_config(rank.args, args.min_nodes, args.nodes)
    command = user_command(rank.program, list(rank.args))
    if command[0] == "python":  # the script by absolute path: the job may start elsewhere
        command[1] = os.path.abspath(command[1]) if command[1] != "-m" else command[1]
    lock = args.lock or ("cpuft.lock" if os.path.isfile("cpuft.lock") else None)
    if lock is not None:
        if not os.path.isfile(lock):
            raise CpuftError(f"--lock {lock}: no such file")
        lock = os.path.abspath(lock)
    request = SbatchRequest(
        nodes=args.nodes, command=command, python=sys.executable, workdir=os.getcwd(),
        time=args.time, partition=args.partition, cpus_per_node=args.cpus_per_node,
        nproc_per_node=args.nproc_per_node, signal_lead_s=args.signal_lead, lock=lock,
        job_name=args.job_name, min_nodes=args.min_nodes,
        launch_flags=["--comm-cores", str(args.comm_cores)] if args.comm_cores else [],
    )
    written_by = (f"Written by `cpuft slurm script` (cpuft {__version__}) on "
                  f"{datetime.date.today().isoformat()}.")
    text = sbatch_script(request, written_by)
    if args.output == "-":
        if args.submit:
            raise CpuftError("--submit needs a file: give --output FILE")
        sys.stdout.write(text)
        return 0
    if os.path.exists(args.output) and not args.force:
        raise CpuftError(f"--output {args.output} exists: pass --force to replace it, or "
                         "another --output")
    write_file(args.output, text, "--output")
    if args.submit:
        job = submit(args.output)
        print(f"submitted {args.output} as Slurm job {job}; its output goes to "
              f"{request.job_name}-{job}.out", file=sys.stderr)
        print(job)  # alone on standard output, for scripts
    else:
        print(f"wrote {args.output}: submit it with `sbatch {args.output}`")
    return 0
