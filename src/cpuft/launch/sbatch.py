"""The sbatch script of ``cpuft slurm script``: plain sbatch that a user can read, edit and
submit, running ``cpuft launch --launcher slurm`` with the interpreter it was written from."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field

from cpuft.errors import CpuftError

# Slurm's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SUBMITTED = re.compile(r"Submitted batch job (\d+)")


def time_limit_seconds(text: str) -> int:
    """A Slurm ``--time`` in seconds; one line for a value Slurm would refuse."""
    m = _TIME.fullmatch(text)
    if not m or not text:
        raise CpuftError(f"--time {text!r}: give minutes, HH:MM:SS or D-HH:MM:SS, as sbatch does")
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return ((int(days) * 24 + int(a)) * 60 + int(b or 0)) * 60 + int(c or 0)
    if c is not None:  # HH:MM:SS
        return (int(a) * 60 + int(b)) * 60 + int(c)
    return int(a) * 60 + int(b or 0)  # MM[:SS]


@dataclass(kw_only=True, frozen=True)
class SbatchRequest:
    nodes: int
    command: list[str]
    """What ``cpuft launch`` runs on the ranks: ``train ARGS`` or ``python SCRIPT ARGS``."""
    python: str
    workdir: str
    time: str | None = None
    partition: str | None = None
    cpus_per_node: int | None = None
    """CPUs to ask of each node; None: the whole node (``--exclusive``)."""
    nproc_per_node: str = "auto"
    signal_lead_s: int = 300
    """How long before the time limit Slurm sends SIGTERM, for the ranks to checkpoint."""
    lock: str | None = None
    """A ``cpuft env lock`` file every node is checked against before training."""
    job_name: str = "cpuft"
    launch_flags: list[str] = field(default_factory=list)
    """Further ``cpuft launch`` flags (``--comm-cores 1``)."""
    min_nodes: int | None = None
    """An elastic job: it goes on while this many of its nodes are left (``--no-kill``)."""


def _checked(req: SbatchRequest) -> None:
    if req.nodes < 1:
        raise CpuftError("--nodes must be at least 1")
    if req.min_nodes is not None and not 1 <= req.min_nodes <= req.nodes:
        raise CpuftError(f"--min-nodes {req.min_nodes}: from 1 to --nodes {req.nodes}")
    if req.cpus_per_node is not None and req.cpus_per_node < 1:
        raise CpuftError("--cpus-per-node must be at least 1")
    if req.partition is not None and not _NAME.fullmatch(req.partition):
        raise CpuftError(f"--partition {req.partition!r}: letters, digits, '.', '_', '-' only")
    if not _NAME.fullmatch(req.job_name):
        raise CpuftError(f"--job-name {req.job_name!r}: letters, digits, '.', '_', '-' only")
    if req.signal_lead_s < 60:
        raise CpuftError("--signal-lead must be at least 60 seconds: Slurm may send the signal "
                         "up to a minute off")
    if req.time is not None and time_limit_seconds(req.time) <= req.signal_lead_s:
        raise CpuftError(f"--time {req.time} leaves no training before the SIGTERM sent "
                         f"{req.signal_lead_s}s ahead of it: give a longer --time or a shorter "
                         "--signal-lead")


def rank_command(command: list[str]) -> list[str]:
    """``command`` as the job runs it: ``train`` gets ``--resume auto`` unless it says how to
    resume, so that a requeued job continues from its checkpoint and a first one starts."""
    if command[:1] != ["train"] or any(a == "--resume" or a.startswith("--resume=")
                                       for a in command):
        return list(command)
    return [*command, "--resume", "auto"]


def sbatch_script(req: SbatchRequest, written_by: str) -> str:
    """The script's text. Every value that reaches a command line is quoted."""
    _checked(req)
    q = shlex.quote
    cpus = (f"#SBATCH --cpus-per-task={req.cpus_per_node}" if req.cpus_per_node else
            "#SBATCH --exclusive              # each node's every CPU (--cpus-per-node asks "
            "for fewer)")
    lines = [
        "#!/bin/bash",
        f"# {written_by}",
        "# Submit with `sbatch FILE`; it is plain sbatch: read and edit it as you like.",
        f"#SBATCH --job-name={req.job_name}",
        f"#SBATCH --nodes={req.nodes}",
        "#SBATCH --ntasks-per-node=1      # one cpuft launcher a node; it starts the ranks",
        cpus,
    ]
    if req.time:
        lines.append(f"#SBATCH --time={req.time}")
    if req.partition:
        lines.append(f"#SBATCH --partition={req.partition}")
    lines += [
        f"#SBATCH --signal=TERM@{req.signal_lead_s}         # SIGTERM ahead of the time limit: "
        "the ranks agree on a step and checkpoint",
        *(["#SBATCH --no-kill                # a node lost: the others go on (--min-nodes)"]
          if req.min_nodes is not None else []),
        "#SBATCH --requeue                # a requeued job resumes from that checkpoint",
        "#SBATCH --open-mode=append       # and its output follows the first attempt's",
        f"#SBATCH --output={req.job_name}-%j.out",
        "",
        "set -euo pipefail",
        f"cd {q(req.workdir)}",
    ]
    if req.lock:
        lines += ["# Every node must have the software this job was written for.",
                  f"srun --nodes={req.nodes} --ntasks={req.nodes} --ntasks-per-node=1 "
                  f"{q(req.python)} -m cpuft env verify --lock {q(req.lock)}"]
    elastic = ([] if req.min_nodes is None else
               ["--nnodes", f"{req.min_nodes}:{req.nodes}"])
    launch = [req.python, "-m", "cpuft", "launch", "--launcher", "slurm", *elastic,
              "--nproc-per-node", req.nproc_per_node, *req.launch_flags, "--",
              *rank_command(req.command)]
    lines.append(f"exec {shlex.join(launch)}")
    return "\n".join(lines) + "\n"


def submit(path: str, environ: dict[str, str] | None = None) -> str:
    """``sbatch path``; the job id."""
    try:
        proc = subprocess.run(["sbatch", "--", path], capture_output=True, text=True,
                              timeout=60, check=False, env=environ)
    except FileNotFoundError:
        raise CpuftError("sbatch is not installed here: submit the script from a Slurm login "
                         "node") from None
    except subprocess.TimeoutExpired:
        raise CpuftError("sbatch did not answer within 60s") from None
    m = _SUBMITTED.search(proc.stdout)
    if proc.returncode or not m:
        why = (proc.stderr.strip().splitlines() or [proc.stdout.strip() or "no message"])[-1]
        raise CpuftError(f"sbatch refused {path}: {why}")
    return m.group(1)
