"""Process group, DDP wrapping, gradient-compression hook and metric reductions."""

from __future__ import annotations

import datetime
import importlib.util
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cpuft.distributed.env import RankInfo, check_world, rank_info, rendezvous
from cpuft.distributed.powersgd import PowerSGD
from cpuft.errors import CpuftError


def choose_backend(requested: str = "auto") -> str:
    """oneCCL's 'ccl' where its binding imports, 'mpi' where torch was built with it and an MPI
    launcher started us, else gloo (the backend of torch's CPU wheels)."""
    if requested != "auto":
        return requested
    if importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None:
        import oneccl_bindings_for_pytorch  # noqa: F401

        return "ccl"
    mpi_launched = "OMPI_COMM_WORLD_RANK" in os.environ or "PMI_RANK" in os.environ
    if mpi_launched and dist.is_mpi_available():
        return "mpi"
    return "gloo"


@dataclass(slots=True)
class CommTimer:
    """Times how long each step waits for gradients to be reduced after compute has finished."""

    last_hook: float = 0.0
    wait_seconds: float = 0.0

    def mark(self) -> None:
        self.last_hook = time.perf_counter()


@dataclass(slots=True)
class DistContext:
    info: RankInfo
    backend: str
    nodes: int
    timer: CommTimer = field(default_factory=CommTimer)
    sparse_params: list[torch.Tensor] = field(default_factory=list)
    """Parameters with sparse gradients: DDP leaves them out, reduce_sparse_grads sums them."""
    powersgd: PowerSGD | None = None
    """The compression hook, with --grad-compression powersgd."""
    bucket_cap_mb: float = 0.0
    """DDP's gradient bucket size, as wrap_model chose it."""

    def take_hook_seconds(self) -> float:
        """Seconds spent in blocking communication hooks since the last call."""
        return self.powersgd.take_seconds() if self.powersgd else 0.0

    def reduce_sparse_grads(self) -> float:
        """Average the sparse gradients over ranks (only the rows used are sent); seconds taken.

        DDP reduces dense buckets; a word embedding's sparse gradient would go whole.
        """
        started = time.perf_counter()
        world = self.info.world_size
        for p in self.sparse_params:
            if p.grad is None:
                raise CpuftError("a parameter with a sparse gradient got none this step")
            grad = p.grad.coalesce()
            dist.all_reduce(grad)
            p.grad = grad.coalesce() / world
        return time.perf_counter() - started

    def broadcast_from_main(self, tensors: Sequence[torch.Tensor]) -> None:
        """Give every rank rank 0's values of ``tensors`` (in place)."""
        for t in tensors:
            dist.broadcast(t, src=0)

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        return t.tolist()

    def all_reduce_max(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def gather_ints(self, value: int) -> list[int]:
        """Every rank's ``value``, by rank (a collective)."""
        t = torch.zeros(self.info.world_size, dtype=torch.int64)
        t[self.info.rank] = value
        dist.all_reduce(t)
        return [int(v) for v in t.tolist()]

    def broadcast_bytes(self, data: bytes, src: int) -> bytes:
        """``src``'s ``data`` on every rank (a collective; other ranks' ``data`` is not read)."""
        size = torch.tensor([len(data)], dtype=torch.int64)
        dist.broadcast(size, src=src)
        buffer = (torch.frombuffer(bytearray(data), dtype=torch.uint8)
                  if self.info.rank == src and data else
                  torch.empty(int(size.item()), dtype=torch.uint8))
        if buffer.numel():
            dist.broadcast(buffer, src=src)
        return buffer.numpy().tobytes()

    def on_every_rank(self, flag: bool) -> bool:
        """Whether ``flag`` is true on all ranks (a collective: every rank must call it)."""
        return self.all_reduce_sum([1.0 if flag else 0.0])[0] == self.info.world_size

    def barrier(self) -> None:
        dist.barrier()


def init_distributed(backend: str = "auto", timeout_s: float = 120.0,
                     comm_cores: Sequence[int] = ()) -> DistContext | None:
    """Join the job's process group when a launcher started this process as one of many.

    With ``comm_cores``, the threads the backend starts for communication run there, off the
    cores that compute.
    """
    info = rank_info(os.environ)
    if not info.distributed:
        return None
    check_world(os.environ, info)
    chosen = choose_backend(backend)
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        with threads_started_on(comm_cores):
            dist.init_process_group(chosen, store=_attempt_store(info, timeout), rank=info.rank,
                                    world_size=info.world_size, timeout=timeout)
    except (RuntimeError, ValueError) as e:
        raise CpuftError(f"rank {info.rank} could not join the job on {chosen}: {e}") from None
    return DistContext(info=info, backend=chosen,
                       nodes=max(1, info.world_size // max(info.local_world_size, 1)))


@contextmanager
def threads_started_on(cores: Sequence[int]) -> Iterator[None]:
    """Threads started in the body run on ``cores``: a new thread inherits the affinity of the
    thread that starts it, and gloo starts its worker and socket threads in the process group's
    constructor. The calling thread gets its own cores back afterwards."""
    if not cores or not hasattr(os, "sched_setaffinity"):
        yield
        return
    own = os.sched_getaffinity(0)  # pid 0: this thread only
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, own)


def _attempt_store(info: RankInfo, timeout: datetime.timedelta) -> dist.Store:
    """The job's key-value store, with keys of this restart attempt only.

    Under torchrun the store is the rendezvous store, which outlives a restart: without a prefix
    per attempt, a restarted rank can read a dead peer's address and fail to connect.
    """
    meet = rendezvous(os.environ)
    if meet is None:
        raise CpuftError("MASTER_ADDR and MASTER_PORT must be set for a distributed run")
    addr, port = meet
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if not agent_store and info.rank == 0:
        # TCPStore alone listens on every interface; bound here, it listens on the cluster's.
        listener = socket.create_server((addr, int(port)), backlog=512)
        store = dist.TCPStore(addr, int(port), world_size=info.world_size, is_master=True,
                              timeout=timeout, master_listen_fd=listener.detach())
    else:
        store = dist.TCPStore(addr, int(port), world_size=info.world_size, is_master=False,
                              timeout=timeout)
    if not agent_store:  # a store of this attempt's own, at a port chosen for it
        return dist.PrefixStore("cpuft/", store)
    # The agents' count of restarts: the same on every node while no node comes or goes (an
    # elastic job's store is its own each round: see TORCH_DISABLE_SHARE_RDZV_TCP_STORE).
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"cpuft/attempt{attempt}/", store)


def shutdown(ctx: DistContext | None) -> None:
    if ctx is not None and dist.is_initialized():
        dist.destroy_process_group()


def _timed_hook(timer: CommTimer, compress: bool) -> Any:
    # No annotations: DDP compares them with dist.GradBucket, and postponed ones are strings.
    def hook(state, bucket):
        timer.mark()
        buffer = bucket.buffer()
        world = dist.get_world_size()
        if compress:
            half = buffer.to(torch.bfloat16).div_(world)
            fut = dist.all_reduce(half, async_op=True).get_future()

            def back(f: torch.futures.Future[Any]) -> torch.Tensor:
                buffer.copy_(f.value()[0])
                return buffer

            return fut.then(back)
        buffer.div_(world)
        fut = dist.all_reduce(buffer, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    return hook


FP32_BUCKET_MB = 25.0
"""DDP's own default: 6.5M fp32 gradients per bucket."""


def bucket_cap_for(params: Sequence[torch.Tensor], requested: float = 0.0) -> float:
    """``requested`` MB, or where it is 0 a bucket that holds as many gradients as DDP's default
    holds of fp32 ones: about 12.5 MB where they are bf16 (bf16 weights).

    With 25 MB buckets a MiniLM's 22 MB of bf16 gradients went as one bucket, whose all-reduce
    could only start after backward: 2 nodes reached 88.3% against 90.2% with 12 MB buckets
    (3 rounds, global batch 128, 1-core nodes).
    """
    if requested > 0:
        return requested
    dense = [p for p in params if p.requires_grad]
    count = sum(p.numel() for p in dense)
    if not count:
        return FP32_BUCKET_MB
    bytes_per_grad = sum(p.numel() * p.element_size() for p in dense) / count
    return FP32_BUCKET_MB * bytes_per_grad / 4


def wrap_model(model: nn.Module, ctx: DistContext, *, bucket_cap_mb: float,
               grad_compression: str, grad_sync: bool = True) -> nn.Module:
    """DDP with a hook that times communication and, with 'bf16', halves what is sent, or with
    'powersgd' sends low-rank factors of each gradient matrix (cpuft.distributed.powersgd).

    ``grad_sync=False`` sends nothing after the start (torch's noop_hook, no buffer broadcasts,
    no sparse rows): the ranks train apart, at the speed they would reach if communication
    were free.
    """
    from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    if grad_compression not in ("none", "bf16", "powersgd"):
        raise CpuftError(f"unknown --grad-compression {grad_compression!r}: use none, bf16 or "
                         "powersgd")
    sparse: dict[str, torch.Tensor] = {f"{name}.weight" if name else "weight": m.weight
              for name, m in model.named_modules()
              if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad}
    if sparse:
        DDP._set_params_and_buffers_to_ignore_for_model(model, list(sparse))
        for p in sparse.values():  # DDP broadcasts rank 0's weights, but not ignored ones
            dist.broadcast(p.data, src=0)
        if grad_sync:  # without it their rows stay each rank's own, as the dense gradients do
            ctx.sparse_params = list(sparse.values())
    ignored = {id(p) for p in sparse.values()}
    ctx.bucket_cap_mb = bucket_cap_for(
        [p for p in model.parameters() if id(p) not in ignored], bucket_cap_mb)
    # Gradients as views into DDP's buckets: no copy of every gradient in and out per step.
    ddp = DDP(model, bucket_cap_mb=ctx.bucket_cap_mb, gradient_as_bucket_view=True,
              forward_sync_buffers=grad_sync)
    if not grad_sync:
        ddp.register_comm_hook(None, noop_hook)
    elif grad_compression == "powersgd":
        ctx.powersgd = PowerSGD()
        ddp.register_comm_hook(None, ctx.powersgd.hook)
    else:
        ddp.register_comm_hook(None, _timed_hook(ctx.timer, grad_compression == "bf16"))
    return ddp
