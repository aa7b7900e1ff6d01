"""`cpuft launch` of a user's own script: on 2 ranks here, on 2 namespaced hosts, under mpirun,
and its failures."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cpuft.testing.netns import can_make_namespaces, namespace_cluster
from tests.helpers import cpuft_env, free_port

pytestmark = pytest.mark.multiprocess

SCRIPT = '''
import json, os, sys
import torch
import cpuft
import cpuft.distributed

own = len(sys.argv) > 1 and sys.argv[1] == "own-init"
if own:  # a script that sets up torch.distributed itself
    torch.distributed.init_process_group("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
else:
    rank, world = cpuft.distributed.init()
t = torch.tensor([float(rank + 1)])
torch.distributed.all_reduce(t)
print("RESULT " + json.dumps({"rank": rank, "world": world, "sum": float(t),
                              "cores": sorted(os.sched_getaffinity(0)),
                              "threads": torch.get_num_threads(),
                              "preload": os.environ.get("LD_PRELOAD", ""),
                              "args": sys.argv[1:]}), flush=True)
'''


def _results(stdout: str) -> list[dict]:
    # The ranks print at the same moment: their lines may run together in the job's output.
    return sorted((json.loads(found) for found in re.findall(r"RESULT (\{[^{}]*\})", stdout)),
                  key=lambda r: r["rank"])


def _launch(tmp_path: Path, *argv: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cpuft", "launch", *argv], cwd=tmp_path,
                          capture_output=True, text=True, env=cpuft_env(), timeout=timeout)


@pytest.mark.parametrize("how", ["python", "bare", "own-init"])
def test_a_script_on_two_ranks_is_pinned_and_all_reduces(tmp_path: Path, how: str) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    command = {"python": ["--", "python", "job.py", "--lr", "3"], "bare": ["job.py", "--lr", "3"],
               "own-init": ["--", "python", "job.py", "own-init"]}[how]
    proc = _launch(tmp_path, "--nproc-per-node", "2", "--master-port", str(free_port()),
                   *command)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = _results(proc.stdout)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 3.0 for r in results)
    assert all(r["args"] == command[command.index("job.py") + 1:] for r in results)
    # each rank pinned to its own share of the cores, its threads one per core
    assert not set(results[0]["cores"]) & set(results[1]["cores"])
    assert all(r["threads"] == len(r["cores"]) for r in results)
    if shutil.which("ldconfig") and "tcmalloc" in subprocess.run(
            ["ldconfig", "-p"], capture_output=True, text=True).stdout:
        assert all("tcmalloc" in r["preload"] for r in results)


@pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)")
def test_a_script_on_two_namespaced_hosts(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    with namespace_cluster(2) as cluster:
        hostfile = tmp_path / "hosts"
        hostfile.write_text("".join(f"{h} slots=1\n" for h in cluster.hosts))
        proc = _launch(tmp_path, "--hostfile", str(hostfile), "--remote-shell",
                       "ip netns exec {host}", "--", "python", "job.py")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = _results(proc.stdout)
    assert [(r["rank"], r["world"], r["sum"]) for r in results] == [(0, 2, 3.0), (1, 2, 3.0)]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI (CI installs it)")
def test_a_script_under_mpirun_joins_with_its_own_init(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    proc = _launch(tmp_path, "--launcher", "mpirun", "--nproc-per-node", "2", "--master-port",
                   str(free_port()), "--", "python", "job.py", "own-init")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r["sum"] for r in _results(proc.stdout)] == [3.0, 3.0]


def test_a_script_failing_on_one_rank_stops_the_job_and_names_the_rank(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(
        "import os, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise SystemExit(3)\n"
        "time.sleep(300)\n")
    proc = _launch(tmp_path, "--nproc-per-node", "2", "--master-port", str(free_port()),
                   "job.py", timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cpuft: rank 1") and "every process of the job was stopped" in last
    assert proc.returncode == 3  # the script's own exit code


def test_a_cpuft_error_in_a_script_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(
        "import torch, cpuft\n"
        "cpuft.optimize(torch.nn.ReLU())\n")
    proc = _launch(tmp_path, "--nproc-per-node", "1", "--master-port", str(free_port()),
                   "job.py", timeout=120)
    assert proc.returncode != 0
    assert "cpuft: rank 0: cpuft.optimize: the model (ReLU) has no parameters to train" in \
        proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("command, message", [
    (["--", "python", "nosuch.py"], "cpuft: nosuch.py: no such file"),
    (["nosuch.py"], "cpuft: nosuch.py: no such file"),
    (["--", "python", "-m", "1bad"], "cpuft: -m needs a module name"),
    (["--", "python", "-c", "print(1)"], "cpuft: give what each rank runs"),
    (["--", "ls"], "cpuft: 'ls' is neither train nor a .py script"),
])
def test_bad_launch_commands_are_one_line_and_exit_code_2(tmp_path: Path, command: list[str],
                                                          message: str) -> None:
    proc = _launch(tmp_path, "--nproc-per-node", "1", *command, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().startswith(message), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
