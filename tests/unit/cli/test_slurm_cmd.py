"""`cpuft slurm script` from the command line: the file, and one line for what cannot work."""

from __future__ import annotations

import os
import sys

from cpuft.cli.main import main


def test_the_script_is_written_with_this_interpreter_and_the_script_by_path(tmp_path,
                                                                           monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.py").write_text("print('hi')\n")
    assert main(["slurm", "script", "--nodes", "3", "--", "python", "job.py", "--x", "1"]) == 0
    text = (tmp_path / "cpuft.sbatch").read_text()
    assert f"exec {sys.executable} -m cpuft launch --launcher slurm" in text
    assert text.strip().endswith(f"-- python {tmp_path / 'job.py'} --x 1")
    assert "submit it with `sbatch cpuft.sbatch`" in capsys.readouterr().out
    assert os.access(tmp_path / "cpuft.sbatch", os.R_OK)


def test_nothing_is_overwritten_and_bad_settings_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cpuft.sbatch").write_text("mine")
    assert main(["slurm", "script", "--nodes", "2", "--", "train"]) == 2
    assert "--output cpuft.sbatch exists: pass --force" in capsys.readouterr().err
    assert (tmp_path / "cpuft.sbatch").read_text() == "mine"
    assert main(["slurm", "script", "--nodes", "2", "-o", "-", "--", "train", "--lr", "-1"]) == 2
    assert "--lr" in capsys.readouterr().err
    assert main(["slurm", "script", "--nodes", "2", "--lock", "nope.lock", "-o", "-", "--",
                 "train"]) == 2
    assert "--lock nope.lock: no such file" in capsys.readouterr().err
