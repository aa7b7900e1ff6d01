"""``cpuft bench``: cpuft against the 2021 recipe and today's best Trainer flags, side by side."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cpuft.cli.flags import add_setting_flags

DESCRIPTION = """\
Train the same model on the same data, sequence length, batch and steps three ways, one after
the other, each in a fresh process:
  stock-2021    fp32, every sequence padded to max length, transformers Trainer defaults,
                started as a plain `python train.py` (system allocator, unpinned)
  trainer-best  Trainer with use_cpu, bf16 (where native), adamw_torch_fused, group_by_length,
                on cpuft's length-grouped batches (the same samples in the same steps),
                started as torch's CPU launcher (torch.backends.xeon.run_cpu) starts it:
                cpuft's allocator, one thread a physical core, the same pinned cores
  cpuft         cpuft's speed-ups
Causal-LM models (smollm2-lora, smollm2-full) run trainer-best (with PEFT for LoRA) and cpuft
on the default causal job's verdicts, and report the validation loss after the same steps and
where cpuft's step time goes (torch.profiler).
Loop models (cnn: the ResNet of examples/cnn_digits.py on random images; rnn: the GRU of
examples/rnn_reviews.py on the review snippets) run a training loop of one's own three ways:
  plain-fp32    fp32, torch's AdamW and defaults, as a tutorial writes it
  plain-best    bf16 autocast where native and faster, fused AdamW, channels-last, started
                as the launcher starts it (cpuft's allocator, threads and pinned cores)
  cpuft         the plain loop after cpuft.optimize, under cpuft.autocast
and report the training loss over the last steps and where cpuft's step time goes.
Your own script (--script train.py -- ARGS), unedited or with cpuft.optimize in it, runs as is
on the same optimizer steps four ways, each timed after a warm-up and stopped once measured:
  plain         python train.py (torchrun with --nproc-per-node), cpuft.optimize switched off
  stock-flags   the same, one OpenMP thread a core and tcmalloc preloaded
  cpuft-launch  cpuft launch: cpuft's process set-up, cpuft.optimize switched off
  cpuft         cpuft launch with the script's cpuft.optimize acting; the report says what
                each of its speed-ups did, or why not
Configurations run in turns, their order rotated each round. Reports samples/s, tokens/s, peak
memory and validation accuracy of each, with its allocator, threads, cores and precision, the
CPU time other processes took meanwhile (a busy machine's ratios are marked), and the FLOPs
utilisation against the measured matmul peak and the CPU's theoretical one. Speed-ups are
ratios of tokens/s (tokens that are not padding), which stock-2021's random batches hold in
other numbers. Writes bench.md, bench.png and bench.json to --output-dir; the last line of
stdout is the JSON document.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure cpuft against the stock ways",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer steps (about 20 minutes on 2 cores)")
    p.add_argument("--models", default="",
                   help="comma-separated: minilm, bert-base (random weights), smollm2-lora, "
                        "smollm2-full, cnn, rnn, classifier model folders, or lora:PATH / "
                        "full:PATH for a decoder (folder or .gguf) (default: minilm, bert-base, "
                        "smollm2-lora, cnn and rnn; smollm2-full too without --quick)")
    p.add_argument("--configs", default="",
                   help="comma-separated subset of the configurations (default: each model's "
                        "own)")
    p.add_argument("--steps", type=int, default=0, help="steps per run (default: by model)")
    add_setting_flags(p, ("batch_size", "max_seq_length"), defaults={
        "batch_size": (0, "by model"), "max_seq_length": (128, "128")})
    p.add_argument("--image-size", type=int, default=0,
                   help="the side of the cnn model's random images (default: 64 with --quick, "
                        "else 128)")
    p.add_argument("--output-dir", default="bench-out", help="where bench.md/png/json go")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every configuration N times in turns and report the median of "
                        "the speed-ups (or, with --scaling, efficiencies) within a round (for "
                        "machines whose speed drifts)")
    p.add_argument("--ablate", action="store_true",
                   help="also run cpuft with each speed-up turned off in turn (and the lazy "
                        "embedding update turned on), on classifier models: what each gives")
    p.add_argument("--seed-each-round", action="store_true",
                   help="round r trains every configuration with seed 42 + r, so that the "
                        "accuracies compared are means over seeds")
    o = p.add_argument_group("your own training script")
    o.add_argument("--script", default="", metavar="SCRIPT.py",
                   help="bench this script; its arguments follow `--`")
    o.add_argument("--warmup-steps", type=int, default=5,
                   help="optimizer steps not timed (default: 5)")
    o.add_argument("--nproc-per-node", type=int, default=1,
                   help="processes the script runs on (default: 1)")
    o.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    s = p.add_argument_group("scaling (needs root: nodes are network namespaces here)")
    s.add_argument("--scaling", action="store_true",
                   help="1 node against 2 nodes on the same global batch, each node one core")
    s.add_argument("--rate", default="10gbit", help="each node's link rate, shaped with tc")
    s.add_argument("--global-batch", type=int, default=32,
                   help="samples per optimizer step, over all nodes")
    s.add_argument("--compressions", default="none,bf16,powersgd,nosync",
                   help="gradient compressions to run on 2 nodes (none, bf16, powersgd), and "
                        "nosync: 2 nodes that send no gradients, what they reach if "
                        "communication were free")
    add_setting_flags(s, ("grad_accum",), defaults={"grad_accum": (1, "1")})
    add_setting_flags(s, ("bucket_cap_mb",), defaults={"bucket_cap_mb": (0.0, "cpuft train's")})
    p.set_defaults(handler=run)


def run_scaling_cmd(args: argparse.Namespace) -> int:
    from cpuft.bench.report import scaling_chart
    from cpuft.bench.scaling import COMPRESSIONS, NO_SYNC, ScalingOptions, run_scaling
    from cpuft.errors import CpuftError

    models = [m for m in args.models.split(",") if m and m != "minilm" and m != "bert-base"]
    compressions = tuple(c for c in args.compressions.split(",") if c)
    unknown = set(compressions) - set(COMPRESSIONS)
    if unknown:
        raise CpuftError(f"--compressions: unknown {', '.join(sorted(unknown))}: use "
                         f"{', '.join(COMPRESSIONS)}")
    opts = ScalingOptions(rate=args.rate, global_batch=args.global_batch,
                          steps=args.steps or (20 if args.quick else 40),
                          model=models[0] if models else "", max_seq_length=args.max_seq_length,
                          compressions=compressions, rounds=args.rounds,
                          grad_accum=args.grad_accum, bucket_cap_mb=args.bucket_cap_mb)
    report = run_scaling(opts)
    out = Path(args.output_dir)
    saved = save_outputs(out, {
        "scaling.json": lambda p: p.write_text(json.dumps(report, indent=2) + "\n"),
        "scaling.png": lambda p: scaling_chart(report, p),
    })
    ok = "met" if report["target_met"] else "NOT met"
    others = "".join(f"; {c} gradients {report[f'scaling_efficiency_{c}']:.1%} (comm "
                     f"{report[f'comm_fraction_{c}']:.1%})"
                     for c in compressions if c not in ("none", NO_SYNC))
    print(f"2-node scaling efficiency {report['scaling_efficiency']:.1%}, communication "
          f"{report['comm_fraction']:.1%} of a step (target {report['target_efficiency']:.0%}: "
          f"{ok}){others}")
    print(f"of which: halving the batch leaves 2 nodes at most {report['machine_ceiling']:.1%} "
          f"here (one core, the same samples whole and halved); cpuft's 2-node run reaches "
          f"{report['communication_efficiency']:.1%} of that")
    if "no_communication_efficiency" in report:
        print(f"2 nodes that send no gradients reach {report['no_communication_efficiency']:.1%} "
              "(what running both nodes at once costs, communication aside); cpuft's "
              f"communication keeps {report['communication_keeps']:.1%} of that")
    if report["machine_ceiling"] > 1:
        print(f"one core trains the halves faster than whole batches of {opts.global_batch}: "
              f"against 1 node accumulating halves, 2 nodes reach "
              f"{report['efficiency_vs_best_one_node']:.1%} (the figure the target is read on)")
    if opts.rounds > 1:
        print("rounds: " + ", ".join(f"{e:.1%}" for e in report["rounds_scaling_efficiency"]))
    return finish(report, saved)


def save_outputs(out: Path, writers: dict[str, Callable[[Path], object]]) -> list[Path] | str:
    """Write each file into ``out``: the paths written, or why they could not be (the report
    is still printed, so a run of many minutes is not lost to a full disk)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, write in writers.items():
            write(out / name)
    except OSError as e:
        return f"could not write the report into {out}: {e}"
    return [out / name for name in writers]


def finish(report: dict[str, Any], saved: list[Path] | str) -> int:
    """The closing lines: where the files went (or why not, on stderr); then the JSON line."""
    if isinstance(saved, str):
        print(f"cpuft: {saved}; the JSON report is the last line of stdout", file=sys.stderr)
    else:
        print("wrote " + ", ".join(str(p) for p in saved))
    print(json.dumps(report))
    return 1 if isinstance(saved, str) else 0


RATE = re.compile(r"\d+(\.\d+)?([kmgt]?(bit|bps))")


def check_args(args: argparse.Namespace) -> None:
    """Refuse what cannot run before anything starts (the runs take minutes)."""
    from cpuft.bench.spec import LM_MODELS, LOOP_MODELS, MODELS, example_path, lm_model
    from cpuft.cli.output import check_writable_dir
    from cpuft.errors import CpuftError
    from cpuft.recipes.hf_models import folder_sequence_limit, resolve_causal_lm

    if args.steps < 0 or args.batch_size < 0:
        raise CpuftError("--steps and --batch-size must be positive")
    if args.max_seq_length < 2:
        raise CpuftError("--max-seq-length must be at least 2")
    if args.image_size and not 8 <= args.image_size <= 1024:
        raise CpuftError("--image-size must be between 8 and 1024 pixels")
    for model in filter(None, (m.strip() for m in args.models.split(","))):
        lm = lm_model(model)
        if lm:
            if args.scaling:
                raise CpuftError(f"--scaling measures classifiers: {model} is a causal LM")
            resolve_causal_lm(lm[1])  # the decoder is there (SmolLM2 installed, a path found)
            continue
        if model in LOOP_MODELS:
            if args.scaling:
                raise CpuftError(f"--scaling measures classifiers: {model} is a loop model")
            example_path(model)
            continue
        if model not in MODELS and not Path(model).is_dir():
            raise CpuftError(f"--models: {model!r} is neither {', '.join(MODELS)}, "
                             f"{', '.join(LM_MODELS)}, {', '.join(LOOP_MODELS)} nor a model "
                             "folder")
        limit = folder_sequence_limit(model) if model not in MODELS else None
        if limit is not None and args.max_seq_length > limit:
            # stock-2021 pads every row to --max-seq-length: the run would fail in the model
            raise CpuftError(f"--max-seq-length {args.max_seq_length} is longer than {model} "
                             f"takes ({limit} tokens): pass --max-seq-length {limit} or less")
    if args.scaling and not RATE.fullmatch(args.rate.lower()):
        raise CpuftError(f"--rate {args.rate!r}: give a tc rate such as 10gbit, 800mbit")
    check_writable_dir(args.output_dir, "--output-dir")


def run_script_cmd(args: argparse.Namespace) -> int:
    from cpuft.bench.script import SCRIPT_CONFIGS, ScriptBench, check, run_script_bench
    from cpuft.bench.script_report import (
        SCRIPT_COLUMNS,
        script_chart,
        script_markdown,
        script_rows,
        script_verdicts,
    )
    from cpuft.cli.output import check_writable_dir, print_table
    from cpuft.errors import CpuftError

    if args.models or args.scaling or args.quick:
        raise CpuftError("--script benches a script of your own: leave out --models, --quick "
                         "and --scaling")
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    configs = tuple(c.strip() for c in args.configs.split(",") if c.strip()) or SCRIPT_CONFIGS
    bench = ScriptBench(script=args.script, args=tuple(script_args), configs=configs,
                        nproc=args.nproc_per_node, warmup_steps=args.warmup_steps,
                        steps=args.steps or 20, rounds=args.rounds)
    check(bench)
    check_writable_dir(args.output_dir, "--output-dir")
    out = Path(args.output_dir)
    report = run_script_bench(bench, out)
    saved = save_outputs(out, {
        "bench.md": lambda p: p.write_text(script_markdown(report)),
        "bench.json": lambda p: p.write_text(json.dumps(report, indent=2) + "\n"),
        "bench.png": lambda p: script_chart(report, p),
    })
    print_table(f"cpuft bench --script {report['script']}", SCRIPT_COLUMNS, script_rows(report),
                script_verdicts(report), left=("configuration",))
    return finish(report, saved)


def run(args: argparse.Namespace) -> int:
    from cpuft.bench.report import COLUMNS, bar_chart, markdown, rows, verdicts
    from cpuft.bench.runner import BenchOptions, run_bench
    from cpuft.cli.output import print_table
    from cpuft.errors import CpuftError

    if args.script:
        return run_script_cmd(args)
    if args.script_args:
        raise CpuftError(f"unexpected {' '.join(args.script_args)}: arguments after `--` are "
                         "a --script's")
    check_args(args)
    if args.scaling:
        return run_scaling_cmd(args)
    opts = BenchOptions(
        models=[m.strip() for m in args.models.split(",") if m.strip()],
        configs=[c.strip() for c in args.configs.split(",") if c.strip()],
        quick=args.quick, steps=args.steps, batch_size=args.batch_size,
        max_seq_length=args.max_seq_length, rounds=args.rounds, image_size=args.image_size,
        seed_each_round=args.seed_each_round, ablate=args.ablate,
    )
    report = run_bench(opts)
    saved = save_outputs(Path(args.output_dir), {
        "bench.md": lambda p: p.write_text(markdown(report)),
        "bench.json": lambda p: p.write_text(json.dumps(report, indent=2) + "\n"),
        "bench.png": lambda p: bar_chart(report, p),
    })
    print_table("cpuft bench", COLUMNS, rows(report), verdicts(report),
                left=("model", "configuration"))
    return finish(report, saved)
