"""The per-node mode end to end: two namespaced hosts each start `cpuft launch --nnodes 2
--node-rank R --rdzv-endpoint NODE0:PORT`, as srun or two pods would, and their ranks form one
job of two."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cpuft.testing.netns import Cluster, can_make_namespaces, namespace_cluster
from tests.helpers import ALL_REDUCE_SCRIPT, all_reduce_results, cpuft_env, free_port

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)"),
]

SCRIPT = ALL_REDUCE_SCRIPT


def start_nodes(cluster: Cluster, cwd: Path, nproc: list[int]) -> list[str]:
    """Each namespaced host's `cpuft launch` of job.py in a job of two nodes, node i with
    ``nproc[i]`` ranks; their outputs (stdout and stderr)."""
    port = free_port()
    node0 = cluster.addrs[cluster.hosts[0]]
    procs = [subprocess.Popen(
        ["ip", "netns", "exec", host, sys.executable, "-m", "cpuft", "launch",
         "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", f"{node0}:{port}",
         "--rdzv-id", "per-node-test", "--nproc-per-node", str(nproc[rank]), "--", "python",
         "job.py"], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=cpuft_env()) for rank, host in enumerate(cluster.hosts)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    return [f"exit {p.returncode}\n{out}" for p, out in zip(procs, outs, strict=True)]


def test_two_nodes_started_apart_form_one_job(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    with namespace_cluster(2) as cluster:
        outs = start_nodes(cluster, tmp_path, [1, 1])
    assert all(out.startswith("exit 0\n") for out in outs), outs
    results = all_reduce_results(outs)
    assert [(r["rank"], r["world"], r["sum"]) for r in results] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert all(r["ifname"] == "eth0" for r in results)  # the link between the hosts


def test_nodes_started_with_other_rank_counts_fail_fast_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    with namespace_cluster(2) as cluster:
        outs = start_nodes(cluster, tmp_path, [1, 2])
    assert all(out.startswith("exit 2\n") for out in outs), outs
    assert "the job formed a world of 3 ranks, not the 2 asked for" in outs[0]
    assert "the job formed a world of 3 ranks, not the 4 asked for" in outs[1]
    assert "RESULT" not in "".join(outs)  # nobody trained in a world it did not ask for


def test_two_names_of_one_machine_are_refused_before_anything_starts(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    with namespace_cluster(1) as cluster:
        host = cluster.hosts[0]
        # The same namespace, under its name and its address.
        (tmp_path / "hosts").write_text(f"{host}\n{cluster.addrs[host]}\n")
        proc = subprocess.run(
            [sys.executable, "-m", "cpuft", "launch", "--hostfile", str(tmp_path / "hosts"),
             "--remote-shell", f"ip netns exec {host}", "--nproc-per-node", "1", "--",
             "python", "job.py"], cwd=tmp_path, capture_output=True, text=True, env=cpuft_env(),
            timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"cpuft: hosts {host} and {cluster.addrs[host]} are one machine (both have "
        f"{cluster.addrs[host]}): list it once, with slots=N for N ranks"]
