"""Which CPU speed-ups a run gets, and why: pure decisions from the machine and the options.

No torch here: the plan is made (and can be printed by ``cpuft doctor``) before torch loads.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cpuft.config import TrainConfig
from cpuft.errors import CpuftError
from cpuft.topology import Topology

ALLOCATOR_LIBS = {
    "tcmalloc": ("libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc.so"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
}
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)
# jemalloc's defaults return memory to the OS too eagerly for training loops.
JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:-1"


@dataclass(kw_only=True, slots=True)
class SpeedPlan:
    """The speed-ups chosen for one run, each with the reason, as recorded in summary.json."""

    cpu: str = "unknown"
    """The CPU's model name."""
    precision: str
    """'bf16' or 'fp32'; 'auto' until a matmul measurement decides (see choose_precision)."""
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
    dynamic_padding: bool = True
    group_by_length: bool = True
    compile: str = "off"
    """'on', 'off', or 'auto' until the run's length is known (see choose_compile)."""
    compile_reason: str = ""
    attention: str = "default"
    """'cpuft_eager', 'eager', 'sdpa' or 'default' (what the model picks)."""
    attention_reason: str = ""
    fast_dropout: bool = True
    """Dropout masks drawn 64 bits per generator call (see cpuft.train.fast_dropout)."""
    sparse_embeddings: bool = True
    """Word-embedding gradients as sparse rows with lazy AdamW updates (see cpuft.optim)."""
    sparse_embeddings_reason: str = ""
    first_token_layer: bool = True
    """The last layer computed for the first token only (see cpuft.train.first_token)."""
    first_token_layer_reason: str = ""
    bf16_weights: bool = True
    """With bf16: weights held in bf16, fp32 masters in the optimizer (cpuft.train.bf16_weights)."""
    bf16_weights_reason: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


# bf16 autocast adds casts and keeps fp32 master weights, so its matmuls must be clearly faster
# than fp32 ones before a training step gains. Measured on 2-core VMs: on Zen 4, bf16 matmul
# 2.4x fp32 and a bert-base step 1.5x; on a Xeon with avx512_bf16 but no AMX, bf16 matmul
# 0.5-0.66x fp32 and a MiniLM step 0.75x.
BF16_MIN_SPEEDUP = 1.3


def choose_precision(requested: str, topo: Topology) -> tuple[str, str]:
    """bf16 only where the ISA does bf16 math natively; fp32 otherwise, with the reason.

    Native bf16 alone does not make it faster (avx512_bf16 without AMX can lose to AVX-512
    fp32), so with native bf16 the answer is 'auto' until a matmul measurement settles it
    (``precision_from_speedup``).
    """
    if requested == "fp32":
        return "fp32", "requested"
    if requested == "bf16":
        if topo.isa.native_bf16:
            return "bf16", "requested; CPU has native bf16"
        return "bf16", "requested, but this CPU has no native bf16: expect it slower than fp32"
    if requested != "auto":
        raise CpuftError(f"unknown precision {requested!r}: use auto, bf16 or fp32")
    if topo.isa.native_bf16:
        kind = "AMX bf16 tiles" if topo.isa.amx else "avx512_bf16"
        return "auto", f"auto: CPU has {kind}; bf16 if its matmuls measure faster than fp32"
    return "fp32", "auto: CPU has no avx512_bf16 or AMX, so bf16 would be emulated and slower"


def precision_from_speedup(speedup: float) -> tuple[str, str]:
    """The precision for a CPU with native bf16, from its bf16 over fp32 matmul speed."""
    measured = f"bf16 matmul measured {speedup:.2f}x fp32 here"
    if speedup >= BF16_MIN_SPEEDUP:
        return "bf16", f"auto: {measured}"
    return "fp32", f"auto: {measured} (bf16 needs {BF16_MIN_SPEEDUP}x to pay)"


def find_allocator(name: str, lib_dirs: tuple[str, ...] = LIB_DIRS) -> str | None:
    """Path of an installed allocator library, or None."""
    for directory in lib_dirs:
        for lib in ALLOCATOR_LIBS[name]:
            path = Path(directory) / lib
            if path.exists():
                return str(path)
    return None


def choose_allocator(
    requested: str, lib_dirs: tuple[str, ...] = LIB_DIRS
) -> tuple[str, str, str]:
    """(allocator, library path, reason). 'auto' prefers tcmalloc, then jemalloc."""
    if requested == "system":
        return "system", "", "requested"
    if requested not in ("auto", *ALLOCATOR_LIBS):
        raise CpuftError(
            f"unknown allocator {requested!r}: use auto, tcmalloc, jemalloc or system"
        )
    candidates = list(ALLOCATOR_LIBS) if requested == "auto" else [requested]
    for name in candidates:
        path = find_allocator(name, lib_dirs)
        if path:
            return name, path, "found " + path
    if requested != "auto":
        raise CpuftError(
            f"allocator {requested} is not installed: apt-get install "
            + ("libgoogle-perftools4" if requested == "tcmalloc" else "libjemalloc2")
            + ", or pass --allocator system"
        )
    return "system", "", (
        "no tcmalloc or jemalloc found (apt-get install libgoogle-perftools4): "
        "running with the system allocator"
    )


def choose_threads(requested: int, topo: Topology) -> tuple[int, list[int]]:
    """Threads = physical cores this process may use, pinned one per core."""
    cores = topo.first_thread_per_core()
    if requested > 0:
        return requested, cores[:requested] if requested <= len(cores) else []
    return max(1, len(cores)), cores


def choose_compile(
    requested: str,
    *,  # the measurement comes from cpuft.compile_cache
    estimated_eager_seconds: float | None,
    measured_speedup: float | None,
    compile_seconds: float | None,
) -> tuple[str, str]:
    """Compile only when the time it saves over the run is more than the time it costs.

    ``measured_speedup`` and ``compile_seconds`` come from a measurement on this machine and model
    (``cpuft bench --compile-probe``); without one, 'auto' stays eager.
    """
    if requested in ("on", "off"):
        return requested, "requested"
    if requested != "auto":
        raise CpuftError(f"unknown compile mode {requested!r}: use auto, on or off")
    if measured_speedup is None or compile_seconds is None or estimated_eager_seconds is None:
        return "off", "auto: no compile measurement for this model on this machine"
    saved = estimated_eager_seconds * (1.0 - 1.0 / measured_speedup)
    if saved > compile_seconds:
        return "on", (
            f"auto: saves ~{saved:.0f}s of an estimated {estimated_eager_seconds:.0f}s run, "
            f"costs ~{compile_seconds:.0f}s to compile"
        )
    return "off", (
        f"auto: would save ~{max(saved, 0):.0f}s but costs ~{compile_seconds:.0f}s to compile"
    )


# Measured on a 2-core Sapphire Rapids VM, MiniLM-L6, bf16, batch 32: eager attention (matmuls)
# trains 1.25x (padded to 128) to 1.3x (dynamic, ~27 tokens) faster than torch's CPU flash
# attention, whose backward dominates at short lengths; at 256 tokens and beyond sdpa wins.
EAGER_ATTENTION_MAX_LENGTH = 192


def choose_attention(requested: str, max_seq_length: int, fast_dropout: bool) -> tuple[str, str]:
    if requested in ("eager", "sdpa"):
        return requested, "requested"
    if requested != "auto":
        raise CpuftError(f"unknown attention {requested!r}: use auto, eager or sdpa")
    if max_seq_length <= EAGER_ATTENTION_MAX_LENGTH:
        return "cpuft_eager" if fast_dropout else "eager", (
            f"auto: sequences of at most {max_seq_length} tokens train faster with matmul "
            "attention than with the CPU flash-attention kernel"
        )
    return "default", f"auto: at {max_seq_length} tokens the model's default (sdpa) is faster"


def allocator_env(plan: SpeedPlan, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables a process needs so that the plan's allocator is preloaded."""
    env: dict[str, str] = {}
    current = (environ if environ is not None else os.environ).get("LD_PRELOAD", "")
    if plan.allocator_path and plan.allocator_path not in current.split(":"):
        env["LD_PRELOAD"] = ":".join(p for p in (plan.allocator_path, current) if p)
    if plan.allocator == "jemalloc":
        env["MALLOC_CONF"] = JEMALLOC_CONF
    return env


def choose_bf16_weights(requested: bool, grad_compression: str) -> tuple[bool, str]:
    """bf16 weights (used only when the run is bf16), with the reason."""
    if not requested:
        return False, "requested"
    if grad_compression == "powersgd":
        return False, "off with --grad-compression powersgd: its QR needs fp32 gradients"
    return True, "on by default where the run is bf16: no weight or activation casts per use"


def make_plan(cfg: TrainConfig, topo: Topology) -> SpeedPlan:
    """The speed-ups for a ``cpuft train`` run on this machine, each with its reason."""
    precision, precision_reason = choose_precision(cfg.precision, topo)
    allocator, allocator_path, allocator_reason = choose_allocator(cfg.allocator)
    threads, cores = choose_threads(cfg.threads, topo)
    attention, attention_reason = choose_attention(
        cfg.attention, cfg.max_seq_length, cfg.fast_dropout
    )
    if cfg.compile == "auto":
        compile_mode, compile_reason = "auto", "decided when the run's length is known"
    else:
        compile_mode, compile_reason = choose_compile(
            cfg.compile, estimated_eager_seconds=None, measured_speedup=None, compile_seconds=None
        )
    bf16_weights, bf16_weights_reason = choose_bf16_weights(cfg.bf16_weights,
                                                            cfg.grad_compression)
    return SpeedPlan(
        cpu=topo.model_name,
        precision=precision,
        precision_reason=precision_reason,
        threads=threads,
        cores=cores if cfg.pin_cores else [],
        allocator=allocator,
        allocator_path=allocator_path,
        allocator_reason=allocator_reason,
        fused_optimizer=cfg.fused_optimizer,
        dynamic_padding=cfg.dynamic_padding,
        group_by_length=cfg.group_by_length,
        compile=compile_mode,
        compile_reason=compile_reason,
        attention=attention,
        attention_reason=attention_reason,
        fast_dropout=cfg.fast_dropout,
        sparse_embeddings=cfg.sparse_embeddings,
        sparse_embeddings_reason="on by default" if cfg.sparse_embeddings else "requested",
        first_token_layer=cfg.first_token_layer,
        first_token_layer_reason="on by default" if cfg.first_token_layer else "requested",
        bf16_weights=bf16_weights,
        bf16_weights_reason=bf16_weights_reason,
    )
