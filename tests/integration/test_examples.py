"""The examples run, each of the three ways, and on 2 ranks through `cpuft launch`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cpuft_env, free_port

EXAMPLES = Path(__file__).parents[2] / "examples"
pytestmark = pytest.mark.slow


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("example", ["cnn_digits.py", "rnn_reviews.py"])
@pytest.mark.parametrize("way", ["plain", "optimize", "fit"])
def test_each_example_trains_each_way(example: str, way: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLES / example), "--way", way,
                           "--max-steps", "4", "--batch-size", "16"],
                          capture_output=True, text=True, env=cpuft_env(), timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = _last_json(proc.stdout)
    assert result["way"] == way and result["steps"] == 4 and result["world_size"] == 1
    assert 0.0 <= result["test_accuracy"] <= 1.0 and result["samples_per_second"] > 0


@pytest.mark.multiprocess
@pytest.mark.parametrize("example", ["cnn_digits.py", "rnn_reviews.py"])
@pytest.mark.parametrize("way", ["optimize", "fit"])
def test_each_example_runs_on_two_ranks(example: str, way: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "cpuft", "launch", "--nproc-per-node", "2",
                           "--master-port", str(free_port()), str(EXAMPLES / example),
                           "--way", way, "--max-steps", "3", "--batch-size", "8"],
                          capture_output=True, text=True, env=cpuft_env(), timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(next(line.split("] ", 1)[-1] for line in reversed(
        proc.stdout.strip().splitlines()) if '"test_accuracy"' in line))
    assert result["world_size"] == 2 and result["steps"] == 3
