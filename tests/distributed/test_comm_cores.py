"""``--comm-cores``: gloo's threads run on the cores kept for communication, compute stays put,
whichever way a rank joins its job: ``cpuft.runtime.start`` (``cpuft train``, ``cpuft.fit``) or
a script's ``cpuft.distributed.init()`` under ``cpuft launch``."""

import json
import os
import re
import subprocess
import sys

import pytest

from cpuft.testing.netns import can_make_namespaces, namespace_cluster
from tests.helpers import cpuft_env, run_two_ranks

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 logical CPUs"),
]

THREADS = """
import json, os
import torch  # threads its import starts are not the process group's

def threads():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as f:
            line = next(x for x in f if x.startswith("Cpus_allowed_list"))
        out[tid] = line.split(":")[1].strip()
    return out
"""

STARTED = THREADS + """
from cpuft.config import TrainConfig
from cpuft.runtime import start

before = threads()
runtime = start(TrainConfig())
after = threads()
runtime.dist.all_reduce_sum([1.0])
print(json.dumps({"cores": runtime.plan.cores, "comm_cores": runtime.plan.comm_cores,
                  "main": after[str(os.getpid())],
                  "new": [after[t] for t in after if t not in before]}))
runtime.close()
"""

SCRIPT = THREADS + """
import cpuft.distributed

before = threads()
rank, world = cpuft.distributed.init()
after = threads()
t = torch.ones(1)
torch.distributed.all_reduce(t)
print("RESULT " + json.dumps({"rank": rank, "sum": float(t), "main": after[str(os.getpid())],
                              "new": [after[t] for t in after if t not in before]}), flush=True)
"""


def test_gloo_threads_of_a_started_rank_run_on_comm_cores(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[:2]

    def placement(rank):
        # each rank computes on one CPU and communicates on the other
        return {"CPUFT_RANK_CORES": f"{cpus[0]};{cpus[1]}",
                "CPUFT_COMM_CORES": f"{cpus[1]};{cpus[0]}"}

    for rank, line in enumerate(run_two_ranks(STARTED, tmp_path, placement)):
        got = json.loads(line)
        compute, comm = cpus[rank], cpus[1 - rank]
        assert got["cores"] == [compute] and got["comm_cores"] == [comm]
        assert got["main"] == str(compute)
        assert got["new"], "init_process_group started no thread"
        assert set(got["new"]) == {str(comm)}, got


@pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)")
def test_a_launched_script_joining_with_init_communicates_on_its_comm_core(tmp_path):
    """Two one-rank hosts (a 2-core machine cannot keep a communication core for each of two
    ranks on one host): each rank computes on the first core and communicates on the second."""
    (tmp_path / "job.py").write_text(SCRIPT)
    with namespace_cluster(2) as cluster:
        hostfile = tmp_path / "hosts"
        hostfile.write_text("".join(f"{h} slots=1\n" for h in cluster.hosts))
        proc = subprocess.run(
            [sys.executable, "-m", "cpuft", "launch", "--hostfile", str(hostfile),
             "--remote-shell", "ip netns exec {host}", "--comm-cores", "1", "--", "python",
             "job.py"], cwd=tmp_path, capture_output=True, text=True, env=cpuft_env(),
            timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = sorted((json.loads(r) for r in re.findall(r"RESULT (\{[^{}]*\})", proc.stdout)),
                     key=lambda r: r["rank"])
    assert [(r["rank"], r["sum"]) for r in results] == [(0, 2.0), (1, 2.0)]
    compute, comm = (str(c) for c in sorted(os.sched_getaffinity(0))[:2])
    for r in results:
        assert r["main"] == compute, r
        assert r["new"], "init_process_group started no thread"
        assert set(r["new"]) == {comm}, r
