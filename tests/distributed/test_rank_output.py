"""Every line a launched rank writes comes out whole and tagged with its host and rank, and a
script that never joins its job is named."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cpuft_env, free_port

pytestmark = pytest.mark.multiprocess

CHATTY = '''
import os, sys
import torch
import cpuft.distributed

rank, world = cpuft.distributed.init()
torch.distributed.barrier()  # a job that communicates: no warning joins the last line
for i in range(300):
    if i % 2:  # a line in two writes, the way print() writes under PYTHONUNBUFFERED
        os.write(1, f"rank {rank} line {i} first half, ".encode())
        os.write(1, b"second half\\n")
    else:
        print(f"rank {rank} line {i} whole", file=sys.stderr if i % 3 == 0 else sys.stdout)
os.system(f"echo rank {rank} from a child process")
print(f"rank {rank} last words, no newline", end="")
'''


def launch(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.py").write_text(script)
    return subprocess.run([sys.executable, "-m", "cpuft", "launch", "--nproc-per-node", "2",
                           "--master-port", str(free_port()), *args, "--", "python", "job.py"],
                          cwd=tmp_path, env=cpuft_env(PYTHONUNBUFFERED="1"), capture_output=True,
                          text=True, timeout=180)


def test_two_chatty_ranks_lines_come_out_whole_and_tagged(tmp_path):
    proc = launch(tmp_path, CHATTY)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = re.compile(r"\[(?P<host>[^\]:]+):(?P<tag>[01])\] rank (?P<rank>[01]) "
                      r"(line (?P<i>\d+) (first half, second half|whole)|from a child process"
                      r"|last words, no newline)")
    counts = {"0": 0, "1": 0}
    for text in proc.stdout.splitlines():
        m = line.fullmatch(text)
        assert m, f"a line cut or untagged: {text!r}"
        assert m["tag"] == m["rank"] and m["host"] == socket.gethostname()
        counts[m["rank"]] += 1
    assert counts == {"0": 302, "1": 302}


def test_a_script_that_never_joins_its_job_is_named(tmp_path):
    proc = launch(tmp_path, "print('working alone')\n")
    assert proc.returncode == 0
    assert proc.stdout.count("working alone") == 2
    warning = [line for line in proc.stdout.splitlines() if "without joining its job" in line]
    assert len(warning) == 1 and "job.py ended without joining its job: its 2 ranks ran as 2 " \
        "separate copies" in warning[0]


@pytest.mark.parametrize("communicates", [False, True])
def test_a_script_that_joins_but_never_communicates_is_named(tmp_path, communicates):
    """A process group made and left unused (accelerate's, under a Trainer that never wraps
    the model) means as many separate copies as ranks."""
    script = ("import torch, torch.distributed as dist\n"
              "dist.init_process_group('gloo')\n"
              + ("dist.all_reduce(torch.ones(1))\n" if communicates else "")
              + "print('trained')\n")
    proc = launch(tmp_path, script)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    warning = [line for line in proc.stdout.splitlines() if "never communicated" in line]
    if communicates:
        assert warning == []
    else:
        assert len(warning) == 1 and "job.py joined its job but never communicated in it: its " \
            "2 ranks trained as 2 separate copies" in warning[0]
