import sys

from cpuft.bench.start_worker import worker_command
from cpuft.launch.reexec import reexec_command


def test_reexec_keeps_arguments_and_adds_preload():
    argv, env = reexec_command(["train", "--max-steps", "3"],
                               {"LD_PRELOAD": "/lib/libtcmalloc.so.4"}, environ={"PATH": "/bin"})
    assert argv == [sys.executable, "-m", "cpuft", "train", "--max-steps", "3"]
    assert env == {"PATH": "/bin", "LD_PRELOAD": "/lib/libtcmalloc.so.4", "CPUFT_REEXEC": "1"}


def test_worker_command_unsets_preload_for_stock_runs():
    argv, env = worker_command("cpuft.bench.worker", ["{}"], {}, unset=("LD_PRELOAD",),
                               environ={"LD_PRELOAD": "/x.so", "HOME": "/root"})
    assert argv == [sys.executable, "-m", "cpuft.bench.worker", "{}"]
    assert env == {"HOME": "/root"}


def test_a_failed_restart_returns_why_instead_of_ending_the_run(monkeypatch):
    import os

    from cpuft.launch import reexec as module

    def refuse(*args):
        raise OSError(8, "Exec format error")

    monkeypatch.setattr(os, "execve", refuse)
    assert module.reexec(["train"], {"LD_PRELOAD": "/x.so"}).endswith(": Exec format error")
