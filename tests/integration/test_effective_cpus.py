"""A run takes the CPUs it really has: one core under `taskset`, and one core's worth of time in
a cgroup with a 1-CPU quota (how Docker and Kubernetes limit CPUs) each give one thread, and
summary.json says what bound it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tests.helpers import cpuft_env, sentiment_rows, write_csv

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 logical CPUs"),
]
CGROUP = Path("/sys/fs/cgroup")


@contextmanager
def quota_cgroup(cpus: float) -> Iterator[Path]:
    """A cgroup of this test's own with a CPU quota, removed afterwards."""
    name, quota = f"cpuft-test-{os.getpid()}", int(cpus * 100_000)
    try:
        if (CGROUP / "cpu" / "cpu.cfs_quota_us").exists():  # v1 (or hybrid)
            folder = CGROUP / "cpu" / name
            folder.mkdir()
            (folder / "cpu.cfs_period_us").write_text("100000")
            (folder / "cpu.cfs_quota_us").write_text(str(quota))
        elif "cpu" in (CGROUP / "cgroup.subtree_control").read_text().split():  # v2
            folder = CGROUP / name
            folder.mkdir()
            (folder / "cpu.max").write_text(f"{quota} 100000")
        else:
            pytest.skip("no cgroup CPU controller to set a quota with")
    except OSError as e:
        pytest.skip(f"cannot make a cgroup here ({e.strerror}; CI runs as root)")
    try:
        yield folder
    finally:
        for _ in range(50):  # its processes have ended; the kernel lets it go shortly after
            with suppress(OSError):
                folder.rmdir()
                break
            time.sleep(0.1)


def _train(tiny_model: Path, tmp_path: Path, prefix: list[str]) -> dict:
    data = write_csv(tmp_path / "reviews.csv", sentiment_rows(24))
    out = tmp_path / "run"
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "cpuft", "train", "--model", str(tiny_model),
         "--train-file", str(data), "--text-columns", "text", "--max-steps", "1",
         "--no-progress", "--precision", "fp32", "--output-dir", str(out)],
        capture_output=True, text=True, env=cpuft_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())["speedups"]


def test_an_affinity_mask_of_one_core_gives_one_thread(tiny_model, tmp_path):
    cpu = sorted(os.sched_getaffinity(0))[0]
    speedups = _train(tiny_model, tmp_path, ["taskset", "-c", str(cpu)])
    assert speedups["threads"] == 1 and speedups["cores"] == [cpu]
    assert speedups["threads_reason"] == ("one a core: the 1 physical core(s) the affinity "
                                          "mask allows")


def test_a_cgroup_quota_of_one_cpu_gives_one_thread(tiny_model, tmp_path):
    with quota_cgroup(1.0) as folder:
        speedups = _train(tiny_model, tmp_path, [
            "sh", "-c", f'echo $$ > {folder}/cgroup.procs && exec "$@"', "in-cgroup"])
    assert speedups["threads"] == 1 and len(speedups["cores"]) == 1
    assert speedups["threads_reason"].startswith(
        "one a core: the cgroup's CPU quota of 1 CPUs, below the ")
