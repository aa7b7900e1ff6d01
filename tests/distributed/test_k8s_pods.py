"""The pods of `cpuft k8s manifest`, run without a cluster: each pod's command, as the manifest
writes it, with the environment Kubernetes (an Indexed Job) or Kubeflow Trainer (a TrainJob)
would give it, on two namespaced hosts. Their ranks form one job."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cpuft.launch.k8s import ManifestRequest, indexed_job, trainjob
from cpuft.testing.netns import NETNS_ETC, can_make_namespaces, namespace_cluster
from tests.helpers import ALL_REDUCE_SCRIPT, all_reduce_results, cpuft_env, free_port

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)"),
]

SCRIPT = ALL_REDUCE_SCRIPT


def run_pods(commands: list[list[str]], envs: list[dict[str, str]], hosts: list[str],
             cwd: Path, before_first: float = 0.0, on_wait: object = None) -> list[str]:
    """Start pod 1, then (``before_first`` seconds later) pod 0; their outputs."""
    procs: dict[int, subprocess.Popen[str]] = {}
    for i in (1, 0):
        if i == 0 and before_first:
            time.sleep(before_first)
            if callable(on_wait):
                on_wait()
        argv = [sys.executable if a == "python" else a for a in commands[i]]
        procs[i] = subprocess.Popen(["ip", "netns", "exec", hosts[i], *argv], cwd=cwd,
                                    env=cpuft_env(**envs[i]), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
    outs = []
    for i in (0, 1):
        out = procs[i].communicate(timeout=180)[0]
        assert procs[i].returncode == 0, out[-3000:]
        outs.append(out)
    return outs


def results(outs: list[str]) -> list[tuple[int, int, float]]:
    return [(r["rank"], r["world"], r["sum"]) for r in all_reduce_results(outs)]


def test_the_trainjobs_pods_form_one_job_from_kubeflows_variables(tmp_path):
    (tmp_path / "job.py").write_text(SCRIPT)
    req = ManifestRequest(name="ft", nodes=2, cpus="1", memory="1Gi", image="x",
                          command=["python", str(tmp_path / "job.py")])
    command = trainjob(req)["spec"]["trainer"]["command"]
    port = str(free_port())
    with namespace_cluster(2) as cluster:
        master = cluster.addrs[cluster.hosts[0]]
        envs = [{"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(i),
                 "PET_MASTER_ADDR": master, "PET_MASTER_PORT": port} for i in (0, 1)]
        outs = run_pods([command, command], envs, cluster.hosts, tmp_path)
    assert results(outs) == [(0, 2, 3.0), (1, 2, 3.0)]


def test_the_indexed_jobs_pods_meet_at_pod_0s_name_once_it_resolves(tmp_path):
    (tmp_path / "job.py").write_text(SCRIPT)
    req = ManifestRequest(name="ft", nodes=2, cpus="1", memory="1Gi", image="x",
                          command=["python", str(tmp_path / "job.py")])
    _, job = indexed_job(req)
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    with namespace_cluster(2) as cluster:
        def pod_0_gets_its_name() -> None:  # as the headless Service's DNS record appears
            for host in cluster.hosts:
                with (NETNS_ETC / host / "hosts").open("a") as f:
                    f.write(f"{cluster.addrs[cluster.hosts[0]]} ft-0.ft\n")

        envs = [{"JOB_COMPLETION_INDEX": str(i)} for i in (0, 1)]
        outs = run_pods([command, command], envs, cluster.hosts, tmp_path, before_first=3.0,
                        on_wait=pod_0_gets_its_name)
    assert results(outs) == [(0, 2, 3.0), (1, 2, 3.0)]
    assert "waiting up to 180s for ft-0.ft (node 0) to resolve" in outs[1]
