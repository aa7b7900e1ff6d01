"""Dropout several times cheaper than torch's on CPU (figures: docs/speedups.md).

torch draws a CPU dropout mask one element at a time from a single-threaded Mersenne Twister;
at fine-tuning sizes that was a fifth of a MiniLM training step. Here each 64-bit word of a
SplitMix64 stream is cut into four 16-bit draws, and the mask is written already scaled, in the
activations' dtype, in one pass. The keep probability is quantised to 1/65536 (p=0.1 drops
6554/65536 = 0.100006). Each mask's stream is seeded by one draw from torch's global generator,
so seeding and checkpointed RNG state still make runs repeatable.

Where cpuft's kernels build (a C compiler, see cpuft.kernels.build), cpuft/kernels/dropout_mask.c
writes the mask on torch's threads; elsewhere numpy computes the same SplitMix64 stream, so a
seed gives the same mask either way.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from torch import nn

from cpuft.kernels.signature import Kernel
from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.registry import PatchContext, SpeedUp, register
from cpuft.speedups.swap import replace_children

# SplitMix64 (Steele, Lea and Flood): word w of a stream is mix(seed + (w + 1) * GOLDEN).
# The same constants are in cpuft/kernels/dropout_mask.c; a test holds the two paths equal.
GOLDEN = 0x9E3779B97F4A7C15
MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def _seed() -> int:
    """One draw from torch's generator: what makes masks follow torch.manual_seed."""
    return int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64))


def _keep_from(p: float) -> int:
    """Draws (uniform over 0..65535) at or above it are kept: 65536 * (1 - p) of the values."""
    return round(p * 65536)


def splitmix_draws(n: int, seed: int) -> np.ndarray:
    """The first n 16-bit draws (uint16) of the SplitMix64 stream from ``seed``: each word's
    four 16-bit parts, lowest first, as the C kernel reads them."""
    w = np.arange(1, -(-n // 4) + 1, dtype=np.uint64)
    z = np.uint64(seed) + w * np.uint64(GOLDEN)  # wraps modulo 2**64, as in C
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX[0])
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX[1])
    z ^= z >> np.uint64(31)
    return z.astype("<u8", copy=False).view("<u2")[:n]


@functools.cache
def _mask_kernel() -> Kernel | None:
    from cpuft.kernels.build import load_kernel

    return load_kernel("dropout_mask", "cpuft_dropout_mask")[0]


def _kernel_mask(shape: torch.Size, p: float, dtype: torch.dtype, bits: int,
                 seed: int) -> torch.Tensor | None:
    """The mask of ``dtype`` holding ``bits`` where kept, from the C kernel; None without it."""
    kernel = _mask_kernel()
    if kernel is None or dtype.itemsize not in (2, 4, 8):
        return None
    out = torch.empty(shape, dtype=dtype)
    kernel(n=out.numel(), width=dtype.itemsize, seed=seed, keep_from=_keep_from(p),
           scale=bits & ((1 << (8 * dtype.itemsize)) - 1), out=out.data_ptr())
    return out


def _keep_flags(n: int, p: float, seed: int) -> np.ndarray:
    """n booleans, each True with probability 1 - p (to 1/65536)."""
    return np.greater_equal(splitmix_draws(n, seed), _keep_from(p))


def keep_mask(shape: torch.Size, p: float) -> torch.Tensor:
    """A boolean mask that is True with probability 1 - p (to 1/65536)."""
    seed = _seed()
    ones = _kernel_mask(shape, p, torch.int16, 1, seed)
    if ones is not None:
        return ones.bool()
    return torch.from_numpy(_keep_flags(shape.numel(), p, seed)).view(shape)


_SAME_WIDTH: dict[int, tuple[type[np.signedinteger[Any]], torch.dtype]] = {
    2: (np.int16, torch.int16), 4: (np.int32, torch.int32), 8: (np.int64, torch.int64)}


@functools.cache
def _scale_bits(p: float, dtype: torch.dtype) -> np.signedinteger[Any]:
    """1/(1-p) in ``dtype``, as the integer of the same width with the same bits."""
    np_int, torch_int = _SAME_WIDTH[torch.empty((), dtype=dtype).element_size()]
    return np_int(torch.tensor(1.0 / (1.0 - p), dtype=dtype).view(torch_int).item())


# Under torch.compile the mask is made eagerly (a graph break): dynamo cannot trace the kernel
# call nor numpy's bit-pattern multiply.
@torch.compiler.disable
def scaled_keep_mask(shape: torch.Size, p: float, dtype: torch.dtype) -> torch.Tensor:
    """A ``dtype`` mask of 0 and 1/(1-p), kept with probability 1 - p: ``keep_mask`` with the
    same draws, scaled. Made as bit patterns: 0 is all zero bits, so the mask is the keep flags
    times the bits of 1/(1-p)."""
    bits, seed = _scale_bits(p, dtype), _seed()
    made = _kernel_mask(shape, p, dtype, int(bits), seed)
    if made is not None:
        return made
    keep = _keep_flags(shape.numel(), p, seed)
    return torch.from_numpy(np.multiply(keep, bits, dtype=type(bits))).view(dtype).view(shape)


class _ScaledMask(torch.autograd.Function):
    """x * mask, the mask already in x's dtype and scaled by 1/(1-p): one pass forward and one
    backward, where ``x * bool_mask * scale`` converts the mask and scales in separate passes
    both ways."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float) -> torch.Tensor:
        mask = scaled_keep_mask(x.shape, p, x.dtype)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (mask,) = ctx.saved_tensors
        return grad * mask, None


def fast_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if p >= 1.0:
        return x * 0.0
    return _ScaledMask.apply(x, p)


class FastDropout(nn.Dropout):
    """``nn.Dropout`` with the cheaper mask; same ``p``, same train/eval behaviour."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_dropout(x, self.p, self.training)


def swap_dropout(model: nn.Module) -> int:
    """Replace every ``nn.Dropout`` with p > 0 in place; returns how many were replaced."""
    return replace_children(model, lambda child: FastDropout(child.p, inplace=False)
                            if type(child) is nn.Dropout and child.p > 0 else None)


class FastDropoutSpeedUp(SpeedUp):
    name = "fast_dropout"

    def apply(self, model: nn.Module, decision: Decision, ctx: PatchContext) -> Decision:
        count = swap_dropout(model)
        if not count:
            return Decision(False, "the model has no nn.Dropout layer with p > 0")
        return Decision(True, f"{decision.reason}: {count} nn.Dropout layer(s) replaced")


register(FastDropoutSpeedUp())
