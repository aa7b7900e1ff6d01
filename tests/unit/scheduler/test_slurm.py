"""Slurm's environment as its tasks, batch scripts and salloc shells see it, from variables
recorded on a two-node Slurm 22.05 (../shared/notes/slurm.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cpuft.distributed.env import rank_info, rendezvous
from cpuft.errors import CpuftError
from cpuft.scheduler.node import scheduler_node_rank
from cpuft.scheduler.slurm import (
    allocation,
    expand_counts,
    expand_hostlist,
    rendezvous_port,
    srun_task,
)
from tests.unit.scheduler.recorded import BATCH_SCRIPT, SALLOC_SHELL, TASK_3

HOSTLISTS = ["n[1-2]", "n1", "n[1-3,7],login", "r[1-2]-n[08-10]", "node[001-003]",
             "a,b[9-11],c", "n[08-10]"]


@pytest.mark.parametrize("text, hosts", [
    ("n[1-2]", ["n1", "n2"]),
    ("n[1-3,7],login", ["n1", "n2", "n3", "n7", "login"]),
    ("r[1-2]-n[08-10]", ["r1-n08", "r1-n09", "r1-n10", "r2-n08", "r2-n09", "r2-n10"]),
])
def test_hostlists_expand_in_slurms_order(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm's client is not installed "
                    "(.ci/run installs it)")
def test_hostlists_expand_as_scontrol_expands_them(tmp_path: Path):
    conf = tmp_path / "slurm.conf"  # enough for scontrol to run without a controller
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p "
                    "Nodes=n1\n")
    for text in HOSTLISTS:
        out = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True,
                             text=True, check=True, env={**os.environ, "SLURM_CONF": str(conf)})
        assert expand_hostlist(text) == out.stdout.split(), text


@pytest.mark.parametrize("text", ["n[1-2", "n[2-1]", "n[a-b]", "n]1["])
def test_a_broken_hostlist_is_one_line(text):
    with pytest.raises(CpuftError, match="hostlist"):
        expand_hostlist(text)


def test_per_node_counts_expand():
    assert expand_counts("2(x3),1") == [2, 2, 2, 1]
    assert expand_counts("36") == [36]
    with pytest.raises(CpuftError, match="N or N"):
        expand_counts("2x3")


def test_the_batch_script_and_the_salloc_shell_are_allocations_not_tasks():
    for environ in (BATCH_SCRIPT, SALLOC_SHELL):
        alloc = allocation(environ)
        assert alloc is not None and alloc.nodes == ["n1", "n2"]
        assert alloc.cpus_per_node == [2, 2]
        assert alloc.rendezvous == ("n1", rendezvous_port("41"))
        assert srun_task(environ) is None
        assert rank_info(environ).world_size == 1  # SLURM_PROCID=0 there is no rank
    assert allocation(TASK_3) is None and allocation({}) is None


def test_jobs_numbered_in_turn_meet_on_different_ports():
    ports = {rendezvous_port(str(job)) for job in range(1000, 1100)}
    assert len(ports) == 100 and all(20000 <= p < 29000 for p in ports)


def test_an_srun_task_takes_rank_world_and_master_from_slurm():
    info = rank_info(TASK_3)
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size,
            info.launcher) == (3, 4, 1, 2, "slurm")
    assert rendezvous(TASK_3) == ("n1", rendezvous_port("41"))
    assert scheduler_node_rank(TASK_3) == 1


def test_torchruns_variables_win_over_the_srun_task_that_started_torchrun():
    under_torchrun = {**TASK_3, "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1",
                      "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}
    info = rank_info(under_torchrun)
    assert (info.rank, info.world_size, info.local_world_size, info.launcher) == \
        (5, 8, 4, "torchrun")
    assert rendezvous(under_torchrun) == ("10.0.0.1", 29400)


def test_kubeflow_names_the_node_rank():
    assert scheduler_node_rank({"PET_NODE_RANK": "3"}) == 3
    assert scheduler_node_rank(BATCH_SCRIPT) is None and scheduler_node_rank({}) is None
