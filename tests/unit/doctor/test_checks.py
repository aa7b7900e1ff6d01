import json
import subprocess
import sys
from pathlib import Path

from cpuft.doctor.checks import report
from cpuft.doctor.facts import NodeFacts
from cpuft.topology import Isa, Topology, parse_cpuinfo, parse_lscpu
from tests.helpers import cpuft_env

FIXTURES = Path(__file__).parents[2] / "fixtures"
HEALTHY = {"torch": "2.13.0+cpu", "transformers": "5.24.0", "datasets": "5.2.0"}


def facts(cpuinfo, **kw):
    model, flags = parse_cpuinfo((FIXTURES / cpuinfo).read_text())
    cpus = parse_lscpu((FIXTURES / "lscpu_2socket_smt.txt").read_text())
    base = dict(
        topology=Topology(cpus=tuple(cpus), isa=Isa.from_flags(flags), model_name=model),
        memory_gib=256.0, transparent_hugepages="madvise", python="3.11.7",
        packages=dict(HEALTHY), backends={"gloo": True, "mpi": False, "ccl": False},
        allocators={"tcmalloc": "/usr/lib/libtcmalloc.so.4"}, c_compiler="/usr/bin/cc",
    )
    base.update(kw)
    return NodeFacts(**base)


def by_check(rep):
    return {f["check"]: f for f in rep["findings"]}


def test_amx_node_trains_bf16_one_rank_per_numa_node():
    rep = report(facts("cpuinfo_spr_amx.txt", bf16_matmul_speedup=7.5))
    assert rep["ok"] and rep["choices"]["precision"] == "bf16"
    assert "AMX" in by_check(rep)["bf16"]["detail"]
    assert (rep["choices"]["ranks_per_node"], rep["choices"]["threads_per_rank"]) == (2, 4)
    assert rep["node"]["topology"]["physical_cores"] == 8


def test_avx512_bf16_without_amx_trains_in_what_measured_faster():
    zen4 = report(facts("cpuinfo_zen4_bf16.txt", bf16_matmul_speedup=2.4))
    assert zen4["choices"]["precision"] == "bf16"
    assert by_check(zen4)["bf16"]["status"] == "ok"
    assert "avx512_bf16" in by_check(zen4)["bf16"]["detail"]
    # A Xeon VM with avx512_bf16 but no AMX: bf16 matmuls ran at half fp32's speed.
    slow = report(facts("cpuinfo_zen4_bf16.txt", bf16_matmul_speedup=0.5))
    assert slow["choices"]["precision"] == "fp32"
    assert "0.50x fp32" in slow["choices"]["precision_reason"]
    assert by_check(slow)["bf16"]["status"] == "warn"
    assert "would be slower" in by_check(slow)["bf16"]["fix"]


def test_native_bf16_not_measured_says_it_will_be():
    rep = report(facts("cpuinfo_zen4_bf16.txt"))
    assert rep["choices"]["precision"] == "auto"
    assert "measures bf16 against fp32" in by_check(rep)["bf16"]["detail"]


def test_no_native_bf16_warns_and_picks_fp32():
    rep = report(facts("cpuinfo_icx_no_bf16.txt"))
    assert rep["ok"] and rep["choices"]["precision"] == "fp32"
    assert by_check(rep)["bf16"]["status"] == "warn"
    assert "avx512" not in by_check(rep)
    assert by_check(report(facts("cpuinfo_avx2_only.txt")))["avx512"]["status"] == "warn"


def test_problems_come_with_fixes():
    rep = report(facts("cpuinfo_spr_amx.txt", allocators={}, env={"OMP_NUM_THREADS": "64"},
                       transparent_hugepages="never"))
    found = by_check(rep)
    assert "libgoogle-perftools4" in found["allocator"]["fix"]
    assert "more than the 8 physical cores" in found["threads"]["detail"]
    assert found["thp"]["status"] == "warn" and rep["ok"]


def test_missing_torch_would_stop_a_run():
    rep = report(facts("cpuinfo_spr_amx.txt", packages={**HEALTHY, "torch": ""}, backends={}))
    assert not rep["ok"] and by_check(rep)["torch"]["status"] == "fail"


def test_doctor_json_on_this_machine():
    proc = subprocess.run([sys.executable, "-m", "cpuft", "doctor", "--json"],
                          capture_output=True, text=True, env=cpuft_env(), timeout=120)
    rep = json.loads(proc.stdout)
    assert proc.returncode == (0 if rep["ok"] else 1)
    assert rep["node"]["topology"]["physical_cores"] >= 1
    assert rep["choices"]["precision"] in ("bf16", "fp32")
    if rep["node"]["bf16_matmul_speedup"]:
        assert "measured" in rep["choices"]["precision_reason"]


def test_a_node_without_a_c_compiler_is_told_what_it_loses():
    assert by_check(report(facts("cpuinfo_spr_amx.txt")))["compiler"]["status"] == "ok"
    found = by_check(report(facts("cpuinfo_spr_amx.txt", c_compiler="")))["compiler"]
    assert found["status"] == "warn" and "gcc" in found["fix"]


def test_the_node_shows_the_affinity_mask_and_the_cpu_quota():
    node = facts("cpuinfo_spr_amx.txt")
    limited = facts("cpuinfo_spr_amx.txt", topology=node.topology.within_quota(2.0)).to_dict()
    t = limited["topology"]
    assert (t["affinity_cores"], t["cpu_quota"], t["physical_cores"]) == (8, 2.0, 2)
    assert t["cpu_bound"].startswith("the cgroup's CPU quota of 2 CPUs")
    free = node.to_dict()["topology"]
    assert (free["affinity_cores"], free["cpu_quota"]) == (8, None)


def test_doctor_names_the_isa_class_as_plan_does(capsys):
    from cpuft.cli.doctor_cmd import print_report

    rep = report(facts("cpuinfo_spr_amx.txt", bf16_matmul_speedup=7.5))
    assert rep["node"]["topology"]["isa_class"] == "amx"
    print_report(rep)
    line = next(x for x in capsys.readouterr().out.splitlines() if "ISA" in x)
    assert "│ amx (avx512f" in line  # the class, then the features behind it


def test_the_package_says_it_is_typed():
    from importlib.resources import files

    assert files("cpuft").joinpath("py.typed").is_file()
