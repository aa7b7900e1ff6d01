"""What cpuft will choose on a node, and each problem with its fix: pure functions of the facts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cpuft.config import SpeedupConfig
from cpuft.doctor.facts import NodeFacts
from cpuft.speedplan.choices import choose_precision, precision_from_speedup
from cpuft.topology.placement import auto_nproc, plan_node

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's outcome ('ok', 'warn' or 'fail'), with the fix for a problem."""

    check: str
    status: str
    detail: str
    fix: str = ""
    host: str = ""
    """The host it is about, in a cluster check."""


def choices(facts: NodeFacts) -> dict[str, Any]:
    """The plan cpuft makes here with default settings, with reasons."""
    topo = facts.topology
    chosen, why = choose_precision(SpeedupConfig().precision, topo)
    precision = chosen or "auto"  # "auto": to be measured, where the doctor did not
    if chosen is None and facts.bf16_matmul_speedup:
        precision, why = precision_from_speedup(facts.bf16_matmul_speedup)
    ranks = auto_nproc(topo)
    placements = plan_node(topo, ranks)
    allocator = next(iter(facts.allocators), "system")
    return {
        "precision": precision, "precision_reason": why,
        "ranks_per_node": ranks, "threads_per_rank": placements[0].threads,
        "ranks_reason": f"one rank per NUMA node ({topo.numa_nodes}), one thread per physical core",
        "allocator": allocator,
    }


def findings(facts: NodeFacts) -> list[Finding]:
    topo, out = facts.topology, []
    if not facts.packages.get("torch"):
        out.append(Finding("torch", FAIL, "torch is not installed",
                           "pip install torch==2.13.0 (the CPU wheel)"))
    else:
        out.append(Finding("torch", OK, f"torch {facts.packages['torch']}, oneDNN "
                           f"{facts.onednn or '?'}, OpenMP {facts.openmp or '?'}"))
    for pkg in ("transformers", "datasets"):
        if not facts.packages.get(pkg):
            out.append(Finding(pkg, FAIL, f"{pkg} is not installed", "pip install cpuft"))
    if facts.packages.get("torch") and not facts.backends.get("gloo"):
        out.append(Finding("backend", FAIL, "torch has no gloo: multi-process runs cannot start",
                           "install torch's CPU wheel from PyPI"))
    elif facts.backends:
        have = ", ".join(b for b, ok in facts.backends.items() if ok)
        out.append(Finding("backend", OK, f"collective backends: {have}"))
    isa = topo.isa
    if isa.native_bf16:
        kind = "AMX tiles" if isa.amx else "avx512_bf16"
        speedup = facts.bf16_matmul_speedup
        if not speedup:
            out.append(Finding("bf16", OK, f"native bf16 ({kind}): cpuft measures bf16 against "
                               "fp32 at start and trains in the faster"))
        elif precision_from_speedup(speedup)[0] == "bf16":
            out.append(Finding("bf16", OK, f"native bf16 ({kind}), matmul {speedup:.2f}x fp32: "
                               "cpuft trains in bf16"))
        else:
            out.append(Finding("bf16", WARN, f"native bf16 ({kind}), but its matmul runs "
                               f"{speedup:.2f}x fp32 here: cpuft trains in fp32",
                               "leave --precision auto; --precision bf16 would be slower"))
    else:
        out.append(Finding("bf16", WARN,
                           "no avx512_bf16 or AMX: bf16 would be emulated and slower than fp32",
                           "cpuft uses fp32 here; do not force --precision bf16"))
    if not isa.avx512f:
        out.append(Finding("avx512", WARN, "no AVX-512: expect a fraction of a Xeon's speed"))
    if facts.allocators:
        name, path = next(iter(facts.allocators.items()))
        out.append(Finding("allocator", OK, f"{name} at {path}: cpuft preloads it"))
    else:
        out.append(Finding("allocator", WARN, "no tcmalloc or jemalloc: ~1.2x slower training",
                           "apt-get install libgoogle-perftools4"))
    if facts.c_compiler:
        out.append(Finding("compiler", OK, f"C compiler {facts.c_compiler}: cpuft builds its "
                           "one-pass AdamW for bf16 weights"))
    else:
        out.append(Finding("compiler", WARN, "no C compiler: bf16 weights are stepped by "
                           "torch's ops, four passes over memory instead of one",
                           "apt-get install gcc (or set CC)"))
    threads = facts.env.get("OMP_NUM_THREADS")
    if threads and threads.isdigit() and int(threads) > topo.physical_cores:
        out.append(Finding("threads", WARN,
                           f"OMP_NUM_THREADS={threads} is more than the {topo.physical_cores} "
                           "physical cores: threads will fight over cores",
                           f"unset OMP_NUM_THREADS (cpuft sets it) or set it to "
                           f"{topo.physical_cores} or less"))
    if topo.threads_per_core > 1:
        out.append(Finding("smt", OK, f"SMT on ({topo.threads_per_core} threads per core): "
                           "cpuft uses one thread per physical core"))
    if facts.transparent_hugepages == "never":
        out.append(Finding("thp", WARN, "transparent huge pages are off",
                           "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"))
    if facts.memory_gib and facts.memory_gib < 8:
        out.append(Finding("memory", WARN, f"{facts.memory_gib:.1f} GiB of memory: bert-base "
                           "fine-tuning needs about 4 GiB per rank"))
    return out


def report(facts: NodeFacts) -> dict[str, Any]:
    found = findings(facts)
    return {
        "node": facts.to_dict(),
        "choices": choices(facts),
        "findings": [asdict(f) for f in found],
        "ok": all(f.status != FAIL for f in found),
    }
