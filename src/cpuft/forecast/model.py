"""A fine-tuning job's time and cost on K nodes, from what one node measured.

A step on K nodes of a global batch G:
    compute = step(G/K) on the calibrated node x its speed / the target node's speed
    communication = ring all-reduce of the dense gradients + gather of the sparse rows
    step = compute + communication x (1 - hidden share)
``step(b)`` is read off the calibrated node's steps timed at several batch sizes, in straight
lines between them: a step has work it does whatever its batch (the optimizer, launching
kernels), which K nodes each do in full, and small matmuls run slower a sample than big ones;
both are why halving a node's batch does not halve its step. The hidden share is the part of the
communication that DDP overlaps with the backward pass.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from cpuft.forecast.comm import Link, allgather_seconds, ring_allreduce_seconds
from cpuft.forecast.preemption import Preemption, expected_preemptions, spot_wall_seconds

ISA_SPEED = {"avx2": 1.0, "avx512": 1.25, "avx512_bf16": 1.8, "amx": 2.6}
"""Training speed per physical core of each ISA class, against AVX2 in fp32, in the precision
cpuft chooses there (bf16 on avx512_bf16 and amx): an assumption, used only where the target's
class differs from the calibrated node's (where the class is the same, the speed is measured)."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """One node's measured pace, and what a step of this job sends."""

    steps: tuple[tuple[float, float], ...]
    """(samples, compute seconds) of a step on the calibrated node, by batch size, at least
    two."""
    cores: float
    """Physical cores the calibrated node trained on."""
    isa: str
    """The calibrated node's ISA class (``ISA_SPEED``)."""
    dense_gradient_bytes: float
    """Bytes of dense gradients each step all-reduces."""
    sparse_gradient_bytes: float = 0.0
    """Bytes of sparse gradient rows each node sends a step."""
    hidden_share: float = 0.0
    """The share of communication hidden behind the backward pass."""
    tokens_per_sample: float = 0.0
    """Real tokens a sample of the timed steps held (0: not known)."""


@dataclass(frozen=True, slots=True)
class Target:
    """The nodes to rent."""

    name: str
    cores: float
    isa: str
    link: Link
    on_demand_per_hour: float | None = None
    spot_per_hour: float | None = None


@dataclass(frozen=True, slots=True)
class Job:
    samples: int
    epochs: float
    global_batch: int
    tokens_per_sample: float = 0.0
    """Real tokens a sample of the job's data holds: a step's compute scales with it against
    the calibration's (0: as calibrated)."""

    @property
    def steps(self) -> int:
        return max(1, math.ceil(self.samples * self.epochs / self.global_batch))


@dataclass(frozen=True, slots=True)
class Forecast:
    """The job on ``nodes`` nodes."""

    nodes: int
    compute_seconds: float
    """A step's compute, each node."""
    comm_seconds: float
    """A step's communication, before any is hidden."""
    step_seconds: float
    wall_seconds: float
    efficiency: float
    """Speed on ``nodes`` nodes against ``nodes`` times one node's."""
    cost_on_demand: float | None
    cost_spot: float | None
    """On spot nodes, with the time preemptions cost (``math.inf`` where it never ends)."""
    spot_wall_seconds: float = 0.0
    """The wall time on spot nodes, preemptions counted (``math.inf``: it never ends)."""
    spot_preemptions: float = 0.0
    """Preemptions expected over the spot run."""


def step_seconds(steps: tuple[tuple[float, float], ...], samples: float) -> float:
    """The step at ``samples`` on the line through the nearest timed batch sizes (beyond them,
    along the first or last segment)."""
    points = sorted(steps)
    i = 1
    while i < len(points) - 1 and points[i][0] < samples:
        i += 1
    (b0, t0), (b1, t1) = points[i - 1], points[i]
    return max(t0 + (t1 - t0) * (samples - b0) / (b1 - b0), 0.0)


def compute_seconds(cal: Calibration, target: Target, samples_per_node: float) -> float:
    """A step's compute on one target node with ``samples_per_node`` samples."""
    speed = target.cores / cal.cores * ISA_SPEED[target.isa] / ISA_SPEED[cal.isa]
    return step_seconds(cal.steps, samples_per_node) / speed


def comm_seconds(cal: Calibration, nodes: int, link: Link) -> float:
    return (ring_allreduce_seconds(cal.dense_gradient_bytes, nodes, link)
            + allgather_seconds(cal.sparse_gradient_bytes, nodes, link))


def forecast(cal: Calibration, target: Target, job: Job, nodes: int,
             preemption: Preemption | None = None) -> Forecast:
    """The job on ``nodes`` nodes; on spot nodes taken back as ``preemption`` says (None:
    never)."""
    longer = (job.tokens_per_sample / cal.tokens_per_sample
              if job.tokens_per_sample and cal.tokens_per_sample else 1.0)
    compute = compute_seconds(cal, target, job.global_batch / nodes) * longer
    comm = comm_seconds(cal, nodes, target.link)
    step = compute + comm * (1 - cal.hidden_share)
    wall = step * job.steps
    one_node = compute_seconds(cal, target, job.global_batch) * longer
    spot_wall = wall if preemption is None else spot_wall_seconds(wall, nodes, preemption)

    def cost(price: float | None, seconds: float) -> float | None:
        return None if price is None else seconds / 3600 * nodes * price

    return Forecast(nodes=nodes, compute_seconds=compute, comm_seconds=comm, step_seconds=step,
                    wall_seconds=wall, efficiency=one_node / step / nodes,
                    cost_on_demand=cost(target.on_demand_per_hour, wall),
                    cost_spot=cost(target.spot_per_hour, spot_wall),
                    spot_wall_seconds=spot_wall,
                    spot_preemptions=(0.0 if preemption is None else
                                      expected_preemptions(spot_wall, nodes, preemption)))


def cheapest_within(forecasts: list[Forecast], deadline_s: float) -> Forecast | None:
    """The cheapest run that ends by the deadline (fewest nodes where cost is unknown or tied);
    None where none does."""
    meeting = [f for f in forecasts if f.wall_seconds <= deadline_s]
    if not meeting:
        return None
    return min(meeting, key=lambda f: (f.cost_on_demand or 0.0, f.nodes))


def last_paying(forecasts: list[Forecast], min_gain: float) -> Forecast:
    """The run past which another node adds less than ``min_gain`` of one node's speed (the
    forecasts in order of nodes)."""
    ordered = sorted(forecasts, key=lambda f: f.nodes)
    first = ordered[0]
    one = 1 / (first.efficiency * first.step_seconds * first.nodes)  # one node's steps/s
    for here, there in itertools.pairwise(ordered):
        gained = (1 / there.step_seconds - 1 / here.step_seconds) / (there.nodes - here.nodes)
        if gained < min_gain * one:
            return here
    return ordered[-1]
