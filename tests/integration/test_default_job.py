"""The default job (real MiniLM, real Rotten Tomatoes data) for a few steps, as a user runs it."""

import json
import subprocess
import sys

from tests.helpers import cpuft_env


def test_default_job_smoke(tmp_path):
    out = tmp_path / "default"
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft", "train", "--max-steps", "3", "--output-dir", str(out),
         "--no-progress"],
        capture_output=True, text=True, env=cpuft_env(), timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "rotten_tomatoes" and summary["steps"] == 3
    assert summary["train_samples"] == 10246  # 80% of the 12,808 fresh/rotten snippets
    assert set(summary["test"]) == {"accuracy", "f1"}
    # auto precision is settled before training (by measuring, where the CPU has native bf16)
    assert summary["precision"] in ("bf16", "fp32")
    assert summary["speedups"]["precision"] == summary["precision"]
    assert summary["speedups"]["precision_reason"].startswith("auto:")
    assert "test: accuracy" in proc.stdout
