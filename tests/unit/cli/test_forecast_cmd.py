"""cpuft plan against a fixture calibration: the table, the JSON, the chart, bad input."""

from __future__ import annotations

import json

import pytest

from cpuft.cli.main import main
from tests.helpers import calibration_file


def test_plan_forecasts_each_node_count_and_draws_it(tmp_path, capsys):
    summary = calibration_file(tmp_path / "run")
    out = tmp_path / "plan"
    code = main(["plan", "--calibration", str(summary.parent), "--train-samples", "100000",
                 "--nodes", "1,2,4,8", "--instance", "c7i.8xlarge", "--deadline", "1h",
                 "--output-dir", str(out), "--json"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    sheet = json.loads(printed.strip().splitlines()[-1])
    assert [n["nodes"] for n in sheet["nodes"]] == [1, 2, 4, 8]
    assert [n["global_batch"] for n in sheet["nodes"]] == [32, 64, 128, 256]
    assert sheet["nodes"][0]["efficiency"] == pytest.approx(1.0)
    assert all(0 < n["efficiency"] <= 1 for n in sheet["nodes"])
    assert sheet["cheapest_within_deadline"] in (1, 2, 4, 8)
    assert any("one amx core trains 2.60x as fast" in a for a in sheet["assumed"])
    assert any("c7i.8xlarge" in a and "taken" in a for a in sheet["assumed"])
    assert "cheapest within 60m" in printed and "measured: compute" in printed
    assert json.loads((out / "plan.json").read_text()) == sheet
    png = (out / "plan.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_plan_on_nodes_described_by_hand_with_a_fixed_global_batch(tmp_path, capsys):
    summary = calibration_file(tmp_path / "run")
    two_nodes = calibration_file(tmp_path / "two", nodes=2, comm_wait_fraction=0.1)
    code = main(["plan", "--calibration", str(summary), "--train-samples", "3200",
                 "--nodes", "1,2", "--cores", "2", "--link-gbit", "10", "--global-batch", "32",
                 "--hidden-from", str(two_nodes.parent), "--output-dir", str(tmp_path / "p"),
                 "--json"])
    sheet = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    # 0.05 s waited of the 0.0721 s 90 MB take on 10 Gbit/s between 2 nodes
    assert sheet["calibration"]["hidden_share"] == pytest.approx(1 - 0.05 / 0.0721, abs=1e-3)
    one, two = sheet["nodes"]
    # The calibrated node itself: 100 steps of the 0.5 s it measured
    assert one["wall_seconds"] == pytest.approx(50.0)
    assert two["global_batch"] == 32 and two["compute_seconds"] < one["compute_seconds"]
    assert one["cost_on_demand"] is None


@pytest.mark.parametrize("argv, message", [
    (["--nodes", "0"], "--nodes '0': every node count must be at least 1"),
    (["--instance", "m99.huge"], "--instance 'm99.huge' is not in"),
    (["--prices", "{broken}"], "no spot_usd_per_hour column"),
    (["--deadline", "1m"], "no node count in 1,2,4 ends by the deadline (60s): the fastest, "
                           "4 node(s), takes"),
    (["--deadline", "soon"], "--deadline 'soon': give a duration"),
    (["--calibrate"], "give --calibration RUN_DIR or --calibrate (one of them)"),
])
def test_bad_plan_input_is_one_line_and_exit_code_2(tmp_path, capsys, argv, message):
    summary = calibration_file(tmp_path / "run")
    broken = tmp_path / "prices.csv"
    broken.write_text("instance,cloud,physical_cores,isa,network_gbit,on_demand_usd_per_hour,"
                      "taken\nc7i.8xlarge,aws,16,amx,12.5,1.4,2026\n")
    argv = [a.replace("{broken}", str(broken)) for a in argv]
    code = main(["plan", "--calibration", str(summary), "--train-samples", "1000000",
                 "--nodes", "1,2,4", "--instance", "c7i.8xlarge", "--output-dir",
                 str(tmp_path / "out"), *[a for a in argv if a != "--instance"]]
                if "--instance" not in argv else
                ["plan", "--calibration", str(summary), "--train-samples", "1000000",
                 "--nodes", "1,2,4", "--output-dir", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("argv, message", [
    (["--recipe", "causal-lm", "--text-columns", "text"],
     "--text-columns is a setting of the classifier recipe"),
    (["--batch-size", "0"], "--batch-size must be positive"),
    (["--max-seq-length", "1"], "--max-seq-length must be at least 2"),
])
def test_calibrate_takes_train_settings_as_cpuft_train_checks_them(tmp_path, capsys, argv,
                                                                   message):
    code = main(["plan", "--calibrate", "--train-samples", "1000", "--cores", "2",
                 "--link-gbit", "1", "--output-dir", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.splitlines()[-1].startswith("cpuft: ") and message in err, err
    assert not (tmp_path / "out").exists()


def test_plan_counts_preemptions_in_the_spot_column(tmp_path, capsys):
    summary = calibration_file(tmp_path / "run")
    argv = ["plan", "--calibration", str(summary), "--train-samples", "20000000",
            "--nodes", "1,4", "--instance", "c7i.8xlarge", "--output-dir", str(tmp_path / "p"),
            "--json"]
    assert main(argv) == 0
    calm = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert calm["preemption"] is None
    assert any("never taken back" in a for a in calm["assumed"])
    assert main([*argv, "--preemptions-per-hour", "0.05", "--checkpoint-every", "20m",
                 "--restart-time", "2m"]) == 0
    printed = capsys.readouterr().out
    rough = json.loads(printed.strip().splitlines()[-1])
    assert rough["preemption"] == {"per_node_hour": 0.05, "checkpoint_every_s": 1200.0,
                                   "restart_s": 120.0}
    for before, after in zip(calm["nodes"], rough["nodes"], strict=True):
        k = after["nodes"]
        share = k * 0.05 * (600 + 120) / 3600  # of each hour, lost
        assert after["spot_wall_seconds"] == pytest.approx(before["wall_seconds"] / (1 - share))
        assert after["cost_spot"] == pytest.approx(before["cost_spot"] / (1 - share))
        assert after["cost_on_demand"] == before["cost_on_demand"]
    assert "preemptions" in printed  # the spot wall time and preemption columns
    assert any("taken back 0.05 times a node-hour" in a for a in rough["assumed"])
    # So often that four nodes never finish: said, and no infinity in the JSON
    assert main([*argv, "--preemptions-per-hour", "3", "--checkpoint-every", "20m"]) == 0
    printed = capsys.readouterr().out
    never = json.loads(printed.strip().splitlines()[-1])
    assert [n["spot_ends"] for n in never["nodes"]] == [True, False]
    assert never["nodes"][1]["cost_spot"] is None and "never" in printed
