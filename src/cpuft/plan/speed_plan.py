"""The speed-ups of one run and why: a frozen record of decisions, made before torch loads.

``make_plan`` decides what the settings and the machine decide alone. Two choices wait for a
measurement: the precision where the CPU has native bf16 (``precision`` is None until
``cpuft.plan.resolve.settle_precision``), and ``--compile auto`` (``compile`` is None until
``cpuft.plan.resolve.settle_compile`` knows the run's length). Each step returns a new plan;
none changes one in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from cpuft.config import TrainConfig
from cpuft.errors import CpuftError
from cpuft.plan.allocator import choose_allocator
from cpuft.plan.choices import (
    choose_attention,
    choose_bf16_weights,
    choose_compile,
    choose_precision,
    choose_threads,
)
from cpuft.topology import Topology


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
    attention: str = "default"
    """'cpuft_eager', 'eager', 'sdpa' or 'default' (what the model picks)."""
    attention_reason: str = ""
    fast_dropout: bool = True
    """Dropout masks from cpuft.speedups.dropout."""
    sparse_embeddings: bool = True
    """Word-embedding gradients as sparse rows with lazy AdamW updates (cpuft.optim)."""
    sparse_embeddings_reason: str = ""
    first_token_layer: bool = True
    """The last layer computed for the first token only (cpuft.speedups.first_token)."""
    first_token_layer_reason: str = ""
    counted_logits: bool = True
    """A causal LM's head computed at counted positions only (cpuft.speedups.counted_logits)."""
    counted_logits_reason: str = ""
    channels_last: bool = True
    """Convolutional networks in the channels-last memory format (cpuft.api.layout)."""
    channels_last_reason: str = ""
    bf16_weights: bool = True
    """With bf16: weights held in bf16, fp32 masters in the optimizer (speedups.bf16_weights)."""
    bf16_weights_reason: str = ""

    @property
    def settled(self) -> bool:
        return self.precision is not None and self.compile is not None

    @property
    def bf16(self) -> bool:
        return self.precision == "bf16"

    def but(self, **changes: Any) -> SpeedPlan:
        """A copy with ``changes``: how every later step records what it found."""
        return replace(self, **changes)

    def without(self, reasons: Mapping[str, str]) -> SpeedPlan:
        """A copy with each speed-up named in ``reasons`` off, for its reason."""
        return self.but(**{name: False for name in reasons},
                        **{f"{name}_reason": why for name, why in reasons.items()})

    def to_dict(self) -> dict[str, object]:
        if not self.settled:
            raise CpuftError("internal: the speed plan was recorded before it was settled")
        return asdict(self)


def make_plan(cfg: TrainConfig, topo: Topology) -> SpeedPlan:
    """The speed-ups for a run of ``cfg`` on this machine, each with its reason."""
    s = cfg.speedups
    precision, precision_reason = choose_precision(s.precision, topo)
    allocator, allocator_path, allocator_reason = choose_allocator(s.allocator)
    threads, cores = choose_threads(s.threads, topo)
    attention, attention_reason = choose_attention(
        s.attention, cfg.data.max_seq_length, s.fast_dropout
    )
    compile_mode: str | None
    if s.compile == "auto":
        compile_mode, compile_reason = None, "decided when the run's length is known"
    else:
        compile_mode, compile_reason = choose_compile(
            s.compile, estimated_eager_seconds=None, measured_speedup=None, compile_seconds=None
        )
    bf16_weights, bf16_weights_reason = choose_bf16_weights(s.bf16_weights,
                                                            cfg.distributed.grad_compression)
    return SpeedPlan(
        cpu=topo.model_name,
        precision=precision,
        precision_reason=precision_reason,
        threads=threads,
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
        attention=attention,
        attention_reason=attention_reason,
        fast_dropout=s.fast_dropout,
        sparse_embeddings=s.sparse_embeddings,
        sparse_embeddings_reason="on by default" if s.sparse_embeddings else "requested",
        first_token_layer=s.first_token_layer,
        first_token_layer_reason="on by default" if s.first_token_layer else "requested",
        counted_logits=s.counted_logits,
        counted_logits_reason="on by default" if s.counted_logits else "requested",
        channels_last=s.channels_last,
        channels_last_reason="where it measures faster" if s.channels_last else "requested",
        bf16_weights=bf16_weights,
        bf16_weights_reason=bf16_weights_reason,
    )
