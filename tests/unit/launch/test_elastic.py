"""An elastic job's commands and refusals (--nnodes MIN:MAX), asserted without starting
anything."""

from __future__ import annotations

import pytest

from cpuft.errors import CpuftError
from cpuft.launch.commands import (
    ELASTIC_ENV,
    WORLD_SIZE_ENV,
    LaunchConfig,
    store_command,
    torchrun_args,
)
from cpuft.launch.elastic import parse_nnodes
from cpuft.launch.hostfile import Host
from cpuft.launch.request import LaunchRequest, build_launch

PY = "/venv/bin/python"


def test_nnodes_is_a_count_or_a_range():
    assert parse_nnodes("3") == (3, 3) and parse_nnodes("2:4") == (2, 4)
    for bad, why in (("two", "give a number of nodes"), ("3:2", "1 <= MIN <= MAX"),
                     ("0:2", "1 <= MIN <= MAX"), ("2:", "give a number")):
        with pytest.raises(CpuftError, match=why):
            parse_nnodes(bad)


def test_every_agent_of_an_elastic_job_is_a_client_of_the_stable_store():
    cfg = LaunchConfig(hosts=[Host("n1"), Host("n2"), Host("n3")], nproc_per_node=1,
                       master_addr="10.0.0.9", master_port=29400, python=PY, rdzv_id="job",
                       min_nodes=2, store_host="login", max_restarts=3, workdir="/w")
    for rank in range(3):
        assert torchrun_args(cfg, rank)[3:11] == [
            "--nnodes=2:3", "--nproc-per-node=1", "--rdzv-backend=c10d",
            "--rdzv-endpoint=10.0.0.9:29400", "--rdzv-id=job",
            "--rdzv-conf=is_host=false,last_call_timeout=5,join_timeout=600,"
            "keep_alive_interval=2,keep_alive_max_attempt=3",
            "--max-restarts=100", "--monitor-interval=1"]
    store = store_command(cfg)
    assert store.host == "login" and store.argv[-1] == (
        'eval "$(cat)" && cd /w && exec /venv/bin/python -m cpuft rendezvous --listen '
        "10.0.0.9:29400")


def _hosts(tmp_path, n=3):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"n{i} slots=1\n" for i in range(1, n + 1)))
    return str(hostfile)


def test_an_elastic_job_over_a_hostfile(tmp_path):
    cfg = build_launch(LaunchRequest(hostfile=_hosts(tmp_path), nnodes=3, min_nodes=2,
                                     rdzv_endpoint="login:29411", rejoin_after_s=5.0),
                       check_network=False)
    assert (cfg.launcher, cfg.elastic, cfg.store_host, cfg.master_port) == (
        "ssh", True, "login", 29411)
    assert cfg.env[ELASTIC_ENV] == "2:3" and WORLD_SIZE_ENV not in cfg.env
    assert cfg.rejoin_after_s == 5.0 and cfg.nnodes == 0 and len(cfg.hosts) == 3


@pytest.mark.parametrize("changes, message", [
    ({"min_nodes": None}, "--nnodes with --hostfile takes MIN:MAX"),
    ({"nnodes": 4}, "the hostfile lists 3 host(s); MAX is their number"),
    ({"rdzv_endpoint": None}, "needs --rdzv-endpoint HOST:PORT: a host that no spot loss"),
    ({"rdzv_endpoint": "n2:29400"}, "--rdzv-endpoint n2 is a host of the job"),
    ({"rdzv_endpoint": "login;reboot:1"}, "--rdzv-endpoint"),
    ({"launcher": "mpirun"}, "--launcher mpirun cannot"),
    ({"master_addr": "10.0.0.1"}, "drop --master-addr"),
])
def test_an_elastic_job_that_cannot_work_is_refused(tmp_path, changes, message):
    base = dict(hostfile=_hosts(tmp_path), nnodes=3, min_nodes=2, rdzv_endpoint="login:29411")
    with pytest.raises(CpuftError) as caught:
        build_launch(LaunchRequest(**{**base, **changes}), check_network=False)
    assert message in str(caught.value)


def test_an_elastic_node_under_a_scheduler_needs_the_store_and_no_node_rank():
    cfg = build_launch(LaunchRequest(nnodes=3, min_nodes=1, rdzv_endpoint="10.1.2.3:29400",
                                     nproc_per_node="1"), check_network=False)
    assert cfg.launcher == "node" and cfg.env[ELASTIC_ENV] == "1:3"
    assert ("--rdzv-conf=is_host=false,last_call_timeout=5,join_timeout=600,"
            "keep_alive_interval=2,keep_alive_max_attempt=3") in torchrun_args(cfg, 0)
    with pytest.raises(CpuftError, match="needs --rdzv-endpoint HOST:PORT, where `cpuft "
                                         "rendezvous` serves"):
        build_launch(LaunchRequest(nnodes=3, min_nodes=1, nproc_per_node="1"),
                     check_network=False, environ={})


def test_an_elastic_job_under_slurm_keeps_its_nodes_going_and_its_store_here(tmp_path,
                                                                             monkeypatch):
    from cpuft.launch.commands import srun_command
    from cpuft.launch.sbatch import SbatchRequest, sbatch_script
    from tests.unit.scheduler.recorded import BATCH_SCRIPT

    monkeypatch.chdir(tmp_path)
    cfg = build_launch(LaunchRequest(launcher="slurm", nnodes=2, min_nodes=1,
                                     train_args=["--max-steps", "9"]),
                       check_network=False, environ=BATCH_SCRIPT)
    cfg.master_addr = "10.0.0.5"  # what the network check finds: this host's address
    argv = srun_command(cfg)[0]
    assert argv[:6] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                        "--kill-on-bad-exit=0", "--no-kill"]
    assert {"--nnodes=1:2", f"--rdzv-endpoint=10.0.0.5:{cfg.master_port}"} <= set(argv)
    for bad, message in ((dict(nnodes=3, min_nodes=1), r"the allocation has 2 node\(s\)"),
                         (dict(nnodes=2), "--nnodes takes MIN:MAX there")):
        with pytest.raises(CpuftError, match=message):
            build_launch(LaunchRequest(launcher="slurm", **bad), check_network=False,
                         environ=BATCH_SCRIPT)
    script = sbatch_script(SbatchRequest(nodes=4, min_nodes=2, command=["train"],
                                         python=PY, workdir="/w"), "test")
    assert "#SBATCH --no-kill" in script
    assert script.splitlines()[-1] == (
        f"exec {PY} -m cpuft launch --launcher slurm --nnodes 2:4 --nproc-per-node auto -- "
        "train --resume auto")
    with pytest.raises(CpuftError, match="--min-nodes 5: from 1 to --nodes 4"):
        sbatch_script(SbatchRequest(nodes=4, min_nodes=5, command=["train"], python=PY,
                                    workdir="/w"), "test")


def test_the_global_batch_must_split_over_every_number_of_nodes_left():
    from cpuft.launch.elastic import check_batch_splits

    check_batch_splits(4, 2, 3)  # 12 over 2 and 3
    check_batch_splits(3, 1, 4)  # 12 over 1, 2, 3 and 4
    with pytest.raises(CpuftError) as caught:
        check_batch_splits(4, 2, 4)  # 16 over 3: no
    assert str(caught.value) == ("--nnodes 2:4 with --batch-size 4: the global batch (4 a rank "
                                 "on 4 nodes) does not split evenly over 3 node(s); "
                                 "--batch-size 6 does")


def test_a_first_start_on_fewer_nodes_keeps_the_whole_jobs_global_batch():
    from cpuft.config import TrainConfig, config_from
    from cpuft.job.elastic import full_job_batch

    cfg = config_from({"batch_size": 4})
    assert full_job_batch(cfg, 3, 3).optimization.batch_size == 4
    assert full_job_batch(cfg, 2, 3).optimization.batch_size == 6  # 12 over the 2 that met
    with pytest.raises(CpuftError, match="does not split over the 5 ranks"):
        full_job_batch(cfg, 5, 6)
    assert isinstance(cfg, TrainConfig)


def test_elastic_commands_refuse_a_batch_that_does_not_split(tmp_path, capsys):
    from cpuft.cli.main import main

    hostfile = tmp_path / "hosts"
    hostfile.write_text("a\nb\nc\nd\n")
    for argv in (["train", "--hostfile", str(hostfile), "--nnodes", "2:4", "--rdzv-endpoint",
                  "login:29400", "--batch-size", "4"],
                 ["slurm", "script", "--nodes", "4", "--min-nodes", "2", "--output", "-",
                  "--", "train", "--batch-size", "4"],
                 ["k8s", "manifest", "--kind", "job", "--nodes", "4", "--min-nodes", "2",
                  "--cpus", "8", "--memory", "8Gi", "--image", "i:1", "--", "train",
                  "--batch-size", "4"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err == ("cpuft: --nnodes 2:4 with --batch-size 4: the global batch (4 a rank on "
                       "4 nodes) does not split evenly over 3 node(s); --batch-size 6 does"), err
