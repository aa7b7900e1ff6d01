"""cpuft plan's forecast against measured runs on namespaced nodes, on a tiny model: the check
benchmarks/forecast_accuracy.py makes on real models runs end to end. How near it comes is that
benchmark's figure, not this test's: timings on shared cores move with the machine's load."""

import pytest

from cpuft.bench.forecast_check import CheckOptions, check
from cpuft.testing.netns import can_make_namespaces
from tests.helpers import free_port, sentiment_rows, write_csv

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)"),
]


def test_the_forecast_is_checked_against_runs_on_one_and_two_nodes(tiny_model, tmp_path):
    data = write_csv(tmp_path / "reviews.csv", sentiment_rows(400, seed=3))
    report = check(CheckOptions(
        settings={"model": str(tiny_model), "train_file": str(data), "text_columns": ["text"],
                  "max_seq_length": 32, "precision": "fp32"},
        global_batches=(16, 32), nodes=(1, 2), steps=12, rate="100mbit", hidden_batch=24,
        port=free_port()))
    rows = report["rows"]
    assert [(r["nodes"], r["global_batch"]) for r in rows] == [(1, 16), (2, 16), (1, 32),
                                                               (2, 32)]
    # How near the forecast comes is a measurement (benchmarks/forecast_accuracy.py): on
    # shared cores a test of it failed whenever the machine was busy (issue 45). Here, what
    # load cannot change: every row measured and forecast, its error computed from both.
    for r in rows:
        assert r["measured_seconds"] > 0 and r["predicted_seconds"] > 0
        assert r["error"] == pytest.approx(r["predicted_seconds"] / r["measured_seconds"] - 1,
                                           rel=1e-3, abs=1e-3)
    two = [r for r in rows if r["nodes"] == 2]
    assert all(r["comm_wait_fraction"] > 0 for r in two)
    assert any(m.startswith("hidden communication") for m in report["calibration"]["measured"])
    assert report["worst_error"] == max(abs(r["error"]) for r in rows)
