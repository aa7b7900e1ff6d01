"""Which of cpuft plan's assumptions decides its 8-32-node forecasts: predicted scaling
efficiency against the link's rate and the hidden share of communication, from one calibration.

    python benchmarks/plan_sensitivity.py --calibration RUN_DIR --cores 16 --batch-per-node 32

The nodes are of the calibrated node's ISA class (no ISA assumption enters). Prints a markdown
table per node count; the last line of stdout is one JSON document.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from cpuft.forecast.calibration import read_calibration
from cpuft.forecast.comm import Link
from cpuft.forecast.model import Job, Target, forecast

RATES = (1.0, 10.0, 25.0, 100.0)
HIDDEN = (0.0, 0.3, 0.6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", required=True)
    parser.add_argument("--cores", type=float, default=16)
    parser.add_argument("--batch-per-node", type=int, default=32)
    parser.add_argument("--nodes", default="8,16,32")
    parser.add_argument("--latency-us", type=float, default=50.0)
    args = parser.parse_args()
    cal = read_calibration(Path(args.calibration)).calibration
    rows = []
    for k in (int(n) for n in args.nodes.split(",")):
        print(f"\n{k} nodes: scaling efficiency (weak scaling, {args.batch_per_node} samples a "
              f"node)\n\n| link | " + " | ".join(f"hidden {h:.0%}" for h in HIDDEN) + " |")
        print("|---|" + "---|" * len(HIDDEN))
        for rate in RATES:
            link = Link(rate, args.latency_us * 1e-6, "assumed")
            target = Target(name="node", cores=args.cores, isa=cal.isa, link=link)
            job = Job(samples=10**6, epochs=1.0, global_batch=args.batch_per_node * k)
            effs = [forecast(replace(cal, hidden_share=h), target, job, k).efficiency
                    for h in HIDDEN]
            rows += [{"nodes": k, "gbit": rate, "hidden_share": h, "efficiency": e}
                     for h, e in zip(HIDDEN, effs, strict=True)]
            print(f"| {rate:g} Gbit/s | " + " | ".join(f"{e:.0%}" for e in effs) + " |")
    print(json.dumps({"calibration": args.calibration, "cores": args.cores,
                      "batch_per_node": args.batch_per_node, "rows": rows}))


if __name__ == "__main__":
    main()
