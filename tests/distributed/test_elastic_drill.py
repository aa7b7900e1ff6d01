"""The spot drill: an elastic job (--nnodes 2:3) over three namespaced hosts, its rendezvous store
on a fourth, loses nodes as spot nodes are lost and takes them back.

One job goes through: a node killed without notice (SIGKILL to every process in it), the same
node back, a node told to leave (SIGTERM to every process in it), that node back, and a node
whose link is cut (found only by the collectives' timeout), back once its link is. A second job,
whose nodes each have their own output folder, loses the node of rank 0. Each ends with exit
code 0, every change in summary.json, no more steps trained again than the loss found since the
last checkpoint, an evaluation within noise of an uninterrupted run, and no process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cpuft.testing.netns import Cluster, can_make_namespaces, namespace_cluster
from tests.helpers import cpuft_env, make_tiny_model, sentiment_rows, write_csv

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.slow,
    pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)"),
]

SAVE_EVERY_S = 4
COMM_TIMEOUT_S = 20
REJOIN_AFTER_S = 30
STEPS = 3000
# Each node's link is shaped to this rate so that a step's all-reduce takes its time whatever the
# CPU: unshaped, a fast CPU trained the 3000 steps before the last node could rejoin.
LINK_RATE = "10mbit"
TRAIN = ["--text-columns", "text", "--batch-size", "4", "--max-steps", str(STEPS),
         "--no-progress", "--log-steps", "50"]


def netns_pids(host: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True,
                         check=True).stdout
    return [int(p) for p in out.split()]


def signal_node(host: str, sig: int) -> None:
    """``sig`` to every process of ``host``, as a reclaimed machine's processes get it."""
    for pid in netns_pids(host):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def set_link(host: str, up: bool) -> None:
    subprocess.run(["ip", "netns", "exec", host, "ip", "link", "set", "eth0",
                    "up" if up else "down"], check=True)


def checkpoint_steps(folder: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in folder.glob("checkpoint-*"))


@dataclass
class Drill:
    """A running elastic job, the output folders its nodes write, and what the test saw."""

    outs: list[Path]
    proc: subprocess.Popen[str]
    started: float = field(default_factory=time.monotonic)
    lines: list[str] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)
    losses: list[dict[str, int]] = field(default_factory=list)

    def progress(self) -> dict[str, int]:
        """The furthest step any node noted, with its world size."""
        noted = []
        for out in self.outs:
            with contextlib.suppress(OSError, ValueError):
                noted.append(json.loads((out / ".cpuft-progress.json").read_text()))
        return max(noted, key=lambda p: p["step"], default={})

    def changes(self) -> list[dict]:
        """The longest record of changes any node holds."""
        found = [[json.loads(x) for x in (out / "membership.jsonl").read_text().splitlines()]
                 for out in self.outs if (out / "membership.jsonl").is_file()]
        return max(found, key=len, default=[])

    def newest_checkpoint(self) -> int:
        return max((s for out in self.outs for s in checkpoint_steps(out)), default=0)

    def lose(self, how: Callable[[], None]) -> None:
        """Lose a node by ``how``, noting the newest checkpoint and step before."""
        self.losses.append({"checkpoint": self.newest_checkpoint(),
                            "step": self.progress().get("step", 0)})
        how()

    def wait(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        t0 = time.monotonic()
        while not done():
            if self.proc.poll() is not None:
                raise AssertionError(f"the job ended while waiting for {what}:\n"
                                     + "".join(self.lines[-60:]))
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"no {what} within {timeout:.0f}s:\n"
                                     + "".join(self.lines[-60:]))
            time.sleep(0.5)
        self.timeline.append(f"{time.monotonic() - self.started:6.1f}s  {what} "
                             f"({time.monotonic() - t0:.1f}s)")

    def trains_on(self, world: int, changes: int) -> Callable[[], bool]:
        """The job has gone through ``changes`` changes and trains on ``world`` ranks again."""
        def ok() -> bool:
            seen, p = self.changes(), self.progress()
            return (len(seen) >= changes and seen[changes - 1]["world_size_after"] == world
                    and p.get("world_size") == world and p.get("step", 0) > seen[-1]["step"])
        return ok

    def rank0_host(self) -> str:
        """The host of rank 0 in the newest world: its lines are tagged [host:0]."""
        tags = [line[1:line.index("]")] for line in self.lines if line.startswith("[")]
        return [t for t in tags if t.endswith(":0")][-1].rsplit(":", 1)[0]


@contextlib.contextmanager
def elastic_job(data: Path, cluster: Cluster, outs: list[Path], out: Path, shell: str,
                name: str) -> Iterator[Drill]:
    """The job over ``cluster``'s hosts but the first (the store's), stopped whatever the body
    did."""
    store, *nodes = cluster.hosts
    hostfile = data / f"hosts-{name}"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in nodes))
    argv = [sys.executable, "-m", "cpuft", "launch", "--hostfile", str(hostfile),
            "--nnodes", f"2:{len(nodes)}", "--rdzv-endpoint", f"{store}:29433",
            "--remote-shell", shell, "--rejoin-after", f"{REJOIN_AFTER_S}s", "--", "train",
            "--model", str(data / "model"), "--train-file", str(data / "d.csv"), *TRAIN,
            "--save-every", f"{SAVE_EVERY_S}s", "--comm-timeout", str(COMM_TIMEOUT_S),
            "--output-dir", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=cpuft_env(), cwd=data, start_new_session=True)
    drill = Drill(outs=outs, proc=proc)

    def read() -> None:
        assert proc.stdout is not None
        with (data / f"{name}.log").open("w") as log:
            for line in proc.stdout:
                drill.lines.append(line)
                log.write(f"{time.monotonic() - drill.started:7.1f} {line}")
                log.flush()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield drill
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for host in cluster.hosts:
            signal_node(host, signal.SIGKILL)
        proc.wait()
        reader.join(timeout=10)
        print(f"{name}:\n" + "\n".join(drill.timeline))


def finish(drill: Drill, cluster: Cluster, timeout: float = 600) -> dict:
    """The job's summary once it has ended well, and nothing left running."""
    try:
        code = drill.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("the job did not end:\n" + "".join(drill.lines[-80:])) from None
    assert code == 0, "".join(drill.lines[-80:])
    time.sleep(1)
    left = {h: netns_pids(h) for h in cluster.hosts}
    assert not any(left.values()), f"processes left behind: {left}"
    summaries = [out / "summary.json" for out in drill.outs if (out / "summary.json").is_file()]
    assert summaries, "no node wrote summary.json"
    return json.loads(summaries[0].read_text())


def check_changes(drill: Drill, summary: dict, worlds: list[tuple[int, int]]) -> None:
    """Every change is in summary.json, in order; after each loss the job went on from the
    newest checkpoint there was, and trained again at most the steps since it."""
    changes = summary["membership"]
    assert [(c["world_size_before"], c["world_size_after"]) for c in changes] == worlds
    losses = [c for c in changes if c["world_size_after"] < c["world_size_before"]]
    assert len(losses) == len(drill.losses)
    for change, seen in zip(losses, drill.losses, strict=True):
        assert change["step"] >= seen["checkpoint"], (change, seen)
        assert change["step"] + change["steps_trained_again"] >= seen["step"], (change, seen)
        # what was trained after the loss was noticed is a step or two, not a checkpoint's worth
        assert change["steps_trained_again"] <= seen["step"] - seen["checkpoint"] + 3, \
            (change, seen)
    assert summary["steps"] == STEPS


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("drill")
    make_tiny_model(root / "model")
    write_csv(root / "d.csv", sentiment_rows(600, seed=5))
    return root


@pytest.fixture(scope="module")
def uninterrupted(data) -> dict:
    """The same run, the same global batch of 12, on one process, never interrupted."""
    out = data / "uninterrupted"
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft", "train", "--model", str(data / "model"), "--train-file",
         str(data / "d.csv"), *TRAIN, "--batch-size", "12", "--output-dir", str(out)],
        capture_output=True, text=True, env=cpuft_env(), cwd=data, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())


def test_an_elastic_job_loses_nodes_and_takes_them_back(data, uninterrupted):
    out = data / "out"
    with namespace_cluster(4, rate=LINK_RATE) as cluster, \
            elastic_job(data, cluster, [out], out, "ip netns exec {host}", "shared") as drill:
        _, a, b, c = cluster.hosts
        drill.wait("3 nodes train, a checkpoint written",
                   lambda: drill.progress().get("step", 0) > 40 and checkpoint_steps(out), 300)
        drill.lose(lambda: signal_node(c, signal.SIGKILL))  # lost without notice
        drill.wait("going on with 2 after SIGKILL", drill.trains_on(2, 1), 180)
        drill.wait("rejoined: 3 again", drill.trains_on(3, 2), 180)
        time.sleep(3)
        drill.lose(lambda: signal_node(b, signal.SIGTERM))  # told to leave
        drill.wait("going on with 2 after SIGTERM", drill.trains_on(2, 3), 180)
        drill.wait("rejoined: 3 again", drill.trains_on(3, 4), 180)
        time.sleep(3)
        drill.lose(lambda: set_link(a, up=False))  # silent: only the timeout finds it
        drill.wait("going on with 2 after the link was cut", drill.trains_on(2, 5), 240)
        set_link(a, up=True)
        drill.wait("rejoined after the link came back: 3 again", drill.trains_on(3, 6), 240)
        summary = finish(drill, cluster)
    check_changes(drill, summary, [(3, 2), (2, 3), (3, 2), (2, 3), (3, 2), (2, 3)])
    leave = summary["membership"][2]
    assert leave["steps_trained_again"] == 0, leave  # the clean leave loses no step
    assert summary["world_size"] == 3  # finished on 3 nodes
    assert abs(summary["eval"]["accuracy"] - uninterrupted["eval"]["accuracy"]) <= 0.05


def test_losing_rank_0s_node_where_each_node_has_its_own_folder(data, uninterrupted):
    """Each host sees its own folder at the output path (a private mount over it), so rank 0's
    checkpoints go with its node, unless every node keeps its own copy."""
    out, own = data / "private-out", data / "private"
    with namespace_cluster(4, rate=LINK_RATE) as cluster:
        for host in cluster.hosts:
            (own / host).mkdir(parents=True)
        out.mkdir()
        shell = (f"ip netns exec {{host}} unshare --mount sh -c 'mount --bind {own}/{{host}} "
                 f"{out} && exec sh -c \"$1\"' sh {{command}}")
        outs = [own / h for h in cluster.hosts[1:]]
        with elastic_job(data, cluster, outs, out, shell, "private") as drill:
            drill.wait("3 nodes train, each node with its own checkpoints",
                       lambda: drill.progress().get("step", 0) > 40
                       and all(checkpoint_steps(o) for o in outs), 300)
            first = drill.rank0_host()
            drill.lose(lambda: signal_node(first, signal.SIGKILL))
            drill.wait("going on with 2 without rank 0's node", drill.trains_on(2, 1), 180)
            drill.wait("rejoined: 3 again", drill.trains_on(3, 2), 180)
            summary = finish(drill, cluster)
        assert not any(out.iterdir())  # nothing went to the shared path itself
    check_changes(drill, summary, [(3, 2), (2, 3)])
    assert summary["world_size"] == 3
    assert abs(summary["eval"]["accuracy"] - uninterrupted["eval"]["accuracy"]) <= 0.05


def test_below_min_nodes_the_job_stops_and_keeps_its_checkpoint(data):
    out = data / "few"
    with namespace_cluster(3, rate=LINK_RATE) as cluster, \
            elastic_job(data, cluster, [out], out, "ip netns exec {host}", "few") as drill:
        drill.wait("2 nodes train, a checkpoint written",
                   lambda: drill.progress().get("step", 0) > 20 and checkpoint_steps(out), 300)
        signal_node(cluster.hosts[2], signal.SIGKILL)
        code = drill.proc.wait(timeout=120)
        time.sleep(1)
        left = {h: netns_pids(h) for h in cluster.hosts}
    said = [line for line in drill.lines if line.startswith("cpuft: 1 host(s) left")]
    assert code == 1 and len(said) == 1, "".join(drill.lines[-40:])
    assert "fewer than --nnodes 2:2: the job stops" in said[0]
    assert not any(left.values()), f"processes left behind: {left}"
    assert checkpoint_steps(out) and not (out / "summary.json").exists()
