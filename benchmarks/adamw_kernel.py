"""The passes of cpuft's bf16 AdamW step over a bert-base-size encoder's weights (its 72
matrices, 85M parameters), timed alone: the gradient norm (``sum_squares``) and the step, each
against the bytes it moves.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 taskset -c 0,1 \\
        python benchmarks/adamw_kernel.py

Both passes are bound by memory: compare their GB/s with what the machine streams (the last
line, torch's ``add_`` over tensors as large).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from cpuft.kernels.adamw import adamw_bf16


def timed(step: Callable[[], object], repeats: int) -> float:
    """Seconds one call takes, the mean of ``repeats`` after three warm-up calls."""
    for _ in range(3):
        step()
    started = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - started) / repeats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    kernel, note = adamw_bf16()
    if kernel is None:
        raise SystemExit(f"no kernel: {note}")
    sizes = [768 * 768] * 48 + [768 * 3072] * 24
    total = sum(sizes)
    masters = [torch.randn(n) for n in sizes]
    moments = [torch.zeros(n) for n in sizes], [torch.zeros(n) for n in sizes]
    weights = [torch.empty(n, dtype=torch.bfloat16) for n in sizes]
    grads = [torch.randn(n).bfloat16() for n in sizes]
    prepared = kernel.prepare(masters, *moments, weights)
    n = len(sizes)

    def step() -> None:
        kernel.step(grads=grads, prepared=prepared, decay=[0.999] * n, step_size=[1e-3] * n,
                    bc2_sqrt=[0.03] * n, beta1=0.9, beta2=0.999, eps=1e-8, grad_divisor=1.5)

    print(f"{total / 1e6:.1f}M parameters, {torch.get_num_threads()} threads")
    seconds = timed(lambda: kernel.sum_squares(grads), args.repeats)
    print(f"sum_squares: {seconds * 1e3:.1f} ms, {total * 2 / seconds / 1e9:.1f} GB/s read")
    seconds = timed(step, args.repeats)
    print(f"step: {seconds * 1e3:.1f} ms, {total * 28 / seconds / 1e9:.1f} GB/s (28 B a weight)")
    a, b = torch.empty(3 * total), torch.empty(3 * total)
    seconds = timed(lambda: a.add_(b), args.repeats)
    print(f"torch add_: {seconds * 1e3:.1f} ms, {3 * total * 12 / seconds / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
