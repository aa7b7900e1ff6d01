"""An elastic job (``--nnodes MIN:MAX``): the settings its agents share.

torchrun's agents form a new world whenever a node is lost or one arrives, and every worker then
starts again from the last checkpoint. Their rendezvous store lives off the nodes (``cpuft
rendezvous`` on a stable host), so every agent is a client of it. The numbers here follow the
facts in docs/distributed.md ("Spot nodes").
"""

from __future__ import annotations

from cpuft.errors import CpuftError

RESTARTS = 100
"""torchrun's --max-restarts in an elastic job: it counts, per agent, the times its workers
failed, and a node lost is a failure on every survivor. cpuft's own bound is MIN nodes."""
LAST_CALL_S = 5
"""Once MIN nodes have met, how long the rendezvous waits for more (torchrun's default is 30 s):
the survivors of a loss already know the world they want."""
JOIN_TIMEOUT_S = 600
"""How long an agent waits for MIN nodes to meet before it gives up."""
KEEP_ALIVE_S = 2
KEEP_ALIVE_MISSED = 3
"""An agent that has not written its heartbeat for KEEP_ALIVE_MISSED times KEEP_ALIVE_S is
dropped from the rendezvous (torchrun's default: 3 of 5 s): until then, the survivors of a lost
node wait for it."""
STORE_READY = "cpuft rendezvous: serving on"
"""The line ``cpuft rendezvous`` prints once its store listens: what the launcher waits for."""
REJOIN_AFTER_S = 30.0
"""With a hostfile: how long the launcher waits before it tries a lost host again."""


def parse_nnodes(text: str) -> tuple[int, int]:
    """(MIN, MAX) of ``N`` (MIN = MAX) or ``MIN:MAX``."""
    lo, sep, hi = text.partition(":")
    try:
        low, high = int(lo), int(hi if sep else lo)
    except ValueError:
        raise CpuftError(f"--nnodes {text!r}: give a number of nodes, or MIN:MAX for a job "
                         "that goes on as nodes come and go") from None
    if not 1 <= low <= high:
        raise CpuftError(f"--nnodes {text!r}: MIN:MAX with 1 <= MIN <= MAX")
    return low, high


def rdzv_conf() -> str:
    """torchrun's --rdzv-conf of every agent of an elastic job: none serves the store."""
    return (f"is_host=false,last_call_timeout={LAST_CALL_S},join_timeout={JOIN_TIMEOUT_S},"
            f"keep_alive_interval={KEEP_ALIVE_S},keep_alive_max_attempt={KEEP_ALIVE_MISSED}")


def check_batch_splits(batch: int, min_nodes: int, max_nodes: int) -> None:
    """An elastic run keeps the global batch of its MAX nodes (``batch`` a rank) on whatever
    number of nodes is left: each count from MIN to MAX must divide it, or one line says
    which do not and the nearest batch that works."""
    def fails(b: int) -> list[int]:
        return [n for n in range(min_nodes, max_nodes + 1) if b * max_nodes % n]

    bad = fails(batch)
    if not bad:
        return
    works = next(b for b in range(batch + 1, batch * max_nodes * 2520 + 2) if not fails(b))
    raise CpuftError(f"--nnodes {min_nodes}:{max_nodes} with --batch-size {batch}: the global "
                     f"batch ({batch} a rank on {max_nodes} nodes) does not split evenly over "
                     f"{' or '.join(map(str, bad))} node(s); --batch-size {works} does")
