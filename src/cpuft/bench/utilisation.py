"""The FLOP figures' denominators and the one nominal count (docs/benchmarking.md).

- theoretical peak: cores x clock x FLOPs a core can issue a cycle for the ISA and number
  format, from /proc/cpuinfo and the CPU's documented units; it never moves with a run;
- measured peak: the best matmul rate the bench timed (a large square and the model's own
  shapes, on the run's threads); a run's rate is never put in its place, and a run faster than
  it is reported in words as a probe that read low;
- nominal FLOPs: the stock model's usual count, the same for every configuration.

Torch-free: the runner and the report use it on the workers' results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FP32_PER_CYCLE = {"avx512": 64, "avx512_zen": 32, "avx2": 32}
"""fp32 FLOPs a core issues a cycle: two 512-bit FMA units (Xeon Scalable since Skylake-SP's
Gold and Platinum), Zen 4's 512-bit FMAs run as two 256-bit halves, two 256-bit FMA units."""
AMX_BF16_PER_CYCLE = 1024
"""bf16 FLOPs of one core's AMX tile unit a cycle (Intel's figure for Sapphire Rapids)."""


@dataclass(frozen=True)
class Peak:
    gflops: float
    basis: str
    """How the figure was made, in words."""


def clock_ghz(cpuinfo: str, max_freq_khz: str = "") -> tuple[float, str]:
    """The cores' clock and where it was read: the kernel's maximum frequency, else the rated
    clock in the model name, else the highest ``cpu MHz`` (0 where none says)."""
    if max_freq_khz.strip().isdigit():
        return int(max_freq_khz) / 1e6, "cpufreq's cpuinfo_max_freq"
    rated = re.search(r"@\s*([\d.]+)\s*GHz", cpuinfo)
    if rated:
        return float(rated.group(1)), "the model name's rated clock"
    mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo, re.M)]
    return (max(mhz) / 1e3, "cpu MHz in /proc/cpuinfo") if mhz else (0.0, "")


def read_clock_ghz() -> tuple[float, str]:
    def text(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:
            return ""

    return clock_ghz(text("/proc/cpuinfo"),
                     text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))


def theoretical_peaks(isa_class: str, model_name: str, cores: int, ghz: float,
                      clock_source: str) -> dict[str, Peak]:
    """Per number format, the peak of ``cores`` cores at ``ghz`` for the ISA class (amx,
    avx512_bf16, avx512 or avx2); none where the clock is not known."""
    if ghz <= 0 or cores <= 0:
        return {}
    amd = any(word in model_name for word in ("AMD", "EPYC", "Ryzen"))
    wide = isa_class != "avx2"
    fp32_key = ("avx512_zen" if amd else "avx512") if wide else "avx2"
    fp32 = FP32_PER_CYCLE[fp32_key]
    fp32_units = {"avx512": "two 512-bit FMA units", "avx512_zen": "512-bit FMAs as 256-bit halves",
                  "avx2": "two 256-bit FMA units"}[fp32_key]
    if isa_class == "amx":
        bf16, bf16_units = AMX_BF16_PER_CYCLE, "AMX tiles"
    elif isa_class == "avx512_bf16":
        bf16, bf16_units = 2 * fp32, "AVX512_BF16 dot products"
    else:
        bf16, bf16_units = fp32, "no native bf16: fp32's units"
    where = f"{cores} cores x {ghz:.2f} GHz ({clock_source})"
    return {"fp32": Peak(cores * ghz * fp32, f"{where} x {fp32} fp32 FLOPs a cycle "
                                             f"({fp32_units})"),
            "bf16": Peak(cores * ghz * bf16, f"{where} x {bf16} bf16 FLOPs a cycle "
                                             f"({bf16_units})")}


def nominal_flops(weight_uses: float, attention_coefficient: float, tokens: float) -> float:
    """Training FLOPs of a sample of ``tokens`` real tokens: 6 x weight uses x tokens, plus
    attention's coefficient (12 x layers x width) x tokens^2."""
    return 6 * weight_uses * tokens + attention_coefficient * tokens**2
