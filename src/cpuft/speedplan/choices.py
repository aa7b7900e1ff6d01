"""One decision each: the request, the machine's facts, and the answer with its reason.

Figures behind the thresholds are in docs/speedups.md. No torch here.
"""

from __future__ import annotations

from cpuft.errors import CpuftError
from cpuft.topology import Topology

# bf16 autocast adds casts and keeps fp32 master weights, so its matmuls must be clearly faster
# than fp32 ones before a training step gains (docs/speedups.md: precision).
BF16_MIN_SPEEDUP = 1.3
# Matmul attention trains faster than torch's CPU flash attention up to about this length
# (docs/speedups.md: attention).
EAGER_ATTENTION_MAX_LENGTH = 192
MATMUL_ATTENTION = "cpuft_eager"
"""The attention implementation cpuft registers with transformers (cpuft.speedups.attention)."""


def choose_precision(requested: str, topo: Topology) -> tuple[str | None, str]:
    """bf16 only where the ISA does bf16 math natively; fp32 otherwise, with the reason.

    Native bf16 alone does not make it faster (avx512_bf16 without AMX can lose to AVX-512
    fp32), so with native bf16 and 'auto' the answer is None: a matmul measurement settles it
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
        return None, f"auto: CPU has {kind}; bf16 if its matmuls measure faster than fp32"
    return "fp32", "auto: CPU has no avx512_bf16 or AMX, so bf16 would be emulated and slower"


def precision_from_speedup(speedup: float) -> tuple[str, str]:
    """The precision for a CPU with native bf16, from its bf16 over fp32 matmul speed."""
    measured = f"bf16 matmul measured {speedup:.2f}x fp32 here"
    if speedup >= BF16_MIN_SPEEDUP:
        return "bf16", f"auto: {measured}"
    return "fp32", f"auto: {measured} (bf16 needs {BF16_MIN_SPEEDUP}x to pay)"


def choose_threads(requested: int, topo: Topology) -> tuple[int, list[int]]:
    """Threads = physical cores this process may use, pinned one per core."""
    cores = topo.first_thread_per_core()
    if requested > 0:
        return requested, cores[:requested] if requested <= len(cores) else []
    return max(1, len(cores)), cores


def choose_compile(
    requested: str,
    *,  # the measurement comes from cpuft.speedplan.compile_cache
    estimated_eager_seconds: float | None,
    measured_speedup: float | None,
    compile_seconds: float | None,
) -> tuple[str, str]:
    """Compile only when the time it saves over the run is more than the time it costs.

    ``measured_speedup`` and ``compile_seconds`` come from a measurement on this machine and model
    (``cpuft bench --configs cpuft,cpuft-compile``); without one, 'auto' stays eager.
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


def choose_attention(requested: str, max_seq_length: int, fast_dropout: bool) -> tuple[str, str]:
    if requested in ("eager", "sdpa"):
        return requested, "requested"
    if requested != "auto":
        raise CpuftError(f"unknown attention {requested!r}: use auto, eager or sdpa")
    if max_seq_length <= EAGER_ATTENTION_MAX_LENGTH:
        return MATMUL_ATTENTION if fast_dropout else "eager", (
            f"auto: sequences of at most {max_seq_length} tokens train faster with matmul "
            "attention than with the CPU flash-attention kernel"
        )
    return "default", f"auto: at {max_seq_length} tokens the model's default (sdpa) is faster"


def choose_bf16_weights(requested: bool, grad_compression: str) -> tuple[bool, str]:
    """bf16 weights (used only when the run is bf16), with the reason."""
    if not requested:
        return False, "requested"
    if grad_compression == "powersgd":
        return False, "off with --grad-compression powersgd: its QR needs fp32 gradients"
    return True, "on by default where the run is bf16: no weight or activation casts per use"
