"""The speed-ups of one run and why: a frozen record of decisions.

``make_plan`` decides, before torch loads, what the settings and the machine decide alone for
the process: precision, threads, cores, allocator, compile, the optimizer step and batching.
The speed-ups that patch a model decide for themselves (``cpuft.speedups.registry``); the plan
holds their decisions by name in ``speedups``. Two choices wait for a measurement: the
precision where the CPU has native bf16 (``precision`` is None until
``cpuft.speedplan.resolve.settle_precision``), and ``--compile auto`` (``compile`` is None until
``cpuft.speedplan.resolve.settle_compile`` knows the run's length). Each step returns a new plan;
none changes one in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from types import MappingProxyType
from typing import Any

from cpuft.config import TrainConfig
from cpuft.errors import CpuftError
from cpuft.speedplan.allocator import choose_allocator
from cpuft.speedplan.choices import choose_compile, choose_precision, choose_threads
from cpuft.topology import Topology


@dataclass(frozen=True)
class Decision:
    """One speed-up's decision: on or off (or the variant chosen), and why."""

    value: bool | str
    reason: str

    @property
    def on(self) -> bool:
        return self.value is not False


@dataclass(kw_only=True, frozen=True)
class SpeedPlan:
    """The speed-ups chosen for one run, each with the reason, as recorded in summary.json."""

    cpu: str = "unknown"
    """The CPU's model name."""
    precision: str | None
    """'bf16' or 'fp32'; None until a matmul measurement decides."""
    precision_reason: str
    threads: int
    """Intra-op threads per process (physical cores, unless overridden)."""
    threads_reason: str = ""
    """What bound them: the affinity mask, the cgroup's CPU quota, a launched rank's share."""
    cores: list[int] = field(default_factory=list)
    """Logical CPUs the process pins itself to; empty means no pinning."""
    comm_cores: list[int] = field(default_factory=list)
    """Logical CPUs for the process group's communication threads (``--comm-cores``)."""
    allocator: str = "system"
    """'tcmalloc', 'jemalloc' or 'system'."""
    allocator_path: str = ""
    allocator_reason: str = ""
    fused_optimizer: bool = True
    fused_optimizer_reason: str = ""
    dynamic_padding: bool = True
    group_by_length: bool = True
    compile: str | None = "off"
    """'on' or 'off'; None until the run's length is known."""
    compile_reason: str = ""
    speedups: Mapping[str, Decision] = field(default_factory=lambda: MappingProxyType({}))
    """The decision of each speed-up that patches a model, by name (``cpuft.speedups``)."""

    @property
    def settled(self) -> bool:
        return self.precision is not None and self.compile is not None

    @property
    def bf16(self) -> bool:
        return self.precision == "bf16"

    def replaced(self, **changes: Any) -> SpeedPlan:
        """A copy with ``changes``: how every later step records what it found."""
        if "speedups" in changes:
            changes["speedups"] = MappingProxyType(dict(changes["speedups"]))
        return replace(self, **changes)

    def on(self, speedup: str) -> bool:
        """Whether the speed-up named ``speedup`` is on (False where none was decided)."""
        decision = self.speedups.get(speedup)
        return decision is not None and decision.on

    def deciding(self, speedup: str, value: bool | str, reason: str) -> SpeedPlan:
        """A copy with one speed-up's decision changed."""
        return self.replaced(speedups={**self.speedups, speedup: Decision(value, reason)})

    def to_dict(self) -> dict[str, object]:
        """summary.json's ``speedups``: each field, then each speed-up's value and reason."""
        if not self.settled:
            raise CpuftError("internal: the speed plan was recorded before it was settled")
        out = asdict(replace(self, speedups={}))
        del out["speedups"]
        for name, d in self.speedups.items():
            out |= {name: d.value, f"{name}_reason": d.reason}
        return out


def make_plan(cfg: TrainConfig, topo: Topology) -> SpeedPlan:
    """The speed-ups for a run of ``cfg`` on this machine, each with its reason."""
    s = cfg.speedups
    precision, precision_reason = choose_precision(s.precision, topo)
    allocator, allocator_path, allocator_reason = choose_allocator(s.allocator)
    threads, cores = choose_threads(s.threads, topo)
    compile_mode: str | None
    if s.compile == "auto":
        compile_mode, compile_reason = None, "decided when the run's length is known"
    else:
        compile_mode, compile_reason = choose_compile(
            s.compile, estimated_eager_seconds=None, measured_speedup=None, compile_seconds=None
        )
    return SpeedPlan(
        cpu=topo.model_name,
        precision=precision,
        precision_reason=precision_reason,
        threads=threads,
        threads_reason="requested" if s.threads else f"one a core: {topo.cpu_bound}",
        cores=cores if s.pin_cores else [],
        allocator=allocator,
        allocator_path=allocator_path,
        allocator_reason=allocator_reason,
        fused_optimizer=s.fused_optimizer,
        fused_optimizer_reason="on by default" if s.fused_optimizer else "requested",
        dynamic_padding=s.dynamic_padding,
        group_by_length=s.group_by_length,
        compile=compile_mode,
        compile_reason=compile_reason,
    )
