"""Faults: a rank killed, restarts that resume, SIGTERM to the launcher, bad input up front."""

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid

import pytest

from tests.helpers import (
    cpuft_env,
    free_port,
    job_pids,
    kill_rank_and_expect_stop,
    logged_steps,
    make_tiny_model,
    sentiment_rows,
    wait_for,
    write_csv,
)

pytestmark = pytest.mark.multiprocess


@pytest.fixture
def job(tmp_path):
    model = make_tiny_model(tmp_path / "model")
    data = write_csv(tmp_path / "d.csv", sentiment_rows(120, seed=6))
    tag = uuid.uuid4().hex
    out = tmp_path / "out"

    def start(port, *extra, steps=3000):
        argv = [sys.executable, "-m", "cpuft", "train", "--nproc-per-node", "2",
                "--master-port", str(port), "--model", str(model), "--train-file", str(data),
                "--text-columns", "text", "--batch-size", "4", "--max-steps", str(steps),
                "--log-steps", "1", "--no-progress", "--output-dir", str(out), *extra]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=cpuft_env(CPUFT_TEST_TAG=tag), cwd=tmp_path)

    return start, tag, out


def test_killed_rank_stops_the_whole_job(job):
    start, tag, out = job
    kill_rank_and_expect_stop(start(free_port()), tag, out, "localhost")


def test_restart_resumes_from_the_last_checkpoint(job):
    start, tag, out = job
    launcher = start(free_port(), "--max-restarts", "1", "--save-steps", "20", steps=1500)
    wait_for(lambda: any(out.glob("checkpoint-*")), 120, "a checkpoint", launcher)
    os.kill(job_pids(tag, rank=1)[0], signal.SIGKILL)
    stdout, stderr = launcher.communicate(timeout=240)
    assert launcher.returncode == 0, stdout[-6000:] + stderr[-1000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 1500 and summary["resumed_from"] is not None
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 1501))  # the records after the checkpoint were not doubled


def test_sigterm_to_the_launcher_writes_a_checkpoint(job):
    start, tag, out = job
    launcher = start(free_port())
    wait_for(lambda: logged_steps(out) >= 5, 120, "training to start", launcher)
    launcher.send_signal(signal.SIGTERM)
    stdout, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode != 0
    checkpoints = sorted(out.glob("checkpoint-*"))
    assert checkpoints, stderr[-2000:]
    assert "--resume" in stderr.strip().splitlines()[-1]
    assert "checkpoint at step" in stdout  # rank 0 says where it stopped
    assert "Traceback" not in stdout + stderr  # not torchrun's own, on a requested stop
    wait_for(lambda: not job_pids(tag), 10, "no process of the job left")


def run_cli(*argv, timeout=60):
    return subprocess.run([sys.executable, "-m", "cpuft", *argv], capture_output=True, text=True,
                          env=cpuft_env(), timeout=timeout)


def test_bad_hostfile_unreachable_host_and_busy_port_fail_before_starting(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text("node1 slots=two\n")
    proc = run_cli("launch", "--hostfile", str(bad), "--", "train")
    assert proc.returncode == 2 and "line 1: cannot parse" in proc.stderr
    hosts = tmp_path / "hosts"
    hosts.write_text("ghost-host\n")
    proc = run_cli("launch", "--hostfile", str(hosts), "--remote-shell", "false {host}", "--",
                   "train")
    assert proc.returncode == 2 and "host ghost-host is not reachable" in proc.stderr
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = run_cli("launch", "--nproc-per-node", "2", "--master-port", str(port), "--",
                       "train")
    assert proc.returncode == 2 and f"port {port} is in use" in proc.stderr
    for p in (proc,):
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI not installed (make setup "
                    "installs it as root)")
def test_mpirun_launcher_trains_with_ranks_from_open_mpi(tmp_path):
    model = make_tiny_model(tmp_path / "model")
    data = write_csv(tmp_path / "d.csv", sentiment_rows(60, seed=8))
    proc = run_cli("launch", "--launcher", "mpirun", "--nproc-per-node", "2", "--master-port",
                   str(free_port()), "--", "train", "--model", str(model),
                   "--train-file", str(data), "--text-columns", "text", "--max-steps", "3",
                   "--batch-size", "4", "--no-progress", "--output-dir", str(tmp_path / "out"),
                   timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["world_size"], summary["backend"], summary["steps"]) == (2, "gloo", 3)
