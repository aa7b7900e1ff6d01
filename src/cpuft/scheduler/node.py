"""This node's place in a job whose scheduler starts one launcher a node: the values the
per-node mode (``cpuft launch --nnodes``) takes from the environment where no flag gives them."""

from __future__ import annotations

from collections.abc import Mapping

from cpuft.scheduler.slurm import srun_task


def scheduler_node_rank(environ: Mapping[str, str]) -> int | None:
    """The node rank srun (``SLURM_NODEID`` in a task) or Kubeflow Trainer (``PET_NODE_RANK``)
    gave this node; None where neither did."""
    task = srun_task(environ)
    if task is not None:
        return task.node_rank
    value = environ.get("PET_NODE_RANK", "")
    return int(value) if value.isdigit() else None
