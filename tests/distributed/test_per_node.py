"""The per-node mode end to end: two namespaced hosts each start `cpuft launch --nnodes 2
--node-rank R --rdzv-endpoint NODE0:PORT`, as srun or two pods would, and their ranks form one
job of two."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cpuft.testing.netns import can_make_namespaces, namespace_cluster
from tests.helpers import cpuft_env, free_port

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)"),
]

SCRIPT = '''
import json, os
import torch
import cpuft.distributed

rank, world = cpuft.distributed.init()
t = torch.tensor([float(rank + 1)])
torch.distributed.all_reduce(t)
print("RESULT " + json.dumps({"rank": rank, "world": world, "sum": float(t),
                              "ifname": os.environ.get("GLOO_SOCKET_IFNAME", "")}), flush=True)
'''


def test_two_nodes_started_apart_form_one_job(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    port = free_port()
    with namespace_cluster(2) as cluster:
        node0 = cluster.addrs[cluster.hosts[0]]
        procs = [subprocess.Popen(
            ["ip", "netns", "exec", host, sys.executable, "-m", "cpuft", "launch",
             "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", f"{node0}:{port}",
             "--rdzv-id", "per-node-test", "--nproc-per-node", "1", "--", "python", "job.py"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=cpuft_env()) for rank, host in enumerate(cluster.hosts)]
        outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-2000:] + err[-2000:]
    results = sorted((json.loads(r) for out, _ in outs
                      for r in re.findall(r"RESULT (\{[^{}]*\})", out)), key=lambda r: r["rank"])
    assert [(r["rank"], r["world"], r["sum"]) for r in results] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert all(r["ifname"] == "eth0" for r in results)  # the link between the hosts
