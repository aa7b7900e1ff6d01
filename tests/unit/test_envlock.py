import json
import subprocess
import sys

import pytest

from cpuft.envlock import bootstrap_script, differences, lock_hash, make_lock, read_lock
from cpuft.errors import CpuftError


def relock(lock, **packages):
    changed = dict(lock, packages={**lock["packages"], **packages})
    changed["hash"] = lock_hash(changed["python"], changed["packages"])
    return changed


def test_lock_names_cpuft_its_closure_and_a_stable_hash():
    lock = make_lock()
    for pkg in ("cpuft", "torch", "transformers", "datasets", "numpy"):
        assert pkg in lock["packages"]
    assert lock["hash"] == make_lock()["hash"] and len(lock["hash"]) == 16
    assert read_lock(json.dumps(lock)) == lock


def test_edited_or_foreign_lock_rejected():
    lock = make_lock()
    edited = dict(lock, packages={**lock["packages"], "torch": "9.9"})
    with pytest.raises(CpuftError, match="hash does not match"):
        read_lock(json.dumps(edited))
    with pytest.raises(CpuftError, match="not a cpuft lock"):
        read_lock('{"a": 1}')


def test_differences_side_by_side():
    lock = make_lock()
    other = relock(lock, torch="2.12.0", extra="1.0")
    assert differences(other, lock) == [("extra", "1.0", ""), ("torch", "2.12.0",
                                                                lock["packages"]["torch"])]


def verify_step(script: str) -> str:
    return script[script.index("# 3. verify"):]


def test_bootstrap_verification_step_runs_against_this_venv(tmp_path):
    lock = make_lock()
    script = bootstrap_script(lock, prefix=str(tmp_path))
    assert script.startswith("#!/bin/sh") and "apt-get install" in script
    assert f"torch=={lock['packages']['torch']}" in script
    env = {"PREFIX": str(tmp_path), "PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "HF_HUB_OFFLINE": "1"}
    ok = subprocess.run(["sh", "-c", "set -eu\n" + verify_step(script)], env=env,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"matches lock {lock['hash']}" in ok.stdout
    bad = bootstrap_script(relock(lock, transformers="4.0.0"), prefix=str(tmp_path))
    fail = subprocess.run(["sh", "-c", "set -eu\n" + verify_step(bad)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert fail.returncode == 1 and "transformers" in fail.stdout and "4.0.0" in fail.stdout


def test_lock_to_a_path_that_cannot_be_written_is_one_line(capsys, tmp_path):
    from cpuft.cli.main import main

    code = main(["env", "lock", "--output", str(tmp_path / "no" / "such" / "dir" / "lock.json")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("cpuft: --output ") and "cannot write it" in err
