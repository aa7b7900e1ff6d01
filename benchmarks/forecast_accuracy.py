"""How close cpuft plan's forecast comes to measured runs on 1, 2 and 3 namespaced nodes here
(each one core, links shaped with tc), for a recipe at two global batch sizes. Needs root.

    python benchmarks/forecast_accuracy.py --recipe classifier              # all-MiniLM-L6-v2
    python benchmarks/forecast_accuracy.py --recipe causal-lm --seq-len 64  # SmolLM2-135M, LoRA

The forecast comes from a calibration on one core (its batch and half of it) and the model's
assumptions (latency, hidden share of communication); see cpuft.bench.forecast_check. The last line
of stdout is one JSON document.
"""

from __future__ import annotations

import argparse
import json

from cpuft.bench.forecast_check import CheckOptions, check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="classifier", choices=("classifier", "causal-lm"))
    parser.add_argument("--model", default="")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batches", default="12,48", help="global batch sizes")
    parser.add_argument("--nodes", default="1,2,3")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rate", default="1gbit")
    args = parser.parse_args()
    settings = {"recipe": args.recipe, "max_seq_length": args.seq_len, "precision": "auto"}
    if args.model:
        settings["model"] = args.model
    if args.recipe == "causal-lm":
        # evaluation is not what is timed: a few rows keep the runs short
        settings |= {"lora_r": 8, "max_eval_samples": 16}
    report = check(CheckOptions(
        settings=settings, global_batches=tuple(int(b) for b in args.batches.split(",")),
        nodes=tuple(int(n) for n in args.nodes.split(",")), steps=args.steps, rate=args.rate))
    for row in report["rows"]:
        print(f"{row['nodes']} node(s), global batch {row['global_batch']}: forecast "
              f"{row['predicted_seconds']:.1f}s, measured {row['measured_seconds']:.1f}s "
              f"({row['error']:+.1%})")
    print(json.dumps({"recipe": args.recipe, **report}))


if __name__ == "__main__":
    main()
