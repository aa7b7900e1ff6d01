"""What spot nodes cost a job in time: the work lost to preemptions and the restarts after them.

Each of K nodes is taken back at a rate of λ an hour, independently. A preemption loses the work
since the last checkpoint, half an interval c on average, and the time r the job takes to form
a new world and load the checkpoint; the lost time is spent on all K nodes alike (every worker
restarts at a change of membership). Over a spot run of W' seconds, K·λ·W'/3600 preemptions
are expected, so

    W' = W + K·λ·W'/3600 · (c/2 + r)   ->   W' = W / (1 - K·λ·(c/2 + r)/3600)

where W is the run without preemptions. Where K·λ·(c/2 + r) reaches an hour, preemptions come
faster than the job gets back to where it was: the run never ends. The taken-back node is
assumed to be replaced (the scheduler or the launcher brings one back) within r, so the run
keeps its K nodes' pace between preemptions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Preemption:
    """How often spot nodes are taken back, and what each loss costs."""

    per_node_hour: float
    """Expected preemptions of one node in an hour (λ)."""
    checkpoint_every_s: float = 600.0
    """Seconds of training between checkpoints (c): a preemption loses half of it on average."""
    restart_s: float = 60.0
    """Seconds from a loss to training again (r): rendezvous, start, checkpoint load."""

    @property
    def lost_per_preemption_s(self) -> float:
        return self.checkpoint_every_s / 2 + self.restart_s


def spot_wall_seconds(wall_s: float, nodes: int, p: Preemption) -> float:
    """The expected wall time on ``nodes`` spot nodes of a run of ``wall_s`` without
    preemptions; ``math.inf`` where the run never ends."""
    lost_share = nodes * p.per_node_hour * p.lost_per_preemption_s / 3600
    if lost_share >= 1:
        return math.inf
    return wall_s / (1 - lost_share)


def expected_preemptions(spot_wall_s: float, nodes: int, p: Preemption) -> float:
    return nodes * p.per_node_hour * spot_wall_s / 3600
