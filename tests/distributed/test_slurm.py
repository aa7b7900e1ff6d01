"""cpuft on a real two-node Slurm (cpuft.testing.slurm_cluster: slurmctld and two slurmd in
network namespaces): a generated sbatch script trains to the end, `salloc` runs a script of
one's own, a job told to stop checkpoints and resumes when requeued, and an elastic job goes on
when a node is lost.

`.ci/run` brings the cluster up before the tests and down after them; run alone, the fixture
brings it up and down itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cpuft.testing import slurm_cluster
from tests.helpers import (
    TOLERANCE,
    cpuft_env,
    make_tiny_model,
    parameters_differ,
    sentiment_rows,
    train_args,
    write_csv,
)

pytestmark = [
    pytest.mark.multiprocess, pytest.mark.slurm,
    pytest.mark.skipif(os.geteuid() != 0, reason="the namespaced Slurm needs root (CI has it)"),
]
JOB_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    """The environment of a Slurm client on the login node (this host)."""
    started = slurm_cluster.idle_nodes() != sorted(slurm_cluster.NODES)
    if started:
        slurm_cluster.up()
    yield cpuft_env(**slurm_cluster.environment())
    if started:
        slurm_cluster.down()


def _slurm(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, check=True,
                          timeout=60).stdout


def job_state(env: dict[str, str], job: str) -> str:
    out = _slurm(env, "scontrol", "show", "job", "-o", job)
    m = re.search(r"\bJobState=(\S+)", out)
    assert m, out
    return m.group(1)


def wait_for(env: dict[str, str], job: str, states: set[str],
             timeout: float = JOB_TIMEOUT_S) -> str:
    """Poll the job (sbatch --wait polls slowly) until it reaches one of ``states``."""
    deadline = time.monotonic() + timeout
    while (state := job_state(env, job)) not in states:
        assert time.monotonic() < deadline, f"job {job} still {state} after {timeout:.0f}s"
        time.sleep(0.5)
    return state


def submit_script(env: dict[str, str], folder: Path, *command: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "cpuft", "slurm", "script", "--nodes", "2",
                           "--time", "30:00", "--submit", "--", *command], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (folder / "cpuft.sbatch").is_file()
    return proc.stdout.strip()


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    return write_csv(tmp_path / "reviews.csv", sentiment_rows(96, seed=5))


def test_a_generated_script_trains_on_both_nodes_as_one_node_would(slurm, data_file, tmp_path):
    # No dropout: its masks differ between one process and two.
    tiny_model = make_tiny_model(tmp_path / "model", dropout=0.0, init_range=0.5)
    steps = ["--max-steps", "10", "--precision", "fp32", "--eval-batch-size", "16", "--lr", "1e-4"]
    job = submit_script(slurm, tmp_path, *train_args(tiny_model, data_file, tmp_path / "two",
                                                     *steps))
    # The same global batch on one process: DDP over two ranks trains the same steps.
    one = subprocess.run([sys.executable, "-m", "cpuft", *train_args(
        tiny_model, data_file, tmp_path / "one", *steps, "--batch-size", "16")],
        env=cpuft_env(), capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    state = wait_for(slurm, job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
    output = (tmp_path / f"cpuft-{job}.out").read_text()
    assert state == "COMPLETED", output[-3000:]
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    alone = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert (two["world_size"], two["nodes"], two["steps"]) == (2, 2, 10)
    worst = parameters_differ(tmp_path / "one", tmp_path / "two")
    assert worst <= TOLERANCE, f"parameters differ by {worst}"
    assert two["eval"]["accuracy"] == pytest.approx(alone["eval"]["accuracy"], abs=0.05)
    assert "[n1:0] trained 10 steps" in output


SCRIPT = '''
import os, socket
import torch
import cpuft.distributed

rank, world = cpuft.distributed.init()
t = torch.tensor([float(rank + 1)])
torch.distributed.all_reduce(t)
print(f"RESULT rank={rank} world={world} host={socket.gethostname()} sum={t.item():g} "
      f"threads={torch.get_num_threads()} cpus={len(os.sched_getaffinity(0))}", flush=True)
'''


def test_salloc_runs_a_script_of_ones_own_on_both_nodes(slurm, tmp_path):
    (tmp_path / "job.py").write_text(SCRIPT)
    proc = subprocess.run(["salloc", "-N2", "--exclusive", sys.executable, "-m", "cpuft",
                           "launch", "--nproc-per-node", "2", "--", "python", "job.py"],
                          cwd=tmp_path, env=slurm, capture_output=True, text=True,
                          timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = sorted(re.findall(r"RESULT rank=(\d) world=(\d) host=(\S+) sum=(\S+) "
                                r"threads=(\d+) cpus=\d+", proc.stdout))
    assert [(r[0], r[1], r[3]) for r in results] == [(str(i), "4", "10") for i in range(4)]
    assert {r[2] for r in results} == {"n1", "n2"}
    # Two ranks on a node of two cores: one core, one thread each.
    assert {r[4] for r in results} == {"1"}


def test_a_job_told_to_stop_checkpoints_and_resumes_when_requeued(slurm, tiny_model, data_file,
                                                                  tmp_path):
    out = tmp_path / "run"
    job = submit_script(slurm, tmp_path, *train_args(tiny_model, data_file, out,
                                                     "--max-steps", "400"))
    deadline = time.monotonic() + JOB_TIMEOUT_S
    metrics = out / "metrics.jsonl"
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline and job_state(slurm, job) in {"PENDING", "RUNNING"}, \
            (tmp_path / f"cpuft-{job}.out").read_text()[-3000:]
        time.sleep(0.3)
    _slurm(slurm, "scancel", "--signal=TERM", job)
    wait_for(slurm, job, {"COMPLETED", "FAILED", "CANCELLED"})
    [checkpoint] = out.glob("checkpoint-*")
    stopped_at = int(checkpoint.name.split("-")[1])
    assert 3 <= stopped_at < 400
    _slurm(slurm, "scontrol", "requeue", job)
    # Slurm holds a requeued job back for two minutes; the test waits a few seconds only
    # (started within the second its first run ended, a node refuses the job's credential).
    wait_for(slurm, job, {"PENDING", "RUNNING", "COMPLETED"})
    _slurm(slurm, "scontrol", "update", f"JobId={job}", "StartTime=now+5")
    assert wait_for(slurm, job, {"COMPLETED", "FAILED"}) == "COMPLETED", \
        (tmp_path / f"cpuft-{job}.out").read_text()[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"] == f"checkpoint-{stopped_at}"
    assert summary["steps"] == 400 and summary["world_size"] == 2
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(1, 401))  # none lost, none twice


def test_an_elastic_job_goes_on_when_a_node_is_lost(slurm, tiny_model, data_file, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft", "slurm", "script", "--nodes", "2", "--min-nodes", "1",
         "--time", "30:00", "--submit", "--",
         *train_args(tiny_model, data_file, out, "--max-steps", "3000", "--save-every", "2s",
                     "--log-steps", "20")],
        cwd=tmp_path, env=slurm, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip()
    assert "#SBATCH --no-kill" in (tmp_path / "cpuft.sbatch").read_text()
    log = tmp_path / f"cpuft-{job}.out"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    metrics = out / "metrics.jsonl"
    while not (list(out.glob("checkpoint-*")) and metrics.is_file()
               and len(metrics.read_text().splitlines()) >= 5):
        assert time.monotonic() < deadline and job_state(slurm, job) in {"PENDING", "RUNNING"}, \
            log.read_text()[-3000:] if log.is_file() else "no output"
        time.sleep(0.3)
    # Node n2 is lost: every process of the job on it dies at once (slurmd, whose command line
    # names cpuft's Slurm folder, stays: the node is not marked down for the tests after).
    pids = subprocess.run(["ip", "netns", "pids", "cpuft-n2"], capture_output=True, text=True,
                          check=True).stdout.split()
    for pid in pids:
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"cpuft" in argv or any(a.startswith(b"cpuft.") for a in argv):
                os.kill(int(pid), signal.SIGKILL)
    assert wait_for(slurm, job, {"COMPLETED", "FAILED"}) == "COMPLETED", log.read_text()[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3000 and summary["world_size"] == 1
    [change] = summary["membership"]
    assert (change["world_size_before"], change["world_size_after"]) == (2, 1)
    assert "the job finished on the nodes left" in log.read_text()
