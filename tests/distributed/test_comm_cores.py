"""``--comm-cores``: gloo's threads run on the cores kept for communication, compute stays put."""

import json
import os

import pytest

from tests.helpers import run_two_ranks

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 logical CPUs"),
]

RANK = """
import json, os
import torch.distributed as dist
from cpuft.config import TrainConfig
from cpuft.distributed.group import init_distributed, shutdown
from cpuft.plan.speed_plan import make_plan
from cpuft.topology import read_topology
from cpuft.engine.process import apply_plan

def threads():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as f:
            line = next(x for x in f if x.startswith("Cpus_allowed_list"))
        out[tid] = line.split(":")[1].strip()
    return out

plan = apply_plan(make_plan(TrainConfig(), read_topology()), pin_cores=True)
before = threads()
ctx = init_distributed("gloo", timeout_s=60, comm_cores=plan.comm_cores)
after = threads()
ctx.all_reduce_sum([1.0])
print(json.dumps({"cores": plan.cores, "comm_cores": plan.comm_cores,
                  "main": after[str(os.getpid())],
                  "new": [after[t] for t in after if t not in before]}))
shutdown(ctx)
"""


def test_gloo_threads_run_on_comm_cores(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[:2]

    def placement(rank):
        # each rank computes on one CPU and communicates on the other
        return {"CPUFT_RANK_CORES": f"{cpus[0]};{cpus[1]}",
                "CPUFT_COMM_CORES": f"{cpus[1]};{cpus[0]}"}

    for rank, line in enumerate(run_two_ranks(RANK, tmp_path, placement)):
        got = json.loads(line)
        compute, comm = cpus[rank], cpus[1 - rank]
        assert got["cores"] == [compute] and got["comm_cores"] == [comm]
        assert got["main"] == str(compute)
        assert got["new"], "init_process_group started no thread"
        assert set(got["new"]) == {str(comm)}, got
