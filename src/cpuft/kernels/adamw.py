"""adamw_bf16.c on torch tensors: AdamW for bf16 weights with fp32 masters, in one pass, and
AdamW for a table from the rows of its gradient that are not zero."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from cpuft.kernels.build import load_kernel
from cpuft.kernels.signature import Kernel

_PTRS = ctypes.c_void_p


def _readable(t: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the kernel can read ``t`` as an array of ``dtype``."""
    return t.dtype == dtype and t.is_contiguous() and t.is_cpu


def _pointers(tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> ctypes.Array[_PTRS]:
    for t in tensors:
        if not _readable(t, dtype):
            raise ValueError(f"expected contiguous CPU {dtype} tensors, got {t.dtype} "
                             f"{'contiguous' if t.is_contiguous() else 'strided'} on {t.device}")
    return (_PTRS * len(tensors))(*[t.data_ptr() for t in tensors])


def _array(t: torch.Tensor, dtype: torch.dtype, ctype: Any) -> Any:
    """``t``'s memory as a C array of ``ctype``."""
    _pointers([t], dtype)  # checks that the kernel can read it
    return ctypes.cast(t.data_ptr(), ctypes.POINTER(ctype))


def _floats(values: Sequence[float]) -> ctypes.Array[ctypes.c_float]:
    return (ctypes.c_float * len(values))(*values)


@dataclass(frozen=True)
class Prepared:
    """The tensors a step updates (masters, moments, bf16 weights), checked and their addresses
    read once: steps of a model of many small tensors (MobileBERT's 1100) spent as long
    reading them in Python as the kernel spent updating. It holds the tensors, and holds as
    long as none of them is given other storage (``.data =``)."""

    tensors: tuple[Sequence[torch.Tensor], ...]
    sizes: Sequence[int]
    masters: ctypes.Array[_PTRS]
    exp_avgs: ctypes.Array[_PTRS]
    exp_avg_sqs: ctypes.Array[_PTRS]
    weights: ctypes.Array[_PTRS]
    numels: ctypes.Array[ctypes.c_int64]


def bf16_addresses(grads: Sequence[torch.Tensor | None], sizes: Sequence[int]
                   ) -> list[int] | None:
    """The addresses of ``grads`` where each is a contiguous CPU bf16 tensor of its size in
    ``sizes``; None where one is not (or is missing)."""
    found = []
    for g, size in zip(grads, sizes, strict=True):
        if g is None or not _readable(g, torch.bfloat16) or g.numel() != size:
            return None
        found.append(g.data_ptr())
    return found


def address_array(found: Sequence[int]) -> ctypes.Array[_PTRS]:
    return (_PTRS * len(found))(*found)


def size_array(sizes: Sequence[int]) -> ctypes.Array[ctypes.c_int64]:
    return (ctypes.c_int64 * len(sizes))(*sizes)


class AdamWBf16:
    """The two functions of adamw_bf16.c, bound from their C prototypes."""

    def __init__(self, sum_squares: Kernel, step: Kernel) -> None:
        self._sum_squares, self._step = sum_squares, step

    def sum_squares(self, grads: Sequence[torch.Tensor]) -> float:
        """The sum of the squares of every element of the bf16 ``grads``, in double."""
        if not grads:
            return 0.0
        return self.sum_squares_at(_pointers(grads, torch.bfloat16),
                                   size_array([g.numel() for g in grads]))

    def sum_squares_at(self, grads: ctypes.Array[_PTRS],
                       sizes: ctypes.Array[ctypes.c_int64]) -> float:
        """``sum_squares`` of bf16 gradients given by their addresses and sizes."""
        return float(self._sum_squares(n=len(grads), grads=grads, sizes=sizes)) \
            if len(grads) else 0.0

    def prepare(self, masters: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
                exp_avg_sqs: Sequence[torch.Tensor], weights: Sequence[torch.Tensor]
                ) -> Prepared:
        """The arrays of the tensors a step updates, for ``step(prepared=...)``."""
        n = len(masters)
        if not (len(exp_avgs) == len(exp_avg_sqs) == len(weights) == n):
            raise ValueError("masters, moments and weights differ in number")
        sizes = [m.numel() for m in masters]
        for size, w in zip(sizes, weights, strict=True):
            if size != w.numel():
                raise ValueError(f"sizes differ: master {size}, weight {w.numel()}")
        return Prepared(tensors=(masters, exp_avgs, exp_avg_sqs, weights), sizes=sizes,
                        masters=_pointers(masters, torch.float32),
                        exp_avgs=_pointers(exp_avgs, torch.float32),
                        exp_avg_sqs=_pointers(exp_avg_sqs, torch.float32),
                        weights=_pointers(weights, torch.bfloat16),
                        numels=size_array(sizes))

    def step(self, *, grads: Sequence[torch.Tensor], masters: Sequence[torch.Tensor] = (),
             exp_avgs: Sequence[torch.Tensor] = (), exp_avg_sqs: Sequence[torch.Tensor] = (),
             weights: Sequence[torch.Tensor] = (), prepared: Prepared | None = None,
             decay: Sequence[float], step_size: Sequence[float], bc2_sqrt: Sequence[float],
             beta1: float, beta2: float, eps: float, grad_divisor: float) -> None:
        """torch's AdamW on the fp32 ``masters`` (and their moments), from ``grads`` (bf16 or
        fp32) divided by ``grad_divisor``; each updated master is rounded into its bf16 weight.
        The four lists may come ``prepared`` instead, from ``prepare``.
        Per tensor: decay = 1 - lr * weight_decay, step_size = lr / (1 - beta1^step),
        bc2_sqrt = sqrt(1 - beta2^step)."""
        if prepared is None:
            prepared = self.prepare(masters, exp_avgs, exp_avg_sqs, weights)
        n = len(prepared.sizes)
        if not n:
            return
        if len(grads) != n:
            raise ValueError("grads, masters, moments and weights differ in number")
        for g, size in zip(grads, prepared.sizes, strict=True):
            if g.numel() != size:
                raise ValueError(f"sizes differ: gradient {g.numel()}, master {size}")
        low = grads[0].dtype == torch.bfloat16
        self.step_at(_pointers(grads, torch.bfloat16 if low else torch.float32), low,
                     prepared=prepared, decay=decay, step_size=step_size, bc2_sqrt=bc2_sqrt,
                     beta1=beta1, beta2=beta2, eps=eps, grad_divisor=grad_divisor)

    def step_at(self, grads: ctypes.Array[_PTRS], low: bool, *, prepared: Prepared,
                decay: Sequence[float], step_size: Sequence[float], bc2_sqrt: Sequence[float],
                beta1: float, beta2: float, eps: float, grad_divisor: float) -> None:
        """``step`` with the gradients given by their addresses (bf16 where ``low``, else
        fp32), one a tensor of ``prepared`` and of its size."""
        n = len(prepared.sizes)
        if len(grads) != n:
            raise ValueError("grads, masters, moments and weights differ in number")
        self._step(n=n, grads16=grads if low else None, grads32=None if low else grads,
                   masters=prepared.masters, exp_avgs=prepared.exp_avgs,
                   exp_avg_sqs=prepared.exp_avg_sqs, weights=prepared.weights,
                   sizes=prepared.numels,
                   decay=_floats(decay), step_size=_floats(step_size), bc2_sqrt=_floats(bc2_sqrt),
                   one_minus_beta1=1.0 - beta1, beta2=beta2, one_minus_beta2=1.0 - beta2, eps=eps,
                   grad_divisor=grad_divisor)


@functools.cache
def adamw_bf16() -> tuple[AdamWBf16 | None, str]:
    """The kernel, or None and why it is not there."""
    sum_squares, note = load_kernel("adamw_bf16", "cpuft_bf16_sum_squares")
    step, note = load_kernel("adamw_bf16", "cpuft_adamw_bf16") if sum_squares else (None, note)
    if sum_squares is None or step is None:
        return None, note
    return AdamWBf16(sum_squares, step), note


class AdamWRows:
    """cpuft_adamw_rows of adamw_bf16.c: torch's dense AdamW step on a 2-d fp32 table whose
    gradient is given as its rows that are not all zero."""

    def __init__(self, step: Kernel) -> None:
        self._step = step

    def step(self, table: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
             rows: torch.Tensor, values: torch.Tensor, *, decay: float, step_size: float,
             bc2_sqrt: float, beta1: float, beta2: float, eps: float,
             grad_divisor: float) -> None:
        """Update ``table`` and its moments in place; the gradient is ``values[j]`` at row
        ``rows[j]`` (sorted, distinct, as a coalesced sparse tensor has them), zero elsewhere.
        Terms as in ``AdamWBf16.step``."""
        if table.ndim != 2 or values.ndim != 2 or values.shape[1] != table.shape[1] \
                or rows.shape != (values.shape[0],):
            raise ValueError(f"rows {tuple(rows.shape)} and values {tuple(values.shape)} do not "
                             f"fit a table of {tuple(table.shape)}")
        for t in (table, exp_avg, exp_avg_sq):
            if t.shape != table.shape:
                raise ValueError("the table and its moments differ in shape")
        if len(rows) and (int(rows[0]) < 0 or int(rows[-1]) >= table.shape[0]
                          or bool((rows[1:] <= rows[:-1]).any())):
            raise ValueError("rows must be distinct, sorted and inside the table")
        floats = functools.partial(_array, dtype=torch.float32, ctype=ctypes.c_float)
        self._step(table=floats(table), exp_avg=floats(exp_avg), exp_avg_sq=floats(exp_avg_sq),
                   n_rows=table.shape[0], width=table.shape[1],
                   used=_array(rows, torch.int64, ctypes.c_int64), values=floats(values),
                   n_used=len(rows),
                   decay=decay, step_size=step_size, bc2_sqrt=bc2_sqrt,
                   one_minus_beta1=1.0 - beta1, beta2=beta2, one_minus_beta2=1.0 - beta2,
                   eps=eps, grad_divisor=grad_divisor)


@functools.cache
def adamw_rows() -> tuple[AdamWRows | None, str]:
    """The row kernel, or None and why it is not there."""
    step, note = load_kernel("adamw_bf16", "cpuft_adamw_rows")
    return (AdamWRows(step) if step is not None else None), note
