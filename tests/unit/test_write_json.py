"""summary.json and cpuft_run.json are written whole or not at all (issue 45: a kill or a full
disk left them empty, and the run could not be resumed or finished)."""

import json
import os

import pytest

from cpuft.errors import CpuftError
from cpuft.paths import write_json


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('{"old": 1}\n')
    write_json(path, {"new": [1, 2]})
    assert json.loads(path.read_text()) == {"new": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left


def test_a_failed_write_keeps_the_old_file_and_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "cpuft_run.json"
    path.write_text('{"old": 1}\n')

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CpuftError, match=r"cannot write .*cpuft_run.json \(No space left on "
                                         r"device\)"):
        write_json(path, {"new": 2})
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["cpuft_run.json"]
