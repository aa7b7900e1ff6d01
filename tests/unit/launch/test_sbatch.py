"""The sbatch script of `cpuft slurm script`: what it asks Slurm for, what it runs, quoted."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from cpuft.errors import CpuftError
from cpuft.launch.sbatch import SbatchRequest, rank_command, sbatch_script, time_limit_seconds


def script(**kw: object) -> str:
    base: dict[str, object] = dict(nodes=2, command=["train", "--max-steps", "9"],
                                   python="/opt/venv/bin/python", workdir="/shared/my runs")
    return sbatch_script(SbatchRequest(**{**base, **kw}), "written by a test")  # type: ignore[arg-type]


def directives(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH "):
            option = line.split()[1]
            name, _, value = option.partition("=")
            found[name] = value
    return found


def test_the_script_asks_for_whole_nodes_a_warning_and_a_requeue():
    text = script(time="2:00:00", partition="cpu")
    assert directives(text) == {
        "--job-name": "cpuft", "--nodes": "2", "--ntasks-per-node": "1", "--exclusive": "",
        "--time": "2:00:00", "--partition": "cpu", "--signal": "TERM@300", "--requeue": "",
        "--open-mode": "append", "--output": "cpuft-%j.out"}
    last = text.strip().splitlines()[-1]
    assert shlex.split(last) == [
        "exec", "/opt/venv/bin/python", "-m", "cpuft", "launch", "--launcher", "slurm",
        "--nproc-per-node", "auto", "--", "train", "--max-steps", "9", "--resume", "auto"]
    assert "cd '/shared/my runs'" in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_cpus_a_lock_and_the_users_own_resume_choice():
    text = script(cpus_per_node=16, lock="/shared/cpuft.lock", nproc_per_node="2",
                  command=["train", "--resume"])
    assert directives(text)["--cpus-per-task"] == "16" and "--exclusive" not in directives(text)
    assert ("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 /opt/venv/bin/python -m cpuft env "
            "verify --lock /shared/cpuft.lock") in text
    assert text.strip().endswith("--nproc-per-node 2 -- train --resume")


def test_a_script_of_ones_own_runs_as_it_is():
    assert rank_command(["python", "/x/job.py", "--resume"]) == ["python", "/x/job.py",
                                                                "--resume"]
    text = script(command=["python", "/x/my job.py", "$(reboot)"])
    assert text.strip().endswith("-- python '/x/my job.py' '$(reboot)'")


@pytest.mark.parametrize("text, seconds", [("30", 1800), ("30:15", 1815), ("2:00:00", 7200),
                                           ("1-00", 86400), ("1-02:03", 93780),
                                           ("1-02:03:04", 93784)])
def test_slurm_time_limits(text, seconds):
    assert time_limit_seconds(text) == seconds


@pytest.mark.parametrize("changes, message", [
    ({"nodes": 0}, "--nodes must be at least 1"),
    ({"time": "2h"}, "--time '2h': give minutes"),
    ({"time": "4"}, "--time 4 leaves no training before the SIGTERM sent 300s ahead"),
    ({"partition": "cpu;reboot"}, "--partition 'cpu;reboot'"),
    ({"signal_lead_s": 10}, "--signal-lead must be at least 60 seconds"),
    ({"cpus_per_node": 0}, "--cpus-per-node must be at least 1"),
])
def test_what_slurm_would_refuse_is_refused_here(changes, message):
    with pytest.raises(CpuftError, match=message.replace("(", r"\(")):
        script(**changes)
