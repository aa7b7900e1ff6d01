"""``--comm-cores``: gloo's threads run on the cores kept for communication, compute stays put."""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import cpuft_env

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 logical CPUs"),
]

RANK = """
import json, os
import torch.distributed as dist
from cpuft.config import TrainConfig
from cpuft.dist.group import init_distributed, shutdown
from cpuft.speedups import make_plan
from cpuft.topology import read_topology
from cpuft.train.runtime import apply_plan

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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = cpuft_env() | {
            "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            # each rank computes on one CPU and communicates on the other
            "CPUFT_RANK_CORES": f"{cpus[0]};{cpus[1]}", "CPUFT_COMM_CORES": f"{cpus[1]};{cpus[0]}",
        }
        procs.append(subprocess.Popen([sys.executable, "-c", RANK], env=env, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for rank, proc in enumerate(procs):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        got = json.loads(out.strip().splitlines()[-1])
        compute, comm = cpus[rank], cpus[1 - rank]
        assert got["cores"] == [compute] and got["comm_cores"] == [comm]
        assert got["main"] == str(compute)
        assert got["new"], "init_process_group started no thread"
        assert set(got["new"]) == {str(comm)}, got
