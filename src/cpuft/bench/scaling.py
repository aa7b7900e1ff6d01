"""``cpuft bench --scaling``: 1 node against 2 nodes on the same global batch.

Nodes are network namespaces on this machine, each pinned to its own core with one thread, their
links shaped to ``rate`` with tc; the job is started exactly as on a cluster (``cpuft launch``
through ``ip netns exec {host}``). Speeds are each run's samples/s after its first tenth of
steps (``steady_samples_per_second``). Needs root.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpuft.bench.steal import STEAL_WARN, read_ticks, steal_fraction
from cpuft.errors import CpuftError
from cpuft.launch.request import LaunchRequest
from cpuft.log import get_logger
from cpuft.topology import read_topology

LOG = get_logger(__name__)

TARGET_EFFICIENCY = 0.95
NO_SYNC = "nosync"
COMPRESSIONS = ("none", "bf16", "powersgd", NO_SYNC)


@dataclass(kw_only=True, slots=True)
class ScalingOptions:
    rate: str = "10gbit"
    steps: int = 40
    global_batch: int = 32
    model: str = ""
    max_seq_length: int = 128
    port: int = 29571
    compressions: tuple[str, ...] = ("none", "bf16", "powersgd", NO_SYNC)
    """Gradient compressions run on 2 nodes ('none' always is); 'nosync' is a 2-node run that
    sends no gradients: the speed 2 nodes reach when communication is free."""
    rounds: int = 1
    """Times every run is repeated, in turns; efficiencies are medians of each round's own."""
    grad_accum: int = 1
    """Micro-batches per optimizer step on every node: each micro-batch is global_batch /
    grad_accum samples, split over the nodes."""
    bucket_cap_mb: float = 0.0
    """DDP's gradient bucket size on 2 nodes; 0 leaves cpuft train's default."""


def runs(compressions: tuple[str, ...]) -> list[tuple[str, int, str]]:
    """(name, nodes, gradient compression) of each run, the 1-node baseline first."""
    chosen = ["none", *(c for c in compressions if c != "none")]
    return [("1-node", 1, "none"),
            *((f"2-nodes-{c}" if c != "none" else "2-nodes", 2, c) for c in chosen)]


def _launch_request(hostfile: Path, port: int, train_args: list[str]) -> LaunchRequest:
    return LaunchRequest(nproc_per_node="1", hostfile=str(hostfile), launcher="ssh",
                         master_port=port, remote_shell="ip netns exec {host}",
                         train_args=train_args)


def _train_args(opts: ScalingOptions, batch: int, compression: str) -> list[str]:
    sent = (["--grad-compression", "none", "--no-grad-sync"] if compression == NO_SYNC
            else ["--grad-compression", compression])
    train = ["--max-steps", str(opts.steps), "--batch-size", str(batch), *sent,
             "--no-progress",
             "--log-steps", str(opts.steps), "--overwrite",
             "--max-seq-length", str(opts.max_seq_length), "--grad-accum", str(opts.grad_accum)]
    if opts.bucket_cap_mb:
        train += ["--bucket-cap-mb", str(opts.bucket_cap_mb)]
    return train + (["--model", opts.model] if opts.model else [])


def run_on_nodes(name: str, nodes: int, train: list[str], rate: str | None, port: int,
                 workdir: Path) -> dict[str, Any]:
    """``cpuft train`` with ``train`` (its output folder ``workdir / name``) on ``nodes``
    namespaced nodes of one core each (shared when there are more nodes than cores); its
    summary."""
    from cpuft.launch.request import build_launch
    from cpuft.launch.run import run_job
    from cpuft.testing.netns import namespace_cluster

    cores = read_topology().first_thread_per_core()
    out = workdir / name
    with namespace_cluster(nodes, rate=rate) as cluster:
        hostfile = workdir / f"{name}.hosts"
        hostfile.write_text("".join(f"{h}\n" for h in cluster.hosts))
        cfg = build_launch(_launch_request(hostfile, port, [*train, "--output-dir", str(out)]))
        for i, host in enumerate(cluster.hosts):
            # one node, one core: what a node of the cluster would have to itself
            cfg.host_env[host].update({"CPUFT_RANK_CORES": str(cores[i % len(cores)]),
                                       "OMP_NUM_THREADS": "1"})
        code = run_job(cfg)
    if code != 0:
        raise CpuftError(f"run {name} on {nodes} namespaced node(s) failed (exit code {code})")
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def run_one(name: str, nodes: int, compression: str, opts: ScalingOptions,
            workdir: Path) -> dict[str, Any]:
    """One job on ``nodes`` namespaced nodes, each one core."""
    train = _train_args(opts, opts.global_batch // opts.grad_accum // nodes, compression)
    return _result(nodes, compression,
                   run_on_nodes(name, nodes, train, opts.rate, opts.port, workdir))


def run_halves(opts: ScalingOptions) -> dict[str, Any]:
    """The 2-node ceiling on this machine: one core trains the 2-node run's global batches whole
    and as the halves its 2 nodes get, the same samples both ways (see cpuft.bench.halves)."""
    from cpuft.bench.halves import HalvesSpec
    from cpuft.bench.start_worker import run_worker
    from cpuft.speedplan.allocator import preload_env

    spec = HalvesSpec(model=opts.model, global_batch=opts.global_batch, grad_accum=opts.grad_accum,
                      batches=max(opts.steps, 4), core=read_topology().first_thread_per_core()[0],
                      max_seq_length=opts.max_seq_length)
    env = preload_env() | {"OMP_NUM_THREADS": "1"}
    stdout = run_worker("cpuft.bench.halves", [spec.to_json()], env)
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def best_one_node(samples_per_second: float, ceiling: float) -> float:
    """1-node samples/s the faster way it can train a global batch: whole, or as two accumulated
    halves. Where a core trains the halves faster (``ceiling`` > 1: a big batch's activations
    spill out of cache) the whole-batch 1-node run is a slow baseline, and an efficiency
    measured against it overstates what 2 nodes buy."""
    return samples_per_second * max(1.0, ceiling)


def _result(nodes: int, compression: str, summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodes": nodes,
        "grad_compression": compression,
        "batch_size": summary["batch_size"],
        "grad_accum": summary["grad_accum"],
        "accuracy": summary["eval"].get("accuracy"),
        "samples_per_second": summary["steady_samples_per_second"],
        "tokens_per_second": summary["steady_tokens_per_second"],
        "comm_fraction": summary["step_time_split"]["comm_wait_fraction"],
        "seconds_per_step": summary["step_time_split"]["seconds_per_step"],
    }


def run_scaling(opts: ScalingOptions) -> dict[str, Any]:
    if opts.global_batch < 2 or opts.global_batch % 2:
        raise CpuftError("--global-batch must be even and at least 2 (it is split over 2 nodes)")
    if opts.grad_accum < 1 or opts.global_batch % (2 * opts.grad_accum):
        raise CpuftError(f"--grad-accum {opts.grad_accum}: --global-batch {opts.global_batch} "
                         "must split into that many micro-batches on each of 2 nodes")
    if opts.rounds < 1:
        raise CpuftError("--rounds must be at least 1")
    per_round: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in
                                                  runs(opts.compressions)}
    accum = (f" in {opts.grad_accum} micro-batches" if opts.grad_accum > 1 else "")
    with tempfile.TemporaryDirectory(prefix="cpuft-scaling-") as tmp:
        for round_ in range(opts.rounds):
            turn = f", round {round_ + 1}/{opts.rounds}" if opts.rounds > 1 else ""
            for name, nodes, compression in runs(opts.compressions):
                LOG.info(f"scaling: {name} ({opts.steps} steps of {opts.global_batch}{accum}, "
                         f"links {opts.rate}{turn})")
                ticks = read_ticks()
                done = run_one(name, nodes, compression, opts, Path(tmp))
                done["steal_fraction"] = steal_fraction(ticks, read_ticks())
                per_round[name].append(done)
                LOG.info(f"    {done['samples_per_second']:.1f} samples/s, comm "
                         f"{done['comm_fraction']:.1%} of a step, "
                         f"steal {done['steal_fraction']:.0%}")
                if done["steal_fraction"] >= STEAL_WARN:
                    LOG.info("    (other guests of this VM took that share of its CPU time during "
                             "this run, so its speed reads low)")
        LOG.info(f"scaling: one core trains {max(opts.steps, 4)} global batches of "
                 f"{opts.global_batch} whole, then as the 2 nodes' halves (the same samples)")
        halves = run_halves(opts)
        LOG.info(f"    halves take {1 / halves['ceiling']:.3f}x the time: at most "
                 f"{halves['ceiling']:.1%} for 2 nodes here")
    return summarise(per_round, halves, opts)


def summarise(per_round: dict[str, list[dict[str, Any]]], halves: dict[str, Any],
              opts: ScalingOptions) -> dict[str, Any]:
    """The report from every round's runs. Each efficiency is the median of the ratios taken
    within a round (2 nodes against the 1-node run of the same round), so a machine whose speed
    drifts between rounds does not bias it; each run's figures are its median-speed round's."""
    from cpuft.bench.compare import median_run

    configs = {name: median_run(done) for name, done in per_round.items()}
    ones = [r["samples_per_second"] for r in per_round["1-node"]]

    def efficiencies(name: str, baseline: Callable[[float], float] = float) -> list[float]:
        """2 nodes against ``baseline`` of the same round's 1-node speed, round by round."""
        return [r["samples_per_second"] / (2 * baseline(one))
                for r, one in zip(per_round[name], ones, strict=True)]

    def best(one: float) -> float:
        return best_one_node(one, halves["ceiling"])

    efficiency = statistics.median(efficiencies("2-nodes"))
    report: dict[str, Any] = {
        "rate": opts.rate,
        "global_batch": opts.global_batch,
        "grad_accum": opts.grad_accum,
        "steps": opts.steps,
        "rounds": opts.rounds,
        "configs": configs,
        "scaling_efficiency": efficiency,
        "comm_fraction": configs["2-nodes"]["comm_fraction"],
        "best_one_node_samples_per_second": best(configs["1-node"]["samples_per_second"]),
        "efficiency_vs_best_one_node": statistics.median(efficiencies("2-nodes", best)),
        "target_efficiency": TARGET_EFFICIENCY,
        # scaling_efficiency = machine_ceiling x communication_efficiency
        "machine_ceiling": halves["ceiling"],
        "communication_efficiency": efficiency / halves["ceiling"],
        "batch_halves": halves,
    }
    if opts.rounds > 1:
        report["rounds_scaling_efficiency"] = efficiencies("2-nodes")
    if NO_SYNC in opts.compressions:
        # scaling_efficiency = no_communication_efficiency x communication_keeps
        free = statistics.median(efficiencies(f"2-nodes-{NO_SYNC}"))
        report["no_communication_efficiency"] = free
        report["communication_keeps"] = efficiency / free
    report["target_met"] = report["efficiency_vs_best_one_node"] >= TARGET_EFFICIENCY
    for name, nodes, compression in runs(opts.compressions):
        if nodes == 2 and compression != "none":
            report[f"scaling_efficiency_{compression}"] = statistics.median(efficiencies(name))
            report[f"comm_fraction_{compression}"] = configs[name]["comm_fraction"]
    return report
