"""This node's place in a job whose scheduler starts one launcher a node: the values the
per-node mode (``cpuft launch --nnodes``) takes from the environment where no flag gives them."""

from __future__ import annotations

from collections.abc import Mapping

from cpuft.scheduler.slurm import srun_task


def scheduler_node_rank(environ: Mapping[str, str]) -> int | None:
    """The node rank srun (``SLURM_NODEID`` in a task), Kubeflow Trainer (``PET_NODE_RANK``) or
    a Kubernetes Indexed Job (``JOB_COMPLETION_INDEX``) gave this node; None where none did."""
    task = srun_task(environ)
    if task is not None:
        return task.node_rank
    for name in ("PET_NODE_RANK", "JOB_COMPLETION_INDEX"):
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def scheduler_endpoint(environ: Mapping[str, str]) -> str | None:
    """Node 0's HOST:PORT as Kubeflow Trainer gives it (``PET_MASTER_ADDR``, ``PET_MASTER_PORT``);
    None where it does not."""
    addr, port = environ.get("PET_MASTER_ADDR"), environ.get("PET_MASTER_PORT")
    return f"{addr}:{port}" if addr and port else None
