"""``cpuft bench --scaling``: 1 node against 2 nodes on the same global batch.

Nodes are network namespaces on this machine, each pinned to its own core with one thread, their
links shaped to ``rate`` with tc; the job is started exactly as on a cluster (``cpuft launch``
through ``ip netns exec {host}``). Needs root.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError
from cpuft.topology import read_topology

TARGET_EFFICIENCY = 0.95


@dataclass(kw_only=True, slots=True)
class ScalingOptions:
    rate: str = "10gbit"
    steps: int = 40
    global_batch: int = 32
    model: str = ""
    max_seq_length: int = 128
    port: int = 29571


RUNS = (("1-node", 1, "none"), ("2-nodes", 2, "none"), ("2-nodes-bf16", 2, "bf16"))


def _launch_args(hostfile: Path, port: int) -> argparse.Namespace:
    return argparse.Namespace(
        nproc_per_node="1", hostfile=str(hostfile), launcher="ssh", master_addr=None,
        master_port=port, max_restarts=0, remote_shell="ip netns exec {host}", mpi="openmpi",
        comm_cores=0,
    )


def run_one(name: str, nodes: int, compression: str, opts: ScalingOptions,
            workdir: Path) -> dict[str, Any]:
    from cpuft.cli.launch_flags import build_launch
    from cpuft.launch.netns import namespace_cluster
    from cpuft.launch.run import run_job

    cores = read_topology().first_thread_per_core()
    out = workdir / name
    train = ["--max-steps", str(opts.steps), "--batch-size", str(opts.global_batch // nodes),
             "--grad-compression", compression, "--output-dir", str(out), "--no-progress",
             "--log-steps", str(opts.steps), "--overwrite",
             "--max-seq-length", str(opts.max_seq_length)]
    if opts.model:
        train += ["--model", opts.model]
    with namespace_cluster(nodes, rate=opts.rate) as cluster:
        hostfile = workdir / f"{name}.hosts"
        hostfile.write_text("".join(f"{h}\n" for h in cluster.hosts))
        cfg = build_launch(_launch_args(hostfile, opts.port), train)
        for i, host in enumerate(cluster.hosts):
            # one node, one core: what a node of the cluster would have to itself
            cfg.host_env[host].update({"CPUFT_RANK_CORES": str(cores[i % len(cores)]),
                                       "OMP_NUM_THREADS": "1"})
        code = run_job(cfg)
    if code != 0:
        raise CpuftError(f"scaling run {name} failed (exit code {code})")
    summary = json.loads((out / "summary.json").read_text())
    return {
        "nodes": nodes,
        "grad_compression": compression,
        "samples_per_second": summary["train_samples_per_second"],
        "comm_fraction": summary["step_time_split"]["comm_wait_fraction"],
        "seconds_per_step": summary["step_time_split"]["seconds_per_step"],
    }


def run_scaling(opts: ScalingOptions, say: Callable[[str], None] = print) -> dict[str, Any]:
    if opts.global_batch % 2:
        raise CpuftError("--global-batch must be even (it is split over 2 nodes)")
    configs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cpuft-scaling-") as tmp:
        for name, nodes, compression in RUNS:
            say(f"scaling: {name} ({opts.steps} steps of {opts.global_batch}, links {opts.rate})")
            configs[name] = run_one(name, nodes, compression, opts, Path(tmp))
            say(f"    {configs[name]['samples_per_second']:.1f} samples/s, comm "
                f"{configs[name]['comm_fraction']:.1%} of a step")
    one = configs["1-node"]["samples_per_second"]
    return {
        "rate": opts.rate,
        "global_batch": opts.global_batch,
        "steps": opts.steps,
        "configs": configs,
        "scaling_efficiency": configs["2-nodes"]["samples_per_second"] / (2 * one),
        "scaling_efficiency_bf16": configs["2-nodes-bf16"]["samples_per_second"] / (2 * one),
        "comm_fraction": configs["2-nodes"]["comm_fraction"],
        "comm_fraction_bf16": configs["2-nodes-bf16"]["comm_fraction"],
        "target_efficiency": TARGET_EFFICIENCY,
    }
