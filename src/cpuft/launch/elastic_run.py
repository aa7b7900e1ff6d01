"""An elastic job over a hostfile: the store on a stable host, one agent a host, and a lost host
tried again until it answers.

torchrun's agents do the membership: a node lost or arrived makes the others form a new world
and start their workers again from the last checkpoint. What is left here is what no agent can
do for itself: start the store first and stop it last, start a lost host's agent again once the
host answers, and stop the job when fewer than MIN nodes are left.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from cpuft.errors import CpuftError
from cpuft.launch.commands import LaunchConfig, RemoteStart, ssh_command, store_command
from cpuft.launch.run import (
    STOP_GRACE_S,
    Failure,
    Proc,
    probe,
    signal_all,
    start_process,
    start_store,
    stop_store,
)

FINISH_GRACE_S = 60.0
"""Once one host's agent has ended the job, how long the others have to end theirs."""


class _Job:
    def __init__(self, cfg: LaunchConfig, capture: list[str] | None) -> None:
        self.cfg, self.capture = cfg, capture
        self.lock = threading.Lock()
        self.failures: list[Failure] = []
        self.stopping = threading.Event()
        self.env = dict(os.environ)

    def start(self, host: str, start: RemoteStart, capture: list[str] | None = None) -> Proc:
        return start_process(host, start.argv, self.env, start.stdin, self.lock, self.failures,
                             self.capture if capture is None else capture, self.stopping)

    def say(self, line: str) -> None:
        with self.lock:
            print(f"cpuft: {line}", file=sys.stderr, flush=True)

    def answers(self, host: str) -> bool:
        try:
            probe(self.cfg, host, "true")
        except CpuftError:
            return False
        return True


def _start_store(job: _Job) -> Proc:
    start = store_command(job.cfg)
    return start_store(job.cfg.store_host, start.argv, job.env, start.stdin, job.lock,
                       job.stopping)


def run_elastic_job(cfg: LaunchConfig, capture: list[str] | None = None) -> int:
    """Run the job while at least ``cfg.min_nodes`` of its hosts are up; its exit code."""
    job = _Job(cfg, capture)
    store = _start_store(job)
    hosts = [h.name for h in cfg.hosts]
    agents: dict[int, Proc | None] = {
        rank: job.start(hosts[rank], ssh_command(cfg, rank)) for rank in range(len(hosts))}
    retry_at: dict[int, float] = {}
    stopped_by: list[int] = []
    outcome: dict[str, object] = {}

    def forward(signum: int, _frame: object) -> None:
        # The whole job is told to stop: every rank checkpoints, no host is started again.
        stopped_by.append(signum)
        job.stopping.set()
        signal_all([p for p in agents.values() if p is not None], signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            now = time.monotonic()
            for rank, p in agents.items():
                code = None if p is None else p.popen.poll()
                if p is None or code is None:
                    continue
                agents[rank] = None
                if code == 0:
                    outcome.setdefault("finished", now)
                elif not (job.stopping.is_set() or "finished" in outcome):
                    left = sum(q is not None for q in agents.values())
                    job.say(f"host {hosts[rank]} left or was lost (its agent's exit code "
                            f"{code}); {left} of {len(hosts)} host(s) go on; trying it again "
                            f"every {cfg.rejoin_after_s:g}s")
                    retry_at[rank] = now + cfg.rejoin_after_s
            running = [p for p in agents.values() if p is not None]
            if not running:
                break
            if "finished" in outcome:
                retry_at.clear()
                if now - float(outcome["finished"]) > FINISH_GRACE_S:  # type: ignore[arg-type]
                    signal_all(running, signal.SIGTERM)
            elif not job.stopping.is_set() and len(running) < cfg.min_nodes:
                outcome["below"] = len(running)
                job.say(f"{len(running)} host(s) left, fewer than --nnodes "
                        f"{cfg.min_nodes}:{len(hosts)}: the job stops; its last checkpoint "
                        "stays: rerun with --resume once enough hosts are back")
                job.stopping.set()
                _stop(running)
            elif not job.stopping.is_set():
                for rank, at in list(retry_at.items()):
                    if at > now:
                        continue
                    if job.answers(hosts[rank]):
                        job.say(f"host {hosts[rank]} answers again: its agent rejoins the job")
                        agents[rank] = job.start(hosts[rank], ssh_command(cfg, rank))
                        del retry_at[rank]
                    else:
                        retry_at[rank] = time.monotonic() + cfg.rejoin_after_s
            time.sleep(0.2)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _stop([p for p in agents.values() if p is not None])
        stop_store(store)
    if stopped_by:
        job.say(f"stopped by signal {stopped_by[0]}; the ranks wrote a checkpoint if they had "
                "finished a step: rerun the same command with --resume")
        return 128 + stopped_by[0]
    if "below" in outcome:
        return 1
    return 0 if "finished" in outcome else 1


def _stop(procs: list[Proc]) -> None:
    signal_all(procs, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S * 4  # a checkpoint may be on its way
    while any(p.popen.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    signal_all(procs, signal.SIGKILL)
    for p in procs:
        p.popen.wait()
        p.reader.join(timeout=5)
