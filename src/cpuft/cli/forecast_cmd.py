"""``cpuft plan``: a fine-tuning job's time and cost on K nodes, before renting them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cpuft.cli.flags import add_setting_flags, given_flags
from cpuft.cli.numbers import finite_float

DESCRIPTION = """\
Forecast a fine-tuning job's wall time, scaling efficiency and cost on each number of nodes,
from one node's measured pace (--calibration: a run folder or its summary.json; or --calibrate:
a short run here, at the batch and at half of it) and a model of the gradients' all-reduce over
the nodes' links. Every figure taken from a measurement and every assumption is listed.
Writes plan.png (time and cost against nodes) and plan.json to --output-dir; with --json the
last line of stdout is the JSON document.
"""


CALIBRATED = ("recipe", "model", "max_seq_length", "train_file", "text_columns", "label_column",
              "batch_size")
"""cpuft train's settings that --calibrate takes: the job timed here (batch_size: a node's
batch without --global-batch)."""


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="time and cost of a job on K nodes, before renting them",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-samples", type=int, required=True, help="training samples")
    p.add_argument("--epochs", type=finite_float, default=1.0,
                   help="passes over the training samples (default: 1)")
    p.add_argument("--nodes", default="1,2,4,8,16,32", help="node counts to forecast")
    p.add_argument("--global-batch", type=int, default=0,
                   help="samples a step over all nodes (default: the calibrated batch on every "
                        "node, as the same cpuft train command gives on K nodes)")
    c = p.add_argument_group("calibration (one of)")
    c.add_argument("--calibration", default="",
                   help="a run folder of cpuft train, its summary.json, or a calibration file")
    c.add_argument("--calibrate", action="store_true",
                   help="time this job here first (under a minute), with the flags below")
    c.add_argument("--hidden-from", default="",
                   help="a run folder of the same job on several nodes (its link given here): "
                        "the share of communication it hid behind the backward pass")
    add_setting_flags(c, CALIBRATED, aliases={"max_seq_length": ["--seq-len"],
                                              "train_file": ["--data"]})
    t = p.add_argument_group("the nodes to rent (one of)")
    t.add_argument("--instance", default="", help="an instance of the price table")
    t.add_argument("--cores", type=finite_float, default=0.0, help="physical cores a node")
    t.add_argument("--link-gbit", type=finite_float, default=None,
                   help="each node's network, Gbit/s")
    t.add_argument("--isa", default="", help="the nodes' ISA class: avx2, avx512, avx512_bf16, "
                                             "amx (default: the calibrated node's)")
    t.add_argument("--price-per-node-hour", "--price-per-hour", dest="price_per_hour",
                   type=finite_float, default=0.0,
                   help="a node's price an hour, US$ (with --cores), as cpuft report takes it")
    t.add_argument("--latency-us", type=finite_float, default=0.0,
                   help="node-to-node latency (default: measured with --cluster-check, else "
                        "assumed 50 us)")
    t.add_argument("--cluster-check", default="",
                   help="the JSON of `cpuft cluster check --json` on the nodes: their measured "
                        "bandwidth and latency")
    p.add_argument("--prices", default="", help="a price table to use instead of cpuft's")
    s = p.add_argument_group("spot nodes")
    s.add_argument("--preemptions-per-hour", type=finite_float, default=0.0,
                   help="how often a spot node is taken back, per node-hour (e.g. 0.05): the "
                        "spot column then counts the work lost and the restarts")
    s.add_argument("--checkpoint-every", default="10m",
                   help="time between checkpoints (cpuft train --save-every): a preemption "
                        "loses half of it on average")
    s.add_argument("--restart-time", default="60s",
                   help="time from a lost node to training again: rendezvous, start, load")
    p.add_argument("--deadline", default="", help="e.g. 30m, 2h: the cheapest K that meets it")
    p.add_argument("--min-gain", type=finite_float, default=0.5,
                   help="a node pays while it adds at least this share of one node's speed")
    p.add_argument("--output-dir", default="plan-out", help="where plan.png/json go")
    p.add_argument("--json", action="store_true", help="end with the JSON document")
    p.set_defaults(handler=run)


def _check(args: argparse.Namespace) -> None:
    from cpuft.cli.output import check_writable_dir
    from cpuft.errors import CpuftError

    if args.train_samples < 1 or args.epochs <= 0:
        raise CpuftError("--train-samples and --epochs must be positive")
    if bool(args.calibration) == args.calibrate:
        raise CpuftError("give --calibration RUN_DIR or --calibrate (one of them)")
    if bool(args.instance) == bool(args.cores):
        raise CpuftError("give --instance NAME or --cores C with --link-gbit G (one of them)")
    if args.cores < 0 or args.latency_us < 0 or args.price_per_hour < 0:
        raise CpuftError("--cores, --latency-us and --price-per-node-hour must be positive")
    if args.link_gbit is not None and args.link_gbit <= 0:
        raise CpuftError(f"--link-gbit must be positive, not {args.link_gbit:g}")
    if args.cores and args.link_gbit is None and not args.cluster_check:
        raise CpuftError("--cores needs --link-gbit G (or --cluster-check FILE)")
    if args.prices and not args.instance:
        raise CpuftError("--prices is read for --instance NAME: give an instance of it, or "
                         "drop --prices")
    if args.preemptions_per_hour < 0:
        raise CpuftError("--preemptions-per-hour must be 0 or positive")
    if args.global_batch < 0 or not 0 < args.min_gain <= 1:
        raise CpuftError("--global-batch and --min-gain (at most 1) must be positive")
    check_writable_dir(args.output_dir, "--output-dir")


def _calibrate(args: argparse.Namespace, nodes: list[int], out: Path) -> Path:
    """Time the job here, at each batch a node gets, and write the calibration file; its
    path."""
    from cpuft.config import build_config, config_from
    from cpuft.job.forecast_inputs import calibrate

    cfg = build_config({}, {**given_flags(args, CALIBRATED), "progress": False,
                            "compile": "off"})
    batch = cfg.optimization.batch_size
    sizes = [max(1, args.global_batch // k) for k in nodes] if args.global_batch else [batch]
    sizes = sorted({*sizes, max(1, max(sizes) // 2)})  # two at least: a line to read steps off
    cfg = config_from({"batch_size": sizes[-1]}, base=cfg)
    print(f"calibrating: timing steps of {', '.join(map(str, sizes))} samples", file=sys.stderr)
    inputs = calibrate(cfg, sizes)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "calibration.json"
    path.write_text(json.dumps({"forecast_inputs": inputs}, indent=2) + "\n")
    return path


def run(args: argparse.Namespace) -> int:
    from cpuft.durations import parse_duration
    from cpuft.forecast.calibration import read_calibration
    from cpuft.forecast.model import Job
    from cpuft.forecast.preemption import Preemption
    from cpuft.forecast.sheet import chart, parse_nodes, plan_sheet
    from cpuft.forecast.target import NodeRequest, compute_notes, target_of

    _check(args)
    nodes = parse_nodes(args.nodes)
    deadline = parse_duration(args.deadline, "--deadline") if args.deadline else None
    every = parse_duration(args.checkpoint_every, "--checkpoint-every")
    restart = parse_duration(args.restart_time, "--restart-time")
    preemption = (Preemption(args.preemptions_per_hour, every, restart)
                  if args.preemptions_per_hour else None)
    out = Path(args.output_dir)
    source = _calibrate(args, nodes, out) if args.calibrate else Path(args.calibration)
    cal = read_calibration(source)
    target, notes = target_of(NodeRequest(
        instance=args.instance, prices=args.prices, cores=args.cores,
        link_gbit=args.link_gbit or 0.0,
        isa=args.isa, price_per_hour=args.price_per_hour, latency_us=args.latency_us,
        cluster_check=args.cluster_check), cal.calibration.isa)
    cal = cal.on_link(target.link)
    if args.hidden_from:
        cal = cal.hiding_as(read_calibration(Path(args.hidden_from), "--hidden-from"),
                          target.link)
    notes += compute_notes(cal, target)

    def job_of(k: int) -> Job:
        return Job(samples=args.train_samples, epochs=args.epochs,
                   global_batch=args.global_batch or cal.samples_per_step * k,
                   tokens_per_sample=cal.data_tokens_per_sample)

    sheet = plan_sheet(cal, target, job_of, nodes, deadline_s=deadline,
                       min_gain=args.min_gain, notes=notes, preemption=preemption)
    _print(sheet)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(sheet, indent=2) + "\n")
    chart(sheet, out / "plan.png")
    print(f"wrote {out / 'plan.png'}, {out / 'plan.json'}")
    if args.json:
        print(json.dumps(sheet))
    return 0


def _print(sheet: dict[str, Any]) -> None:
    from cpuft.cli.output import print_table
    from cpuft.forecast.sheet import columns, table_rows, verdicts

    t = sheet["target"]
    print_table(f"cpuft plan: {sheet['model'] or sheet['recipe']} on {t['name']} "
                f"({t['cores']:g} cores, {t['isa']}, {t['link_gbit']:g} Gbit/s)",
                columns(sheet), table_rows(sheet), verdicts(sheet))
