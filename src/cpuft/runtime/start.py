"""The one set-up of a process that trains: every command, API call and benchmark starts here.

``start(cfg)`` reads the CPU, decides the speed plan, places the process (cores, threads, the
allocator check), joins the job's process group with its communication threads on the cores
kept for them, and settles the precision (a vote of every rank in a job). Loops of one's own
(``cpuft.fit``, ``cpuft.optimize``) leave out what only recipes can use.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpuft.config import TrainConfig
from cpuft.distributed import context, joined, leave
from cpuft.distributed.group import DistContext
from cpuft.runtime.process import place_process
from cpuft.speedplan.resolve import settle_precision
from cpuft.speedplan.speed_plan import SpeedPlan, make_plan
from cpuft.speedups.registry import decide
from cpuft.topology import Topology, read_topology

OWN_LOOP_COMPILE = "off in a loop of your own: call torch.compile yourself"


@dataclass(frozen=True)
class Runtime:
    """What ``start`` set up: the settled plan of this process and the job it joined."""

    plan: SpeedPlan
    dist: DistContext | None
    """None in a single process."""
    topology: Topology
    joined_here: bool = False
    """Whether ``start`` joined the job (``close`` leaves it then), or found it joined."""

    def plan_for(self, cfg: TrainConfig) -> SpeedPlan:
        """The plan of another config in this same process (a benchmark's variant): its own
        decisions, on this process's cores, threads and allocator."""
        p = self.plan
        own = make_plan(cfg, self.topology).replaced(
            cores=p.cores, threads=p.threads, threads_reason=p.threads_reason,
            comm_cores=p.comm_cores, allocator=p.allocator,
            allocator_reason=p.allocator_reason, speedups=decide(cfg, self.topology))
        return settle_precision(own, cfg.speedups.precision)

    def close(self) -> None:
        """Leave the job's process group, where ``start`` joined it."""
        if self.joined_here and self.dist is not None:
            leave()


def start(cfg: TrainConfig, *, own_loop: bool = False, join: bool = True) -> Runtime:
    """Set this process up to train as ``cfg`` says; every rank of a job calls it.

    ``join=False`` joins no process group, but takes the one the process is already in (a
    script's own ``init_process_group``).
    """
    topology = read_topology()
    plan = make_plan(cfg, topology).replaced(speedups=decide(cfg, topology, own_loop=own_loop))
    if own_loop:
        plan = plan.replaced(compile="off", compile_reason=OWN_LOOP_COMPILE)
    plan = place_process(plan, cfg.speedups.pin_cores)
    dist = (context(cfg.distributed.backend, cfg.distributed.comm_timeout,
                    comm_cores=plan.comm_cores) if join else joined())
    plan = settle_precision(plan, cfg.speedups.precision,
                            dist.on_every_rank if dist is not None else None)
    return Runtime(plan=plan, dist=dist, topology=topology, joined_here=join)


def place_only(cfg: TrainConfig | None = None) -> SpeedPlan:
    """Place this process (cores, threads) as ``start`` would for ``cfg`` (the defaults), and do
    nothing else: no speed-up, no job. A stock baseline of ``cpuft bench`` gets this, as torch's
    own CPU launcher gives it."""
    cfg = cfg or TrainConfig()
    return place_process(make_plan(cfg, read_topology()), cfg.speedups.pin_cores)


def preview(cfg: TrainConfig | None = None) -> SpeedPlan:
    """The plan a run of ``cfg`` (the defaults) would get on this machine, the precision
    measured, without placing this process or joining a job: what ``cpuft.report_plan`` shows
    before any model, and the precision rule a stock baseline shares."""
    cfg, topology = cfg or TrainConfig(), read_topology()
    plan = make_plan(cfg, topology).replaced(speedups=decide(cfg, topology))
    plan = settle_precision(plan, cfg.speedups.precision)
    return plan.replaced(compile="off", compile_reason="not run") if plan.compile is None else plan
