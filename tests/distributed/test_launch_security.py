"""What a running job shows other users of its machines: no secret in any process's argv, and
a rendezvous store that listens on the job's own address alone."""

import subprocess
import threading
import time
from pathlib import Path

import pytest

from cpuft.launch.request import LaunchRequest, build_launch
from cpuft.launch.run import run_job
from cpuft.testing.netns import can_make_namespaces, namespace_cluster
from tests.helpers import free_port

pytestmark = pytest.mark.multiprocess

SECRET = "hf_secret_" + "7" * 16
WORKER = """import os, time
print("seen", os.environ.get("HF_TOKEN"), os.environ.get("GLOO_TEST_X"),
      os.environ.get("TORCH_TEST_Y"), flush=True)
time.sleep(6)
"""


def listening(port: int, netns: str | None = None) -> str:
    argv = ["ss", "-ltnH", f"sport = :{port}"]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def cmdlines() -> list[bytes]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((entry / "cmdline").read_bytes())
            except OSError:
                continue
    return out


def run_watched(cfg, port, netns=None):
    """Run the job (here, where it can take signals) while a thread records the listeners on
    ``port`` and every argv on this machine."""
    seen: dict[str, list] = {"listeners": [], "argvs": []}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen["argvs"] += cmdlines()
            seen["listeners"].append(listening(port, netns))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    lines: list[str] = []
    try:
        assert run_job(cfg, capture=lines) == 0, "".join(lines)[-3000:]
    finally:
        done.set()
        watcher.join(timeout=30)
    return lines, "".join(seen["listeners"]), seen["argvs"]


def job_env(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("GLOO_TEST_X", SECRET + "g")
    monkeypatch.setenv("TORCH_TEST_Y", SECRET + "t")


def test_one_host_job_listens_on_loopback_only(tmp_path, monkeypatch):
    job_env(monkeypatch)
    port = free_port()
    cfg = build_launch(LaunchRequest(nproc_per_node="1", master_port=port, allocator="system"))
    (tmp_path / "worker.py").write_text(WORKER)
    cfg.module_args, cfg.train_args = [str(tmp_path / "worker.py")], []
    lines, listeners, _ = run_watched(cfg, port)
    assert any(f"seen {SECRET}" in line for line in lines), lines
    assert f"127.0.0.1:{port}" in listeners and f"*:{port}" not in listeners, listeners
    assert f"0.0.0.0:{port}" not in listeners


@pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)")
def test_two_host_job_hides_its_environment_and_binds_the_cluster_address(tmp_path,
                                                                            monkeypatch):
    job_env(monkeypatch)
    port = free_port()
    (tmp_path / "worker.py").write_text(WORKER)
    with namespace_cluster(2) as cluster:
        hostfile = tmp_path / "hosts"
        hostfile.write_text("".join(f"{h}\n" for h in cluster.hosts))
        cfg = build_launch(LaunchRequest(hostfile=str(hostfile), nproc_per_node="1",
                                         remote_shell="ip netns exec {host}", master_port=port,
                                         allocator="system"))
        cfg.module_args, cfg.train_args = [str(tmp_path / "worker.py")], []
        lines, listeners, argvs = run_watched(cfg, port, netns=cluster.hosts[0])
    seen = [line for line in lines if "seen" in line]
    assert len(seen) == 2 and all(f"{SECRET} {SECRET}g {SECRET}t" in line for line in seen)
    assert not any(SECRET.encode() in argv for argv in argvs)
    master = cluster.addrs[cluster.hosts[0]]
    assert cfg.master_addr == master
    assert f"{master}:{port}" in listeners and f"*:{port}" not in listeners, listeners
