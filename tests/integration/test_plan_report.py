"""cpuft report on two tiny runs, and cpuft plan on what a run (or --calibrate) measured."""

from __future__ import annotations

import json

import pytest

from cpuft.cli.main import main
from tests.helpers import sentiment_rows, train_args, write_csv


@pytest.fixture
def data_file(tmp_path):
    return write_csv(tmp_path / "reviews.csv", sentiment_rows(44, seed=2))


def test_report_of_two_runs_has_their_rows_and_real_pictures(tiny_model, data_file, tmp_path,
                                                             capsys):
    first, second = tmp_path / "fp32", tmp_path / "bigger"
    assert main(train_args(tiny_model, data_file, first, "--max-steps", "5",
                           "--precision", "fp32")) == 0
    assert main(train_args(tiny_model, data_file, second, "--max-steps", "5",
                           "--precision", "fp32", "--batch-size", "16")) == 0
    summary = json.loads((first / "summary.json").read_text())
    inputs = summary["forecast_inputs"]
    assert inputs["samples_per_step"] == 8 and inputs["seconds_per_step"] > 0
    assert inputs["dense_gradient_bytes"] > 10_000 and inputs["isa"] in (
        "avx2", "avx512", "avx512_bf16", "amx")
    out = tmp_path / "report"
    capsys.readouterr()
    assert main(["report", str(first), str(second), "--output-dir", str(out),
                 "--price-per-node-hour", "1.5"]) == 0
    md = (out / "report.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| fp32 |")
            or line.startswith("| bigger |")]
    assert len(rows) == 2 and "accuracy" in rows[0] and "$" in rows[0]
    assert "| 1 | fp32 |" in md and "1.00x |" in md
    assert "![Loss](loss.png)" in md and "![Throughput](throughput.png)" in md
    for name in ("loss.png", "throughput.png"):
        png = (out / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_plan_reads_a_runs_summary_and_calibrates_a_job_here(tiny_model, data_file, tmp_path,
                                                             capsys):
    run = tmp_path / "run"
    assert main(train_args(tiny_model, data_file, run, "--max-steps", "4",
                           "--precision", "fp32")) == 0
    capsys.readouterr()
    assert main(["plan", "--calibration", str(run), "--train-samples", "10000", "--nodes",
                 "1,2,4", "--cores", "2", "--link-gbit", "1", "--output-dir",
                 str(tmp_path / "p1"), "--json"]) == 0
    sheet = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sheet["nodes"][0]["efficiency"] == pytest.approx(1.0)
    assert sheet["model"] == tiny_model.name  # by name: a summary holds no path of this machine
    assert main(["plan", "--calibrate", "--model", str(tiny_model), "--train-file", str(data_file),
                 "--text-columns", "text", "--max-seq-length", "32", "--batch-size", "8",
                 "--train-samples", "10000", "--nodes", "1,2", "--cores", "2", "--link-gbit", "1",
                 "--output-dir", str(tmp_path / "p2"), "--json"]) == 0
    sheet = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    calibration = json.loads((tmp_path / "p2" / "calibration.json").read_text())
    assert set(calibration["forecast_inputs"]["step_seconds_by_batch"]) == {"4", "8"}
    assert any(m.startswith("steps also timed at 4 samples") for m in sheet["measured"])
