"""How close ``cpuft plan`` comes to real runs: a job calibrated on one core here (``calibrate``,
at its batch and half of it), forecast for 1, 2 and 3 namespaced nodes of one core each, then
run on them and timed.

The nodes are network namespaces on this machine, their links shaped with tc. With more nodes
than cores, nodes share cores: the forecast is told so (a node then has cores/nodes of a core),
as it would be told a cloud node's cores. The wall time compared is training's: the steps, from
the first to the last (``train_seconds``), without loading or evaluation.

``python -m cpuft.bench.forecast_check calibrate SETTINGS SIZES OUT`` is the calibration
worker: it pins itself to one core first, so that its speed plan and threads are a one-core
node's.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpuft.bench.scaling import run_on_nodes
from cpuft.bench.start_worker import run_worker
from cpuft.forecast.calibration import read_calibration
from cpuft.forecast.comm import Link
from cpuft.forecast.model import Job, Target, forecast
from cpuft.log import get_logger
from cpuft.speedplan.allocator import preload_env
from cpuft.topology import read_topology

LOG = get_logger(__name__)

LATENCY_S = 50e-6
"""Assumed latency of the namespaces' veth links."""


@dataclass(kw_only=True)
class CheckOptions:
    settings: dict[str, Any]
    """``cpuft train`` settings of the job (recipe, model, data, sequence length...)."""
    global_batches: tuple[int, ...] = (12, 48)
    nodes: tuple[int, ...] = (1, 2, 3)
    steps: int = 20
    rate: str = "1gbit"
    port: int = 29581
    hidden_batch: int = 24
    """The global batch of the 2-node run the hidden share of communication is taken from (not
    one of the runs checked)."""


def _flags(settings: dict[str, Any]) -> list[str]:
    flags = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, list | tuple):
            flags += [flag, ",".join(str(v) for v in value)]
        else:
            flags += [flag, str(value)]
    return flags


def _train(opts: CheckOptions, batch: int) -> list[str]:
    return [*_flags(opts.settings), "--max-steps", str(opts.steps), "--batch-size", str(batch),
            "--log-steps", str(opts.steps), "--no-progress", "--overwrite"]


def gbit(rate: str) -> float:
    """Gbit/s in a tc rate: 1gbit, 800mbit."""
    units = {"gbit": 1.0, "mbit": 1e-3, "kbit": 1e-6}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate.removesuffix(unit)) * scale
    raise ValueError(f"rate {rate!r}: give gbit, mbit or kbit")


def calibrate_one_core(opts: CheckOptions, out: Path) -> Path:
    """The calibration, at each batch a node gets in the check."""
    per_node = sorted({b // k for b in opts.global_batches for k in opts.nodes})
    settings = {**opts.settings, "batch_size": per_node[-1], "progress": False}
    run_worker("cpuft.bench.forecast_check",
               ["calibrate", json.dumps(settings), ",".join(map(str, per_node)), str(out)],
               preload_env() | {"OMP_NUM_THREADS": "1"})
    return out


def check(opts: CheckOptions) -> dict[str, Any]:
    """Each (global batch, nodes): forecast and measured training time, and the error."""
    cores = len(read_topology().first_thread_per_core())
    rows = []
    with tempfile.TemporaryDirectory(prefix="cpuft-plan-check-") as tmp:
        work = Path(tmp)
        LOG.info("calibrating on one core")
        calibration = read_calibration(calibrate_one_core(opts, work / "calibration.json"))
        link = Link(gbit(opts.rate), LATENCY_S, "the namespaces' shaped links")
        LOG.info(f"2 nodes, global batch {opts.hidden_batch}: the share of communication hidden")
        run_on_nodes("hidden", 2, _train(opts, opts.hidden_batch // 2), opts.rate, opts.port,
                     work)
        calibration = calibration.hiding_as(read_calibration(work / "hidden"), link)
        for batch in opts.global_batches:
            for k in opts.nodes:
                target = Target(name="namespace", cores=min(1.0, cores / k), isa=calibration.
                                calibration.isa, link=link)
                LOG.info(f"{k} node(s), global batch {batch}: running")
                summary = run_on_nodes(f"b{batch}-k{k}", k, _train(opts, batch // k), opts.rate,
                                       opts.port, work)
                # The forecast is told the job's data: these steps' real tokens a sample
                tokens = summary["forecast_inputs"]["tokens_per_sample"]
                job = Job(samples=opts.steps * batch, epochs=1.0, global_batch=batch,
                          tokens_per_sample=tokens)
                predicted = forecast(calibration.calibration, target, job, k)
                measured = float(summary["train_seconds"])
                rows.append({"nodes": k, "global_batch": batch, "tokens_per_sample": tokens,
                             "predicted_seconds": predicted.wall_seconds,
                             "measured_seconds": measured,
                             "error": predicted.wall_seconds / measured - 1,
                             "comm_wait_fraction": summary["step_time_split"][
                                 "comm_wait_fraction"]})
                LOG.info(f"    forecast {predicted.wall_seconds:.1f}s, measured "
                         f"{measured:.1f}s: error {rows[-1]['error']:+.1%}")
    return {"rate": opts.rate, "steps": opts.steps, "calibration": {
        "measured": calibration.measured, "assumed": calibration.assumed}, "rows": rows,
        "worst_error": max(abs(r["error"]) for r in rows)}


def main() -> None:
    from cpuft.config import config_from
    from cpuft.job.forecast_inputs import calibrate
    from cpuft.log import quiet

    quiet()
    _, settings, sizes, out = sys.argv[1:5]
    core = read_topology().first_thread_per_core()[0]
    os.sched_setaffinity(0, {core})  # a one-core node's plan: one thread, on this core
    cfg = config_from(json.loads(settings))
    inputs = calibrate(cfg, [int(s) for s in sizes.split(",")])
    Path(out).write_text(json.dumps({"forecast_inputs": inputs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
