"""The per-node mode: a scheduler (srun, a Kubernetes pod) starts one `cpuft launch` a node
with torchrun's names; each starts its own node's ranks and joins node 0's rendezvous."""

from __future__ import annotations

import socket

import pytest

from cpuft.errors import CpuftError
from cpuft.launch.commands import local_command, torchrun_args
from cpuft.launch.request import LaunchRequest, build_launch

SCRIPT = ("-m", "cpuft.distributed.script", "job.py")


def request(**kw: object) -> LaunchRequest:
    base: dict[str, object] = dict(nnodes=2, node_rank=1, rdzv_endpoint="10.1.2.3:29555",
                                   rdzv_id="job-7", nproc_per_node="1", program=SCRIPT)
    return LaunchRequest(**{**base, **kw})  # type: ignore[arg-type]


def test_a_node_runs_its_own_ranks_in_the_job_of_nnodes():
    cfg = build_launch(request(), check_network=False)
    assert (cfg.launcher, cfg.nnodes, cfg.node_rank, cfg.world_size) == ("node", 2, 1, 2)
    assert [h.name for h in cfg.hosts] == [socket.gethostname()]
    argv, env = local_command(cfg)
    assert argv[argv.index("-m") + 1] == "cpuft.distributed.agent"
    assert {"--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
            "--rdzv-endpoint=10.1.2.3:29555", "--rdzv-id=job-7",
            "--rdzv-conf=is_host=false"} <= set(argv)
    assert argv[-3:] == list(SCRIPT) and env["MASTER_ADDR"] == "10.1.2.3"
    first = build_launch(request(node_rank=0), check_network=False)
    assert "--rdzv-conf=is_host=true" in torchrun_args(first, 0)
    assert build_launch(request(rdzv_id=None), check_network=False).rdzv_id == "cpuft"


@pytest.mark.parametrize("changes, message", [
    ({"node_rank": None}, "--nnodes needs --node-rank R (or a scheduler that sets it"),
    ({"node_rank": 2}, "--node-rank 2 is not a node of --nnodes 2"),
    ({"rdzv_endpoint": "10.1.2.3"}, "--rdzv-endpoint '10.1.2.3': give HOST:PORT"),
    ({"rdzv_endpoint": "127.0.0.1:29500"}, "is a loopback address (127.0.0.1): the other 1 "
                                           "node(s) cannot reach it"),
    ({"rdzv_endpoint": "-oProxyCommand=x:29500"}, "--rdzv-endpoint"),
    ({"rdzv_id": "a b;rm"}, "--rdzv-id 'a b;rm': letters, digits"),
    ({"hostfile": "hosts"}, "--nnodes with --hostfile takes MIN:MAX"),
    ({"launcher": "ssh"}, "--nnodes starts this node's ranks alone"),
    ({"nnodes": None}, "--node-rank, --rdzv-endpoint and --rdzv-id go with --nnodes"),
])
def test_what_cannot_form_the_job_is_refused(changes, message):
    with pytest.raises(CpuftError) as caught:
        build_launch(request(**changes), check_network=False)
    assert message in str(caught.value)


def test_a_job_of_one_node_may_meet_on_loopback():
    cfg = build_launch(request(nnodes=1, node_rank=0, rdzv_endpoint="127.0.0.1:29555"),
                       check_network=False)
    assert cfg.world_size == 1 and cfg.master_addr == "127.0.0.1"
