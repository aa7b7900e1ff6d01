"""Inside a Slurm allocation, `cpuft launch` starts one per-node launcher a node with srun."""

from __future__ import annotations

import sys

import pytest

from cpuft.errors import CpuftError
from cpuft.launch.commands import srun_command
from cpuft.launch.request import LaunchRequest, build_launch
from cpuft.scheduler.slurm import rendezvous_port
from tests.unit.scheduler.recorded import BATCH_SCRIPT, SALLOC_SHELL, TASK_3

SCRIPT = ("-m", "cpuft.distributed.script", "job.py")


def test_an_allocation_launches_with_srun_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for environ in (BATCH_SCRIPT, SALLOC_SHELL):
        cfg = build_launch(LaunchRequest(program=SCRIPT, train_args=["--epochs", "2"]),
                           environ=environ)
        assert cfg.launcher == "slurm"
        argv, env = srun_command(cfg)
        port = rendezvous_port("41")
        assert argv == [
            "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            f"--chdir={tmp_path}", "--cpus-per-task=2",
            sys.executable, "-m", "cpuft", "launch", "--nnodes=2",
            f"--rdzv-endpoint=n1:{port}", "--rdzv-id=slurm-41", "--nproc-per-node=auto",
            "--max-restarts=0", "--", "python", "job.py", "--epochs", "2"]
        assert env == {}


def test_train_ranks_and_their_settings_reach_every_node():
    cfg = build_launch(LaunchRequest(nproc_per_node="2", comm_cores=1, max_restarts=3,
                                     train_args=["--max-steps", "9"]), environ=BATCH_SCRIPT)
    argv = srun_command(cfg)[0]
    assert argv[argv.index("--"):] == ["--", "train", "--max-steps", "9"]
    assert {"--nproc-per-node=2", "--comm-cores=1", "--max-restarts=3"} <= set(argv)


def test_another_launcher_may_be_asked_for_inside_an_allocation():
    cfg = build_launch(LaunchRequest(launcher="local", nproc_per_node="1"),
                       check_network=False, environ=BATCH_SCRIPT)
    assert cfg.launcher == "local"


@pytest.mark.parametrize("environ", [{}, TASK_3])
def test_slurm_outside_an_allocation_is_refused(environ):
    with pytest.raises(CpuftError, match="--launcher slurm runs inside a Slurm allocation"):
        build_launch(LaunchRequest(launcher="slurm"), environ=environ)


def test_the_allocation_gives_the_nodes():
    with pytest.raises(CpuftError, match="drop --hostfile and --master-addr"):
        build_launch(LaunchRequest(launcher="slurm", master_addr="10.0.0.1"),
                     environ=BATCH_SCRIPT)


def test_the_per_node_mode_takes_its_node_rank_from_srun():
    req = LaunchRequest(nnodes=2, rdzv_endpoint="10.1.2.3:29555", nproc_per_node="1",
                        program=SCRIPT)
    cfg = build_launch(req, check_network=False, environ=TASK_3)
    assert (cfg.launcher, cfg.node_rank) == ("node", 1)
    cfg = build_launch(req, check_network=False, environ={"PET_NODE_RANK": "0"})
    assert cfg.node_rank == 0
