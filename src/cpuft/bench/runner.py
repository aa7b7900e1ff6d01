"""Run every configuration on every model, each in a fresh worker process, then compare."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cpuft.bench.compare import compare, faster_matmul, median_run
from cpuft.bench.placement import worker_env
from cpuft.bench.spec import (
    CONFIGS,
    LM_CONFIGS,
    LM_LR,
    LOOP_CONFIGS,
    LOOP_LR,
    LOOP_MODELS,
    OPTIONAL_CONFIGS,
    VARIANTS,
    RunSpec,
    configs_for,
    lm_model,
)
from cpuft.bench.start_worker import run_worker
from cpuft.bench.steal import BUSY_WARN
from cpuft.bench.utilisation import read_clock_ghz, theoretical_peaks
from cpuft.errors import CpuftError
from cpuft.log import get_logger
from cpuft.speedplan import compile_cache
from cpuft.speedplan.allocator import preload_env
from cpuft.topology import read_topology

LOG = get_logger(__name__)

# (steps, batch size, validation rows scored; 0 = all). bert-base has random weights: its
# accuracy only shows that all three ways train alike, so fewer rows are scored. "lm" is every
# causal-LM model's. For the CNN the third figure is the side of its images instead.
SIZES = {
    "quick": {"minilm": (100, 32, 0), "bert-base": (12, 8, 256), "lm": (20, 16, 128),
              "cnn": (16, 16, 64), "rnn": (40, 32, 0)},
    "full": {"minilm": (321, 32, 0), "bert-base": (40, 8, 0), "lm": (40, 32, 256),
             "cnn": (30, 32, 128), "rnn": (120, 64, 0)},
}
DEFAULT_MODELS = {"quick": ["minilm", "bert-base", "smollm2-lora", "cnn", "rnn"],
                  "full": ["minilm", "bert-base", "smollm2-lora", "smollm2-full", "cnn", "rnn"]}
TARGETS = {"speedup_vs_trainer_best": 1.5, "speedup_vs_trainer_compile": 1.5,
           "speedup_vs_stock_2021": 3.0, "speedup_vs_plain_best": 1.0}
MODEL_TARGETS = {"cnn": {"speedup_vs_plain_best": 1.05},
                 "rnn": {"speedup_vs_plain_best": 1.05}}
"""Targets of one model, in place of ``TARGETS``' figure for the same key."""
EVAL_LOSS_TOLERANCE = 0.01
"""A causal LM's eval loss after cpuft's steps may differ from the stock run's by this much
(relative): the same training, up to float rounding and dropout masks."""
PROFILE_STEPS = 2
WORKER_TIMEOUT_S = 3600.0


@dataclass(kw_only=True, slots=True)
class BenchOptions:
    """What ``cpuft bench`` runs."""

    models: list[str] = field(default_factory=list)
    """Empty: DEFAULT_MODELS for --quick or the full run."""
    configs: list[str] = field(default_factory=list)
    """Empty: each model's own (``configs_for``)."""
    quick: bool = False
    steps: int = 0
    """Overrides the steps of every model when positive."""
    batch_size: int = 0
    """Overrides the batch size of every model when positive."""
    max_seq_length: int = 128
    image_size: int = 0
    """The side of the cnn model's images when positive (else the size's own)."""
    rounds: int = 1
    """Run every configuration this many times, in turns; speed-ups are the median of the
    ratios within a round (a noisy machine drifts between runs far apart in time)."""
    ablate: bool = False
    """Also run cpuft with each speed-up off in turn (``VARIANTS``) on classifier models."""
    seed_each_round: bool = False
    """Round r trains with seed 42 + r on every side: accuracy is then the mean over seeds."""


def plan_runs(opts: BenchOptions) -> list[RunSpec]:
    known = tuple(dict.fromkeys(CONFIGS + OPTIONAL_CONFIGS + tuple(VARIANTS) + LM_CONFIGS
                                + LOOP_CONFIGS))
    unknown = [c for c in opts.configs if c not in known]
    if unknown:
        raise CpuftError(f"unknown configuration {unknown[0]!r}: choose from {', '.join(known)}")
    size = "quick" if opts.quick else "full"
    sizes = SIZES[size]
    runs = []
    for model in opts.models or DEFAULT_MODELS[size]:
        lm = lm_model(model)
        # A model folder sized as the users' usually are: bert-base's steps, batch and, in
        # --quick runs, evaluation on a subset.
        steps, batch, third = sizes["lm"] if lm else sizes.get(
            model, sizes["bert-base" if Path(model).is_dir() else "minilm"])
        own = configs_for(model)
        configs = [c for c in opts.configs if c in own] if opts.configs else list(
            c for c in own if c not in OPTIONAL_CONFIGS and c not in VARIANTS)
        if opts.ablate and set(VARIANTS) <= set(own):  # classifiers: the variants are theirs
            configs = list(dict.fromkeys([*configs, "cpuft", *VARIANTS]))
        if not configs:
            raise CpuftError(f"--configs: {model} runs none of {', '.join(opts.configs)}; its "
                             f"configurations are {', '.join(own)}")
        for config in configs:
            spec = RunSpec(
                config=config, model=model, steps=opts.steps or steps,
                batch_size=opts.batch_size or batch, max_seq_length=opts.max_seq_length,
                eval_samples=third if model not in LOOP_MODELS else 0,
            )
            if lm:
                spec = replace(spec, lr=LM_LR[lm[0]],
                               profile_steps=PROFILE_STEPS if config == "cpuft" else 0)
            elif model in LOOP_MODELS:
                spec = replace(spec, lr=LOOP_LR[model], weight_decay=0.0,
                               image_size=(opts.image_size or third) if model == "cnn" else 0,
                               profile_steps=PROFILE_STEPS if config == "cpuft" else 0)
            runs.append(spec)
    return runs


def _run(spec: RunSpec, cpuft_env: dict[str, str]) -> dict[str, Any]:
    env, unset = worker_env(spec.config, cpuft_env)
    stdout = run_worker("cpuft.bench.worker", [spec.to_json()], env, unset,
                        timeout=WORKER_TIMEOUT_S)
    lines = [line for line in stdout.splitlines() if line.startswith("{\"")]
    if not lines:
        raise CpuftError(f"benchmark worker for {spec.config} on {spec.model} printed no result")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def compile_measurement(eager: dict[str, Any], compiled: dict[str, Any],
                        batch_size: int) -> compile_cache.CompileMeasurement:
    """Steady pace of each run (median of its second half) and the compiled run's start-up cost."""

    def steady(steps: list[float]) -> float:
        return statistics.median(steps[len(steps) // 2 :])

    eager_step, compiled_step = steady(eager["step_seconds"]), steady(compiled["step_seconds"])
    overhead = sum(compiled["step_seconds"]) - compiled_step * len(compiled["step_seconds"])
    return compile_cache.CompileMeasurement(
        eager_seconds_per_sample=eager_step / batch_size,
        compiled_seconds_per_sample=compiled_step / batch_size,
        compile_seconds=max(overhead, 0.0),
    )


def turn_order(runs: list[RunSpec], round_: int) -> list[int]:
    """The indices of ``runs`` in the order round ``round_`` runs them: model by model, each
    model's configurations rotated by the round, so that none always runs first or last."""
    order: list[int] = []
    for model in dict.fromkeys(spec.model for spec in runs):
        own = [i for i, spec in enumerate(runs) if spec.model == model]
        shift = round_ % len(own)
        order += own[shift:] + own[:shift]
    return order


def run_bench(opts: BenchOptions) -> dict[str, Any]:
    if opts.rounds < 1:
        raise CpuftError("--rounds must be at least 1")
    runs = plan_runs(opts)
    cpuft_env = preload_env()
    matmul_spec = RunSpec(config="matmul", model="-", steps=0, batch_size=0)
    LOG.info("measuring matmul FLOP/s (bf16, fp32)")
    matmul_before = _run(matmul_spec, cpuft_env)
    rounds: list[list[dict[str, Any]]] = [[] for _ in runs]
    for round_ in range(opts.rounds):
        for n, i in enumerate(turn_order(runs, round_)):
            spec = replace(runs[i], seed=runs[i].seed + round_) if opts.seed_each_round \
                else runs[i]
            turn = f" (round {round_ + 1}/{opts.rounds})" if opts.rounds > 1 else ""
            LOG.info(f"[{n + 1}/{len(runs)}] {spec.model} {spec.config}: {spec.steps} steps of "
                     f"{spec.batch_size}, seed {spec.seed}{turn}")
            r = _run(spec, cpuft_env)
            scores = "".join(f"{name.replace('_', ' ')} {r[name]:.4f}, " for name in (
                "accuracy", "eval_loss", "train_loss") if name in r)
            LOG.info(f"    {r['samples_per_second']:.1f} samples/s, "
                     f"{r['tokens_per_second']:.0f} tokens/s "
                     f"({r['tokens_per_sample']:.1f} a sample), {scores}"
                     f"peak {r['peak_memory_mb']:.0f} MB, {r['precision']}, "
                     f"allocator {r['allocator']}, {r['threads']} threads on CPUs "
                     f"{r.get('cpus')}, steal {r['steal_fraction']:.0%}, other processes "
                     f"{r.get('others_fraction', 0.0):.0%}")
            if r.get("others_fraction", 0.0) >= BUSY_WARN:
                LOG.warning(f"    other processes took {r['others_fraction']:.0%} of the "
                            "machine during this run: its round's ratios are marked busy")
            rounds[i].append(r)
    LOG.info("measuring matmul FLOP/s again (the faster of the two is the peak)")
    matmul = faster_matmul(matmul_before, _run(matmul_spec, cpuft_env))
    results = [median_run(done, "tokens_per_second") for done in rounds]
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for spec, r in zip(runs, results, strict=True):
        by_model.setdefault(spec.model, {})[spec.config] = r
    for spec in runs:
        done = by_model[spec.model]
        if spec.config == "cpuft-compile" and "cpuft" in done:
            m = compile_measurement(done["cpuft"], done["cpuft-compile"], spec.batch_size)
            compile_cache.store(compile_cache.key(
                cpu=read_topology().model_name, model=spec.model,
                precision=done["cpuft"]["precision"],
                max_seq_length=spec.max_seq_length, torch_version=done["cpuft"]["torch"],
            ), m)
            LOG.info(f"{spec.model}: compile {m.speedup:.2f}x steady speed, costs "
                     f"{m.compile_seconds:.0f}s; saved for `cpuft train --compile auto`")
    topology = read_topology()
    theoretical = theoretical_peaks(topology.isa.class_name, topology.model_name,
                                    int(matmul_before["threads"]), *read_clock_ghz())
    report = compare(results, matmul, theoretical)
    report["quick"] = opts.quick
    report["targets"] = TARGETS
    report["model_targets"] = {m: MODEL_TARGETS[m] for m in report["models"] if m in MODEL_TARGETS}
    report["eval_loss_tolerance"] = EVAL_LOSS_TOLERANCE
    return report
