"""PowerSGD gradient compression (Vogels et al., 2019) as a DDP comm hook that runs in order.

torch's own ``powerSGD_hook`` chains its all-reduces in future callbacks, which gloo completes on
its own threads: with more than one bucket the ranks can issue them in different orders, and
gloo fails ("Received data size doesn't match expected size"). This hook does the same
arithmetic with blocking all-reduces, called by DDP bucket after bucket in the same order on
every rank. On CPU nodes, where the reduction shares the cores with the backward pass, blocking
costs little.

Each gradient matrix M (rows x cols) is sent as two rank-r factors, P = M Q and Q = M^T P, with
the part left out kept and added to the next step's gradient (error feedback). Vectors, and
matrices too small to gain, are all-reduced as they are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass(slots=True)
class PowerSGD:
    rank: int = 4
    """Rank of the approximation of each gradient matrix."""
    start_step: int = 10
    """Plain all-reduce before this step (at least 2: DDP rebuilds its buckets after step 1)."""
    step: int = 0
    seconds: float = 0.0
    """Time spent in the hook since last read (all of it waits on or feeds communication)."""
    errors: dict[int, torch.Tensor] = field(default_factory=dict)
    qs: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))

    def compresses(self, shape: torch.Size) -> bool:
        if len(shape) < 2:
            return False
        rows, cols = shape[0], shape.numel() // shape[0]
        return min(rows, cols) > self.rank and (rows + cols) * self.rank * 2 < rows * cols

    # No annotations: DDP compares them with dist.GradBucket, and postponed ones are strings.
    def hook(self, _state, bucket):
        started = time.perf_counter()
        buffer = bucket.buffer()
        world = dist.get_world_size()
        if self.step < self.start_step:
            dist.all_reduce(buffer.div_(world))
        else:
            self._compressed(bucket.index(), buffer, bucket.parameters(), world)
        if bucket.is_last():
            self.step += 1
        self.seconds += time.perf_counter() - started
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(buffer)
        return done

    def _compressed(self, index: int, buffer: torch.Tensor, params: list[torch.Tensor],
                    world: int) -> None:
        views, offset = [], 0
        for p in params:  # DDP lays a bucket's gradients out in the order of its parameters
            views.append((offset, buffer[offset:offset + p.numel()].view(p.shape)))
            offset += p.numel()
        matrices = [(at, v.view(v.shape[0], -1)) for at, v in views if self.compresses(v.shape)]
        vectors = [v for _, v in views if not self.compresses(v.shape)]
        if vectors:
            flat = torch.cat([v.reshape(-1) for v in vectors])
            dist.all_reduce(flat.div_(world))
            for v, part in zip(vectors, torch.split(flat, [v.numel() for v in vectors]),
                               strict=True):
                v.copy_(part.view(v.shape))
        if not matrices:
            return
        # Error feedback for the matrices only: what an exact all-reduce leaves out (a rank's
        # vector minus the mean) sums to zero over the ranks, so carrying it changes nothing.
        errors = self.errors.setdefault(index, torch.zeros_like(buffer))
        error_views = [errors[at:at + m.numel()].view(m.shape) for at, m in matrices]
        for (_, m), e in zip(matrices, error_views, strict=True):
            m.add_(e)
        qs = [self._q(index, at, m.shape[1]) for at, m in matrices]
        ps = [m @ q for (_, m), q in zip(matrices, qs, strict=True)]
        self._all_reduce_each(ps)
        ps = [torch.linalg.qr(p, mode="reduced")[0] for p in ps]
        for (_, m), p, q in zip(matrices, ps, qs, strict=True):
            torch.matmul(m.t(), p, out=q)
        self._all_reduce_each(qs)
        for (_, m), e, p, q in zip(matrices, error_views, ps, qs, strict=True):
            q.div_(world)
            torch.addmm(m, p, q.t(), alpha=-1, out=e)  # what this step could not send
            torch.mm(p, q.t(), out=m)

    def _q(self, index: int, at: int, cols: int) -> torch.Tensor:
        """The factor Q of a matrix, warm-started from the last step; the same on every rank."""
        key = (index, at)
        if key not in self.qs:
            self.qs[key] = torch.randn(cols, self.rank, generator=self.generator)
        return self.qs[key]

    @staticmethod
    def _all_reduce_each(tensors: list[torch.Tensor]) -> None:
        """Sum each tensor over ranks in one all-reduce."""
        flat = torch.cat([t.reshape(-1) for t in tensors])
        dist.all_reduce(flat)
        for t, part in zip(tensors, torch.split(flat, [t.numel() for t in tensors]),
                           strict=True):
            t.copy_(part.view(t.shape))

    def take_seconds(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds
