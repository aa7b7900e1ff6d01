from pathlib import Path

import pytest

from cpuft.errors import CpuftError
from cpuft.speedplan.choices import choose_precision, choose_threads
from cpuft.topology import Isa, Topology, parse_cpuinfo, parse_lscpu

FIXTURES = Path(__file__).parents[2] / "fixtures"


def topo(cpuinfo: str, lscpu: str = "lscpu_2socket_smt.txt") -> Topology:
    model, flags = parse_cpuinfo((FIXTURES / cpuinfo).read_text())
    cpus = parse_lscpu((FIXTURES / lscpu).read_text())
    return Topology(cpus=tuple(cpus), isa=Isa.from_flags(flags), model_name=model)


def test_two_socket_smt_counts():
    t = topo("cpuinfo_spr_amx.txt")
    assert (t.sockets, t.numa_nodes, t.physical_cores, t.threads_per_core) == (2, 2, 8, 2)
    assert t.first_thread_per_core() == [0, 1, 2, 3, 4, 5, 6, 7]
    assert t.first_thread_per_core(node=1) == [4, 5, 6, 7]


@pytest.mark.parametrize(
    ("cpuinfo", "native", "amx", "precision"),
    [
        ("cpuinfo_spr_amx.txt", True, True, None),  # None: settled by measuring
        ("cpuinfo_zen4_bf16.txt", True, False, None),
        ("cpuinfo_icx_no_bf16.txt", False, False, "fp32"),
        ("cpuinfo_avx2_only.txt", False, False, "fp32"),
    ],
)
def test_isa_and_auto_precision(cpuinfo, native, amx, precision):
    t = topo(cpuinfo)
    assert t.isa.native_bf16 is native
    assert t.isa.amx is amx
    chosen, reason = choose_precision("auto", t)
    assert chosen == precision
    assert reason.startswith("auto:")


def test_model_name_and_flags_from_cpuinfo():
    model, flags = parse_cpuinfo((FIXTURES / "cpuinfo_zen4_bf16.txt").read_text())
    assert model == "AMD EPYC 9654 96-Core Processor"
    assert "avx512_bf16" in flags and "amx_tile" not in flags


def test_bf16_forced_without_native_support_warns():
    precision, reason = choose_precision("bf16", topo("cpuinfo_icx_no_bf16.txt"))
    assert precision == "bf16" and "slower" in reason


def test_threads_one_per_physical_core():
    threads, cores = choose_threads(0, topo("cpuinfo_spr_amx.txt"))
    assert threads == 8 and cores == [0, 1, 2, 3, 4, 5, 6, 7]
    assert choose_threads(3, topo("cpuinfo_spr_amx.txt")) == (3, [0, 1, 2])


def test_lscpu_without_numa_field_and_bad_line():
    assert parse_lscpu("0,0,0,\n1,1,0,\n")[1].node == 0
    with pytest.raises(CpuftError, match="line 1"):
        parse_lscpu("0,x,0,0\n")
