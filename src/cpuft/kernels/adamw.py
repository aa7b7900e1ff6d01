"""adamw_bf16.c on torch tensors: AdamW for bf16 weights with fp32 masters, in one pass."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

import torch

from cpuft.kernels.build import load

_PTRS = ctypes.c_void_p


def _pointers(tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> ctypes.Array[_PTRS]:
    for t in tensors:
        if t.dtype != dtype or not t.is_contiguous() or t.device.type != "cpu":
            raise ValueError(f"expected contiguous CPU {dtype} tensors, got {t.dtype} "
                             f"{'contiguous' if t.is_contiguous() else 'strided'} on {t.device}")
    return (_PTRS * len(tensors))(*[t.data_ptr() for t in tensors])


def _floats(values: Sequence[float]) -> ctypes.Array[ctypes.c_float]:
    return (ctypes.c_float * len(values))(*values)


class AdamWBf16:
    """The kernels of one loaded library."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._sum_squares = lib.cpuft_bf16_sum_squares
        self._sum_squares.restype = ctypes.c_double
        self._sum_squares.argtypes = [ctypes.c_int, ctypes.POINTER(_PTRS),
                                      ctypes.POINTER(ctypes.c_int64)]
        self._step = lib.cpuft_adamw_bf16
        self._step.restype = None
        floats = ctypes.POINTER(ctypes.c_float)
        self._step.argtypes = [ctypes.c_int, *[ctypes.POINTER(_PTRS)] * 6,
                               ctypes.POINTER(ctypes.c_int64), floats, floats, floats,
                               *[ctypes.c_float] * 5]

    def sum_squares(self, grads: Sequence[torch.Tensor]) -> float:
        """The sum of the squares of every element of the bf16 ``grads``, in double."""
        if not grads:
            return 0.0
        sizes = (ctypes.c_int64 * len(grads))(*[g.numel() for g in grads])
        return float(self._sum_squares(len(grads), _pointers(grads, torch.bfloat16), sizes))

    def step(self, *, grads: Sequence[torch.Tensor], masters: Sequence[torch.Tensor],
             exp_avgs: Sequence[torch.Tensor], exp_avg_sqs: Sequence[torch.Tensor],
             weights: Sequence[torch.Tensor], decay: Sequence[float],
             step_size: Sequence[float], bc2_sqrt: Sequence[float], beta1: float, beta2: float,
             eps: float, grad_divisor: float) -> None:
        """torch's AdamW on the fp32 ``masters`` (and their moments), from ``grads`` (bf16 or
        fp32) divided by ``grad_divisor``; each updated master is rounded into its bf16 weight.
        Per tensor: decay = 1 - lr * weight_decay, step_size = lr / (1 - beta1^step),
        bc2_sqrt = sqrt(1 - beta2^step)."""
        n = len(masters)
        if not n:
            return
        if not (len(grads) == len(exp_avgs) == len(exp_avg_sqs) == len(weights) == n):
            raise ValueError("grads, masters, moments and weights differ in number")
        for g, m, w in zip(grads, masters, weights, strict=True):
            if not g.numel() == m.numel() == w.numel():
                raise ValueError(f"sizes differ: gradient {g.numel()}, master {m.numel()}, "
                                 f"weight {w.numel()}")
        low = grads[0].dtype == torch.bfloat16
        grad_ptrs = _pointers(grads, torch.bfloat16 if low else torch.float32)
        self._step(n, grad_ptrs if low else None, None if low else grad_ptrs,
                   _pointers(masters, torch.float32), _pointers(exp_avgs, torch.float32),
                   _pointers(exp_avg_sqs, torch.float32), _pointers(weights, torch.bfloat16),
                   (ctypes.c_int64 * n)(*[m.numel() for m in masters]), _floats(decay),
                   _floats(step_size), _floats(bc2_sqrt), 1.0 - beta1, beta2, 1.0 - beta2, eps,
                   grad_divisor)


@functools.cache
def adamw_bf16() -> tuple[AdamWBf16 | None, str]:
    """The kernel, or None and why it is not there."""
    lib, note = load("adamw_bf16")
    return (AdamWBf16(lib) if lib is not None else None), note
