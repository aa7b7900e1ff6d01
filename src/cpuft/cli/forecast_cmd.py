"""``cpuft plan``: a fine-tuning job's time and cost on K nodes, before renting them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DESCRIPTION = """\
Forecast a fine-tuning job's wall time, scaling efficiency and cost on each number of nodes,
from one node's measured pace (--calibration: a run folder or its summary.json; or --calibrate:
a short run here, at the batch and at half of it) and a model of the gradients' all-reduce over
the nodes' links. Every figure taken from a measurement and every assumption is listed.
Writes plan.png (time and cost against nodes) and plan.json to --output-dir; with --json the
last line of stdout is the JSON document.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="time and cost of a job on K nodes, before renting them",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-samples", type=int, required=True, help="training samples")
    p.add_argument("--epochs", type=float, default=1.0)
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
    c.add_argument("--recipe", default="classifier", help="classifier or causal-lm")
    c.add_argument("--model", default="", help="model folder (default: the recipe's)")
    c.add_argument("--seq-len", type=int, default=128, help="max sequence length")
    c.add_argument("--data", default="", help="training file (default: the recipe's data)")
    c.add_argument("--text-columns", default="", help="the --data file's text columns")
    c.add_argument("--label-column", default="", help="the --data file's label column")
    c.add_argument("--batch-size", type=int, default=32,
                   help="samples a step on one node (without --global-batch)")
    t = p.add_argument_group("the nodes to rent (one of)")
    t.add_argument("--instance", default="", help="an instance of the price table")
    t.add_argument("--cores", type=float, default=0.0, help="physical cores a node")
    t.add_argument("--link-gbit", type=float, default=0.0, help="each node's network, Gbit/s")
    t.add_argument("--isa", default="", help="the nodes' ISA class: avx2, avx512, avx512_bf16, "
                                             "amx (default: the calibrated node's)")
    t.add_argument("--price-per-hour", type=float, default=0.0,
                   help="a node's price an hour, US$ (with --cores)")
    t.add_argument("--latency-us", type=float, default=0.0,
                   help="node-to-node latency (default: measured with --cluster-check, else "
                        "assumed 50 us)")
    t.add_argument("--cluster-check", default="",
                   help="the JSON of `cpuft cluster check --json` on the nodes: their measured "
                        "bandwidth and latency")
    p.add_argument("--prices", default="", help="a price table to use instead of cpuft's")
    p.add_argument("--deadline", default="", help="e.g. 30m, 2h: the cheapest K that meets it")
    p.add_argument("--min-gain", type=float, default=0.5,
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
    if args.cores < 0 or args.link_gbit < 0 or args.latency_us < 0 or args.price_per_hour < 0:
        raise CpuftError("--cores, --link-gbit, --latency-us and --price-per-hour must be "
                         "positive")
    if args.cores and not args.link_gbit and not args.cluster_check:
        raise CpuftError("--cores needs --link-gbit G (or --cluster-check FILE)")
    if args.global_batch < 0 or args.batch_size < 1 or not 0 < args.min_gain <= 1:
        raise CpuftError("--global-batch, --batch-size and --min-gain (at most 1) must be "
                         "positive")
    check_writable_dir(args.output_dir, "--output-dir")


def _calibrate(args: argparse.Namespace, nodes: list[int], out: Path) -> Path:
    """Time the job here, at each batch a node gets, and write the calibration file; its
    path."""
    from cpuft.config import config_from
    from cpuft.job.forecast_inputs import calibrate

    given = {"recipe": args.recipe, "model": args.model, "max_seq_length": args.seq_len,
             "train_file": args.data, "progress": False,
             "compile": "off", "text_columns": args.text_columns.split(",") if
             args.text_columns else None, "label_column": args.label_column or None}
    sizes = ([max(1, args.global_batch // k) for k in nodes] if args.global_batch
             else [args.batch_size])
    sizes = sorted({*sizes, max(1, max(sizes) // 2)})  # two at least: a line to read steps off
    cfg = config_from({k: v for k, v in given.items() if v is not None}
                      | {"batch_size": sizes[-1]})
    print(f"calibrating: timing steps of {', '.join(map(str, sizes))} samples", file=sys.stderr)
    inputs = calibrate(cfg, sizes)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "calibration.json"
    path.write_text(json.dumps({"forecast_inputs": inputs}, indent=2) + "\n")
    return path


def _target(args: argparse.Namespace, isa: str) -> tuple[Any, list[str]]:
    from cpuft.errors import CpuftError
    from cpuft.forecast.comm import Link, link_from_cluster_check
    from cpuft.forecast.model import ISA_SPEED, Target
    from cpuft.forecast.prices import SHIPPED, load_prices

    notes = []
    link = None
    if args.cluster_check:
        try:
            link = link_from_cluster_check(json.loads(Path(args.cluster_check).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CpuftError(f"--cluster-check {args.cluster_check}: not a report of cpuft "
                             f"cluster check --json ({type(e).__name__})") from None
    latency = args.latency_us * 1e-6 if args.latency_us else (link.latency_s if link else 50e-6)
    if not args.latency_us and not link:
        notes.append("latency: 50 us a hop (--latency-us or --cluster-check for yours)")
    if args.instance:
        table = Path(args.prices) if args.prices else SHIPPED
        prices = load_prices(table)
        if args.instance not in prices:
            raise CpuftError(f"--instance {args.instance!r} is not in {table}: choose from "
                             f"{', '.join(sorted(prices))}")
        i = prices[args.instance]
        gbit = link.gbit if link else i.network_gbit
        if not link:
            notes.append(f"bandwidth: the {i.network_gbit:g} Gbit/s {i.name} is sold with")
        notes.append(f"prices: {i.cloud} {i.name} from {table.name} (taken {i.taken})")
        return Target(name=i.name, cores=i.cores, isa=i.isa,
                      link=Link(gbit, latency, link.source if link else "the price table"),
                      on_demand_per_hour=i.on_demand_per_hour,
                      spot_per_hour=i.spot_per_hour), notes
    chosen = args.isa or isa
    if chosen not in ISA_SPEED:
        raise CpuftError(f"--isa {chosen!r}: choose from {', '.join(ISA_SPEED)}")
    gbit = args.link_gbit or (link.gbit if link else 0.0)
    return Target(name=f"{args.cores:g}-core node", cores=args.cores, isa=chosen,
                  link=Link(gbit, latency, link.source if link and not args.link_gbit
                            else "--link-gbit"),
                  on_demand_per_hour=args.price_per_hour or None), notes


def run(args: argparse.Namespace) -> int:
    from cpuft.forecast.calibration import read_calibration
    from cpuft.forecast.model import ISA_SPEED, Job
    from cpuft.forecast.sheet import chart, parse_duration, parse_nodes, plan_sheet

    _check(args)
    nodes = parse_nodes(args.nodes)
    deadline = parse_duration(args.deadline) if args.deadline else None
    out = Path(args.output_dir)
    source = _calibrate(args, nodes, out) if args.calibrate else Path(args.calibration)
    cal = read_calibration(source)
    target, notes = _target(args, cal.calibration.isa)
    cal = cal.on_link(target.link)
    if args.hidden_from:
        cal = cal.hiding_as(read_calibration(Path(args.hidden_from)), target.link)
    measured_isa = cal.calibration.isa
    if target.isa != measured_isa:
        ratio = ISA_SPEED[target.isa] / ISA_SPEED[measured_isa]
        notes.append(f"compute: one {target.isa} core trains {ratio:.2f}x as fast as the "
                     f"calibrated {measured_isa} one (cpuft's table, not measured: calibrate "
                     "on such a node for a measured figure)")
    timed, data = cal.calibration.tokens_per_sample, cal.data_tokens_per_sample
    if timed and data and abs(data / timed - 1) > 0.01:
        notes.append(f"compute: in proportion to tokens, the job's data holding {data:.1f} a "
                     f"sample where the timed steps held {timed:.1f}")
    if target.cores != cal.calibration.cores:
        notes.append(f"compute: scales with physical cores, {cal.calibration.cores:g} calibrated "
                     f"to {target.cores:g} (linear)")

    def job_of(k: int) -> Job:
        return Job(samples=args.train_samples, epochs=args.epochs,
                   global_batch=args.global_batch or cal.samples_per_step * k,
                   tokens_per_sample=cal.data_tokens_per_sample)

    sheet = plan_sheet(cal, target, job_of, nodes, deadline_s=deadline,
                       min_gain=args.min_gain, notes=notes)
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
    from cpuft.forecast.sheet import COLUMNS, table_rows, verdicts

    t = sheet["target"]
    print_table(f"cpuft plan: {sheet['model'] or sheet['recipe']} on {t['name']} "
                f"({t['cores']:g} cores, {t['isa']}, {t['link_gbit']:g} Gbit/s)",
                COLUMNS, table_rows(sheet), verdicts(sheet))
