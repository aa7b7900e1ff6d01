"""Numbers and files that cannot work are refused by cpuft plan and cpuft report in one line
and exit code 2: NaN and infinity as negatives are, a price table that is not one, a report
that would write among another folder's files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpuft.cli.main import main
from tests.helpers import calibration_file

PLAN = ["plan", "--train-samples", "1000", "--nodes", "1,2"]


def run(argv: list[str]) -> int:
    """cpuft's exit code, flags argparse refuses included (it exits)."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def _summary(folder: Path, summary: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


@pytest.mark.parametrize("argv, phrase", [
    (["--epochs", "nan", "--cores", "2", "--link-gbit", "1"], "--epochs: 'nan': give a finite"),
    (["--epochs", "inf", "--cores", "2", "--link-gbit", "1"], "--epochs: 'inf': give a finite"),
    (["--cores", "2", "--link-gbit", "nan"], "--link-gbit: 'nan': give a finite number"),
    (["--cores", "2", "--link-gbit", "1", "--price-per-hour", "nan"],
     "--price-per-hour: 'nan': give a finite number"),
    (["--cores", "2", "--link-gbit", "0"], "--link-gbit must be positive, not 0"),
    (["--cores", "2", "--link-gbit", "1", "--prices", "{missing}"],
     "--prices is read for --instance NAME"),
    (["--instance", "c7i.8xlarge", "--prices", "{nan_prices}"],
     "on_demand_usd_per_hour must be positive, not nan"),
    (["--instance", "c7i.8xlarge", "--prices", "{binary}"], "not a text file"),
    (["--cores", "2", "--link-gbit", "1", "--hidden-from", "{missing}"],
     "--hidden-from {missing}: cannot read"),
])
def test_plan_refuses_numbers_and_tables_that_cannot_work(tmp_path, capsys, argv, phrase):
    (tmp_path / "nan.csv").write_text(
        "instance,cloud,physical_cores,isa,network_gbit,on_demand_usd_per_hour,"
        "spot_usd_per_hour,taken\nc7i.8xlarge,aws,16,amx,12.5,nan,0.5,2026\n")
    (tmp_path / "binary.csv").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    files = {"{missing}": str(tmp_path / "missing.csv"), "{nan_prices}": str(tmp_path / "nan.csv"),
             "{binary}": str(tmp_path / "binary.csv")}
    argv = [files.get(a, a) for a in argv]
    phrase = phrase.replace("{missing}", files["{missing}"])
    code = run([*PLAN, "--calibration", str(calibration_file(tmp_path / "run")),
                 "--output-dir", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and phrase in err, err


def test_report_refuses_what_is_not_a_summary_and_a_folder_of_other_files(tmp_path, capsys):
    listed = _summary(tmp_path / "listed", [1, 2])
    assert main(["report", str(listed), "--output-dir", str(tmp_path / "r1")]) == 2
    assert "not a summary of cpuft train (a JSON list, not an object)" in capsys.readouterr().err
    good = _summary(tmp_path / "good", {"train_samples_per_second": 10.0, "train_seconds": 5.0})
    assert run(["report", str(good), "--price-per-node-hour", "nan", "--output-dir",
                 str(tmp_path / "r2")]) == 2
    assert "--price-per-node-hour: 'nan': give a finite number" in capsys.readouterr().err
    assert main(["report", str(good), "--output-dir", str(good)]) == 2
    assert "holds other files (summary.json)" in capsys.readouterr().err
    assert json.loads((good / "summary.json").read_text())["train_seconds"] == 5.0


def test_report_says_which_metrics_lines_it_left_out(tmp_path, said):
    run = _summary(tmp_path / "run", {"train_samples_per_second": 10.0, "train_seconds": 5.0})
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": NaN}\n'
                                       '{"step": 3, "lo\n')
    assert main(["report", str(run), "--output-dir", str(tmp_path / "r")]) == 0
    assert any("metrics.jsonl: 2 line(s) left out" in line for line in said), said
    assert main(["report", str(run), "--output-dir", str(tmp_path / "r")]) == 0  # again, same
