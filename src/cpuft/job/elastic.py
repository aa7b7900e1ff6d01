"""A run in an elastic job (``--nnodes MIN:MAX``): where it starts again after every change of
membership, and the record of each change.

Every change, a node lost or one arrived, starts every worker again with a new world, and rank 0
may now be on another node. So no duty may rest on one host: where the nodes do not share the
output folder, the first rank of every node keeps its own copy of each checkpoint, and at each
start the ranks agree on the newest step any of them holds; nodes without it receive it (with
the run's marker) from one that has it, and then load it as any resumed run does.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cpuft.config import TrainConfig
from cpuft.distributed.group import DistContext
from cpuft.engine.checkpoint import (
    checkpoint_bytes,
    checkpoint_step,
    latest_checkpoint,
    save_checkpoint_bytes,
)
from cpuft.errors import CpuftError
from cpuft.job.outdir import RUN_MARKER
from cpuft.log import get_logger

LOG = get_logger(__name__)
PROGRESS_FILE = ".cpuft-progress.json"
"""The step each node last reached and the world it reached it in (cpuft.engine.fit notes it)."""
MEMBERSHIP_FILE = "membership.jsonl"
"""One line for each change of membership the run went through."""
SHIPPED = (RUN_MARKER, "before.json", MEMBERSHIP_FILE)
"""The run's files that go with a checkpoint to a node that lacks it."""


@dataclass(frozen=True, slots=True)
class Start:
    """Where this start of an elastic run stands."""

    shared: bool
    """Whether every node sees the one output folder."""
    history: list[dict[str, Any]]
    """The changes of membership so far, this start's last."""
    given_batch: int | None = None
    """A first start on fewer ranks than MAX nodes give: the --batch-size given, a rank's batch
    on MAX nodes (this start's ranks take more, the same global batch)."""


def full_job_batch(cfg: TrainConfig, world: int, ranks_at_max: int) -> TrainConfig:
    """An elastic run's first start: --batch-size is a rank's batch when all MAX nodes are in;
    on fewer, each rank takes its share of that global batch."""
    batch = cfg.optimization.batch_size
    if world == ranks_at_max:
        return cfg
    total = batch * ranks_at_max
    if total % world:
        raise CpuftError(f"the elastic job's global batch of {total} samples (--batch-size "
                         f"{batch} on {ranks_at_max} ranks) does not split over the {world} "
                         "ranks that met: give a --batch-size that every number of nodes "
                         "from MIN to MAX divides")
    LOG.info(f"{world} of {ranks_at_max} ranks met: {total // world} samples a rank, the "
             f"global batch of {total} the whole job has")
    return replace(cfg, optimization=replace(cfg.optimization, batch_size=total // world))


def output_shared(out: Path, dist: DistContext) -> bool:
    """Whether every rank sees the file rank 0 writes into ``out`` (a collective)."""
    token = secrets.token_hex(8) if dist.info.is_main else ""
    token = dist.broadcast_bytes(token.encode(), src=0).decode()
    probe = out / f".cpuft-shared-{token}"
    if dist.info.is_main:
        # Where rank 0 cannot write, no rank finds the file; check_output_dir then says why.
        with contextlib.suppress(OSError):
            probe.write_text("")
    dist.barrier()
    shared = dist.on_every_rank(probe.is_file())
    if dist.info.is_main:
        probe.unlink(missing_ok=True)
    return shared


def share_newest_checkpoint(out: Path, dist: DistContext) -> int:
    """Give every node the newest checkpoint any node holds, with the run's files; its step
    (-1: none anywhere). A collective."""
    newest = latest_checkpoint(out)
    steps = dist.gather_ints(checkpoint_step(newest) if newest is not None else -1)
    best = max(steps)
    if best < 0 or min(steps) == best:
        return best
    src = steps.index(best)
    files = [name for name in SHIPPED if (out / name).is_file()] if dist.info.rank == src else []
    names = shipped_names(dist.broadcast_bytes(json.dumps(files).encode(), src))
    receives = steps[dist.info.rank] < best and dist.info.local_rank == 0
    if receives:
        out.mkdir(parents=True, exist_ok=True)
    if dist.info.rank == src:
        LOG.info(f"giving the checkpoint of step {best} to the nodes that lack it")
    for name in names:
        data = dist.broadcast_bytes((out / name).read_bytes() if dist.info.rank == src else b"",
                                    src)
        if receives:
            (out / name).write_bytes(data)
    assert newest is not None or dist.info.rank != src
    data = dist.broadcast_bytes(
        checkpoint_bytes(newest) if dist.info.rank == src and newest else b"", src)
    if receives:
        save_checkpoint_bytes(out, best, data)
    dist.barrier()
    return best


def shipped_names(sent: bytes) -> list[str]:
    """The run's files a peer says it sends with its checkpoint: only names of ``SHIPPED``,
    so that no peer chooses where a file is written. Every rank gets the same bytes and
    reaches the same verdict, so a refusal ends every rank alike, none left waiting."""
    try:
        names = json.loads(sent.decode())
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) and n in SHIPPED
                                              for n in names):
        shown = sent[:200].decode(errors="replace")
        raise CpuftError(f"a peer offered its checkpoint with files other than a run's "
                         f"({shown}): refused, nothing written")
    return names


def read_progress(out: Path) -> dict[str, int]:
    try:
        noted = json.loads((out / PROGRESS_FILE).read_text())
        return {"step": int(noted["step"]), "world_size": int(noted["world_size"])}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def read_history(out: Path) -> list[dict[str, Any]]:
    path = out / MEMBERSHIP_FILE
    if not path.is_file():
        return []
    history = []
    for line in path.read_text().splitlines():
        try:
            history.append(json.loads(line))
        except ValueError:
            continue  # a line a killed writer left half-written
    return history


def begin(out: Path, dist: DistContext | None) -> Start:
    """Make the newest checkpoint every node's, and note the change of membership that this
    start is (where the run had trained before); every rank calls it. A world of one (all
    but one node lost) has no process group: it reads its own folder."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CpuftError(f"--output-dir {out}: cannot be made ({e.strerror})") from None
    shared = output_shared(out, dist) if dist is not None else True
    if not shared:
        assert dist is not None
        resumed = share_newest_checkpoint(out, dist)
    else:
        newest = latest_checkpoint(out)
        resumed = checkpoint_step(newest) if newest is not None else -1
    progress = read_progress(out)
    mine = [progress.get("step", 0), progress.get("world_size", 0)]
    reached = dist.gather_ints(mine[0]) if dist is not None else [mine[0]]
    before = dist.gather_ints(mine[1]) if dist is not None else [mine[1]]
    world = dist.info.world_size if dist is not None else 1
    history = read_history(out)
    furthest = max(reached)
    if furthest > 0:
        at = max(resumed, 0)
        history.append({
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "step": at,
            "world_size_before": before[reached.index(furthest)],
            "world_size_after": world,
            "steps_trained_again": max(furthest - at, 0),
        })
        if dist is None or dist.info.is_main:
            LOG.info(f"the job's world changed from {history[-1]['world_size_before']} to "
                     f"{world} rank(s): going on from step {at}, "
                     f"{history[-1]['steps_trained_again']} step(s) to train again")
    return Start(shared=shared, history=history)


def write_history(out: Path, history: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{MEMBERSHIP_FILE}.tmp"
    tmp.write_text("".join(json.dumps(event) + "\n" for event in history))
    tmp.replace(out / MEMBERSHIP_FILE)
