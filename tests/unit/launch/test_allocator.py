"""The allocator a launcher preloads on every rank is the ranks' own ``--allocator``."""

import pytest

from cpuft.cli.main import main
from cpuft.speedplan.allocator import find_allocator
from tests.helpers import free_port


@pytest.fixture
def launched(monkeypatch):
    """The LaunchConfig a command would start, captured instead of started."""
    from cpuft.launch import run

    jobs = []
    monkeypatch.setattr(run, "run_job", lambda cfg: jobs.append(cfg) or 0)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("MALLOC_CONF", raising=False)
    return jobs


@pytest.mark.parametrize("argv", [
    ["launch", "--nproc-per-node", "1", "--", "train", "--allocator", "system"],
    ["train", "--nproc-per-node", "1", "--allocator", "system"],
])
def test_allocator_system_preloads_nothing(launched, argv):
    assert main([argv[0], "--master-port", str(free_port()), *argv[1:]]) == 0
    [cfg] = launched
    assert "LD_PRELOAD" not in cfg.env and "MALLOC_CONF" not in cfg.env
    assert "--allocator" in cfg.train_args  # each rank still gets the setting itself


@pytest.mark.skipif(find_allocator("tcmalloc") is None, reason="needs Debian's tcmalloc")
@pytest.mark.parametrize("argv", [
    ["launch", "--nproc-per-node", "1", "--", "train"],
    ["train", "--nproc-per-node", "1", "--allocator", "tcmalloc"],
])
def test_tcmalloc_is_preloaded_by_default_and_on_request(launched, argv):
    assert main([argv[0], "--master-port", str(free_port()), *argv[1:]]) == 0
    [cfg] = launched
    assert cfg.env["LD_PRELOAD"] == find_allocator("tcmalloc")


def test_the_ranks_settings_are_checked_before_launching(launched, capsys):
    assert main(["launch", "--nproc-per-node", "1", "--", "train", "--batch-size", "0"]) == 2
    assert launched == [] and "--batch-size must be positive" in capsys.readouterr().err
