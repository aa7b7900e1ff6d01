"""Topology and ISA model, and parsers for the text the kernel and lscpu print."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from cpuft.errors import CpuftError


@dataclass(frozen=True, slots=True)
class LogicalCpu:
    """One logical CPU (a hardware thread) and where it sits."""

    cpu: int
    core: int
    socket: int
    node: int


@dataclass(frozen=True, slots=True)
class Isa:
    """The instruction-set features that decide which kernels and precisions pay."""

    avx512f: bool = False
    avx512_bf16: bool = False
    avx512_vnni: bool = False
    avx512_fp16: bool = False
    amx_bf16: bool = False
    amx_tile: bool = False

    @classmethod
    def from_flags(cls, flags: frozenset[str]) -> Isa:
        return cls(**{f.name: f.name in flags for f in fields(cls)})

    @property
    def native_bf16(self) -> bool:
        """bf16 math in hardware: AVX512-BF16 dot products or AMX tiles."""
        return self.avx512_bf16 or self.amx_bf16

    @property
    def amx(self) -> bool:
        return self.amx_bf16 and self.amx_tile

    def names(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]

    @property
    def class_name(self) -> str:
        """The class that decides training speed: amx, avx512_bf16, avx512 or avx2."""
        if self.amx:
            return "amx"
        if self.avx512_bf16:
            return "avx512_bf16"
        return "avx512" if self.avx512f else "avx2"


@dataclass(frozen=True, slots=True)
class Topology:
    """A machine's logical CPUs with their cores, sockets and NUMA nodes, and its ISA."""

    cpus: tuple[LogicalCpu, ...]
    isa: Isa
    model_name: str = "unknown"
    cpu_quota: float | None = None
    """CPUs' worth of time the process's cgroup allows (None: no quota)."""
    cores_allowed: int = 0
    """Physical cores the affinity mask allowed, where the quota left fewer (0 otherwise)."""

    @property
    def sockets(self) -> int:
        return len({c.socket for c in self.cpus})

    @property
    def numa_nodes(self) -> int:
        return len({c.node for c in self.cpus})

    @property
    def physical_cores(self) -> int:
        return len({(c.socket, c.core) for c in self.cpus})

    @property
    def threads_per_core(self) -> int:
        return max(1, len(self.cpus) // max(1, self.physical_cores))

    def within_quota(self, quota: float | None) -> Topology:
        """These CPUs as far as a CPU quota lets a process use them: the whole cores of the
        first ``floor(quota)`` physical cores (at least one), and the quota recorded."""
        cores = self.physical_cores
        if quota is None or int(quota) >= cores:
            return replace(self, cpu_quota=quota)
        kept = set(self.first_thread_per_core()[: max(1, int(quota))])
        keys = {(c.socket, c.core) for c in self.cpus if c.cpu in kept}
        return replace(self, cpus=tuple(c for c in self.cpus if (c.socket, c.core) in keys),
                       cpu_quota=quota, cores_allowed=cores)

    @property
    def cpu_bound(self) -> str:
        """What bounds the cores a process of this machine uses, in words."""
        if self.cores_allowed:
            return (f"the cgroup's CPU quota of {self.cpu_quota:g} CPUs, below the "
                    f"{self.cores_allowed} cores the affinity mask allows")
        quota = f" (the cgroup's quota of {self.cpu_quota:g} CPUs covers them)" \
            if self.cpu_quota is not None else ""
        return f"the {self.physical_cores} physical core(s) the affinity mask allows{quota}"

    def first_thread_per_core(self, node: int | None = None) -> list[int]:
        """One logical CPU per physical core (the lowest-numbered sibling), optionally on a node."""
        chosen: dict[tuple[int, int], int] = {}
        for c in sorted(self.cpus, key=lambda c: c.cpu):
            if node is not None and c.node != node:
                continue
            chosen.setdefault((c.socket, c.core), c.cpu)
        return sorted(chosen.values())


def parse_lscpu(text: str) -> list[LogicalCpu]:
    """Parse ``lscpu --parse=CPU,Core,Socket,Node`` output (comment lines start with '#').

    An empty Node field (machines without NUMA information) counts as node 0.
    """
    cpus = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 4:
            raise CpuftError(f"lscpu line {lineno}: expected CPU,Core,Socket,Node, got {line!r}")
        try:
            cpu, core, socket = (int(f) for f in fields[:3])
            node = int(fields[3]) if fields[3] else 0
        except ValueError:
            raise CpuftError(f"lscpu line {lineno}: not a number in {line!r}") from None
        cpus.append(LogicalCpu(cpu=cpu, core=core, socket=socket, node=node))
    return cpus


def parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """Model name and ISA flags of the first processor in ``/proc/cpuinfo`` text."""
    model_name = "unknown"
    flags: frozenset[str] = frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model_name == "unknown":
            model_name = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
        if model_name != "unknown" and flags:
            break
    return model_name, flags
