"""Facts about this node, gathered once; the checks are pure functions of them."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from cpuft.kernels.build import find_compiler
from cpuft.speedplan.allocator import ALLOCATOR_LIBS, find_allocator
from cpuft.topology import Topology, read_topology


@dataclass(kw_only=True, slots=True)
class NodeFacts:
    topology: Topology
    memory_gib: float = 0.0
    transparent_hugepages: str = "unknown"
    python: str = ""
    packages: dict[str, str] = field(default_factory=dict)
    """Versions of torch, transformers, datasets, accelerate, cpuft ('' when missing)."""
    onednn: str = ""
    openmp: str = ""
    backends: dict[str, bool] = field(default_factory=dict)
    """gloo, mpi, ccl: whether torch can use each here."""
    allocators: dict[str, str] = field(default_factory=dict)
    """Allocator name -> library path, for those installed."""
    env: dict[str, str] = field(default_factory=dict)
    """Thread and allocator variables set in the environment."""
    c_compiler: str = ""
    """The C compiler cpuft builds its kernels with ('' when there is none)."""
    bf16_matmul_speedup: float = 0.0
    """bf16 over fp32 matmul speed, measured where the CPU has native bf16 (0: not measured)."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        t = self.topology
        out["topology"] = {
            "cpu": t.model_name, "sockets": t.sockets, "numa_nodes": t.numa_nodes,
            "physical_cores": t.physical_cores, "threads_per_core": t.threads_per_core,
            "logical_cpus": len(t.cpus), "isa": t.isa.names(), "isa_class": t.isa.class_name,
            "affinity_cores": t.cores_allowed or t.physical_cores, "cpu_quota": t.cpu_quota,
            "cpu_bound": t.cpu_bound,
        }
        return out


def _meminfo_gib(text: str) -> float:
    m = re.search(r"^MemTotal:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) / 2**20 if m else 0.0


def _thp(text: str) -> str:
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else "unknown"


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD", "KMP_AFFINITY",
            "GOMP_CPU_AFFINITY", "MALLOC_CONF", "GLOO_SOCKET_IFNAME")


def gather() -> NodeFacts:
    """Read this node (imports torch, if it is installed)."""
    packages = {}
    for pkg in ("torch", "transformers", "datasets", "accelerate", "cpuft"):
        try:
            packages[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            packages[pkg] = ""
    facts = NodeFacts(
        topology=read_topology(),
        memory_gib=_meminfo_gib(_read("/proc/meminfo")),
        transparent_hugepages=_thp(_read("/sys/kernel/mm/transparent_hugepage/enabled")),
        python=platform.python_version(),
        packages=packages,
        allocators={n: p for n in ALLOCATOR_LIBS if (p := find_allocator(n) or "")},
        env={k: os.environ[k] for k in ENV_VARS if k in os.environ},
        c_compiler=find_compiler(),
    )
    if packages["torch"]:
        import torch
        import torch.distributed as dist

        config = torch.__config__.show()
        m = re.search(r"MKL-DNN v([\d.]+)", config)
        facts.onednn = m.group(1) if m else ""
        facts.openmp = "GNU libgomp" if "libgomp" in _read("/proc/self/maps") else (
            "Intel libiomp5" if "libiomp5" in _read("/proc/self/maps") else "unknown")
        facts.backends = {
            "gloo": dist.is_available() and dist.is_gloo_available(),
            "mpi": dist.is_available() and dist.is_mpi_available(),
            "ccl": importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None,
        }
        if facts.topology.isa.native_bf16:
            from cpuft.speedplan.probe import bf16_matmul_speedup

            facts.bf16_matmul_speedup = bf16_matmul_speedup()
    return facts
