"""Slurm's environment: hostlists, per-node counts, an allocation that has not started its tasks
yet (a batch script, an ``salloc`` shell) and a task that ``srun`` started.

Slurm sets the job's variables (``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``...) everywhere in a job,
but the step's (``SLURM_STEP_ID``, with ``SLURM_PROCID``) only in the tasks ``srun`` starts. The
batch script has ``SLURM_PROCID=0`` without a step, and the ``salloc`` shell runs on the login
node with no ``SLURM_PROCID`` at all: only the step id tells a task from an allocation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cpuft.errors import CpuftError

RDZV_PORT_BASE = 20000
RDZV_PORT_SPAN = 9000
"""A job's rendezvous port is ``RDZV_PORT_BASE + job id % RDZV_PORT_SPAN``: jobs that share
nodes, numbered one after the other, get different ports, all below the ephemeral range."""

_GROUP = re.compile(r"\[([^\]]*)\]")
_COUNT = re.compile(r"(\d+)(?:\(x(\d+)\))?")


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth < 0 or depth > 1:
            raise CpuftError(f"hostlist {text!r}: unbalanced brackets")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise CpuftError(f"hostlist {text!r}: unbalanced brackets")
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


def _range(text: str, whole: str) -> list[str]:
    out = []
    for piece in text.split(","):
        lo, sep, hi = piece.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise CpuftError(f"hostlist {whole!r}: {piece!r} is not a number or a range")
        if not sep:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise CpuftError(f"hostlist {whole!r}: the range {piece!r} runs backwards")
        out += [str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1)]
    return out


def expand_hostlist(text: str) -> list[str]:
    """The host names of a Slurm hostlist, in order, as ``scontrol show hostnames`` gives them:
    ``n[1-2],login`` is n1, n2, login; ``r[1-2]-n[01-02]`` is r1-n01, r1-n02, r2-n01, r2-n02;
    a range keeps the width of its first number (``n[08-10]``: n08, n09, n10)."""
    hosts: list[str] = []
    for item in _split_top(text):
        names = [""]
        pos = 0
        for m in _GROUP.finditer(item):
            fixed = item[pos:m.start()]
            names = [f"{n}{fixed}{i}" for n in names for i in _range(m.group(1), text)]
            pos = m.end()
        hosts += [n + item[pos:] for n in names]
    return hosts


def expand_counts(text: str) -> list[int]:
    """Slurm's per-node counts (``SLURM_TASKS_PER_NODE``, ``SLURM_JOB_CPUS_PER_NODE``):
    ``2(x3),1`` is 2, 2, 2, 1."""
    out: list[int] = []
    for piece in text.split(","):
        m = _COUNT.fullmatch(piece.strip())
        if not m:
            raise CpuftError(f"Slurm count list {text!r}: {piece!r} is not N or N(xM)")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def rendezvous_port(job_id: str) -> int:
    if not job_id.isdigit():
        raise CpuftError(f"SLURM_JOB_ID {job_id!r} is not a number")
    return RDZV_PORT_BASE + int(job_id) % RDZV_PORT_SPAN


@dataclass(frozen=True, slots=True)
class Allocation:
    """A Slurm job whose tasks are still to be started: a batch script or an ``salloc`` shell."""

    job_id: str
    nodes: list[str]
    cpus_per_node: list[int]
    """The CPUs the job has on each node, in the order of ``nodes``."""

    @property
    def rendezvous(self) -> tuple[str, int]:
        """The first node and the job's port: where the job's ranks meet."""
        return self.nodes[0], rendezvous_port(self.job_id)


def allocation(environ: Mapping[str, str]) -> Allocation | None:
    """The allocation this process runs in; None outside Slurm and inside an srun task."""
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id or "SLURM_STEP_ID" in environ:
        return None
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise CpuftError(f"Slurm job {job_id}: SLURM_JOB_NODELIST is not set")
    nodes = expand_hostlist(nodelist)
    cpus_text = environ.get("SLURM_JOB_CPUS_PER_NODE")
    cpus = expand_counts(cpus_text) if cpus_text else []
    if cpus and len(cpus) != len(nodes):
        raise CpuftError(f"Slurm job {job_id}: SLURM_JOB_CPUS_PER_NODE={cpus_text} does not "
                         f"match its {len(nodes)} node(s)")
    rendezvous_port(job_id)
    return Allocation(job_id=job_id, nodes=nodes, cpus_per_node=cpus)


@dataclass(frozen=True, slots=True)
class SlurmTask:
    """A task ``srun`` started: its place in the step, and where the step's ranks meet."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int


def srun_task(environ: Mapping[str, str]) -> SlurmTask | None:
    """This process as an srun task; None where srun did not start it."""
    if "SLURM_STEP_ID" not in environ or "SLURM_PROCID" not in environ:
        return None
    job_id = environ.get("SLURM_JOB_ID", "")
    nodelist = (environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
                or environ.get("SLURM_NODELIST", ""))
    nodes = expand_hostlist(nodelist) if nodelist else []
    per_node = (environ.get("SLURM_STEP_TASKS_PER_NODE")
                or environ.get("SLURM_TASKS_PER_NODE", ""))
    try:
        node_rank = int(environ.get("SLURM_NODEID", "0"))
        counts = expand_counts(per_node) if per_node else []
        return SlurmTask(
            rank=int(environ["SLURM_PROCID"]),
            world_size=int(environ.get("SLURM_STEP_NUM_TASKS") or environ["SLURM_NTASKS"]),
            local_rank=int(environ.get("SLURM_LOCALID", "0")),
            local_world_size=counts[node_rank] if node_rank < len(counts) else 1,
            node_rank=node_rank,
            nnodes=len(nodes) or int(environ.get("SLURM_NNODES", "1")),
            master_addr=nodes[0] if nodes else "127.0.0.1",
            master_port=rendezvous_port(job_id) if job_id else 29500,
        )
    except (KeyError, ValueError):
        raise CpuftError("srun task: SLURM_PROCID, SLURM_NTASKS or SLURM_NODEID is not a "
                         "number") from None
