"""The CPUs a process really has: its cgroup's CPU quota (v1 and v2, anywhere up the hierarchy)
bounds the cores it uses as its affinity mask does, whichever is smaller."""

from __future__ import annotations

from pathlib import Path

import pytest

from cpuft.speedplan.choices import choose_threads
from cpuft.topology import Isa, Topology, parse_lscpu
from cpuft.topology.quota import cgroup_paths, cpu_quota, parse_cfs, parse_cpu_max

FIXTURES = Path(__file__).parents[2] / "fixtures"
HYBRID = ("12:cpu,cpuacct:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n"
          "0::/kubepods/pod1/c1\n")


@pytest.mark.parametrize("text, cpus", [
    ("max 100000\n", None), ("150000 100000\n", 1.5), ("100000 100000", 1.0), ("junk", None),
])
def test_cgroup_v2_cpu_max(text, cpus):
    assert parse_cpu_max(text) == cpus


def test_cgroup_v1_quota_and_membership():
    assert parse_cfs("-1\n", "100000\n") is None
    assert parse_cfs("250000\n", "100000\n") == 2.5
    assert cgroup_paths(HYBRID) == ("/kubepods/pod1/c1", "/kubepods/pod1/c1")
    assert cgroup_paths("0::/\n") == ("/", None)


def test_the_tightest_quota_up_the_hierarchy_binds(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "kubepods/pod1/c1").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "kubepods/pod1/c1/cpu.max").write_text("max 100000\n")
    (v2 / "kubepods/pod1/cpu.max").write_text("300000 100000\n")
    (v2 / "kubepods/cpu.max").write_text("800000 100000\n")
    assert cpu_quota("0::/kubepods/pod1/c1\n", v2) == 3.0
    v1 = tmp_path / "v1" / "cpu,cpuacct"
    (v1 / "kubepods/pod1/c1").mkdir(parents=True)
    (v1 / "kubepods/pod1/c1/cpu.cfs_quota_us").write_text("150000\n")
    (v1 / "kubepods/pod1/c1/cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_quota(HYBRID, tmp_path / "v1") == 1.5
    assert cpu_quota("0::/\n", tmp_path / "none") is None


def test_a_quota_below_the_cores_keeps_whole_cores_and_says_so():
    cpus = parse_lscpu((FIXTURES / "lscpu_2socket_smt.txt").read_text())
    topo = Topology(cpus=tuple(cpus), isa=Isa.from_flags(frozenset()))
    assert topo.physical_cores == 8 and topo.threads_per_core == 2
    limited = topo.within_quota(3.5)
    assert limited.physical_cores == 3 and len(limited.cpus) == 6  # their SMT siblings too
    assert choose_threads(0, limited) == (3, [0, 1, 2])
    assert limited.cpu_bound == ("the cgroup's CPU quota of 3.5 CPUs, below the 8 cores the "
                                 "affinity mask allows")
    roomy = topo.within_quota(16.0)
    assert roomy.physical_cores == 8 and roomy.cpu_bound.endswith(
        "(the cgroup's quota of 16 CPUs covers them)")
    assert topo.within_quota(0.5).physical_cores == 1  # a share of one core is still one
