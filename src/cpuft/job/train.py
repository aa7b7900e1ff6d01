"""The ``cpuft train`` job: check the run folder, build the run, fine-tune, evaluate, save and
write summary.json."""

from __future__ import annotations

import json
import os
import resource
from dataclasses import replace
from pathlib import Path
from typing import Any

from cpuft.config import TrainConfig, to_flat
from cpuft.distributed.group import DistContext
from cpuft.engine.checkpoint import latest_checkpoint, remove_checkpoints
from cpuft.engine.fit import Evaluate, FitResult, LossNotFinite, fit
from cpuft.errors import CpuftError
from cpuft.job import elastic
from cpuft.job.build import Run, best_metric, build_run
from cpuft.job.forecast_inputs import forecast_inputs
from cpuft.job.outdir import (
    check_output_dir,
    check_resume_settings,
    clear_output_dir,
    fit_to_world,
    metric_sinks,
    settle_previous,
    write_marker,
)
from cpuft.launch.commands import ELASTIC_ENV
from cpuft.log import get_logger
from cpuft.metrics import MetricLogger, MetricSink
from cpuft.metrics.pace import steady_rate, steady_seconds, warmup_steps
from cpuft.paths import write_json
from cpuft.runtime import start
from cpuft.runtime.process import versions
from cpuft.speedplan.speed_plan import SpeedPlan

LOG = get_logger(__name__)


def train(cfg: TrainConfig) -> dict[str, Any]:
    """The ``cpuft train`` job in this process, one rank of a job or the only one: set the
    process up, train, and leave the job; the summary (empty on ranks other than 0)."""
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    runtime = start(cfg)
    try:
        out = Path(cfg.output.output_dir)
        # Every start of an elastic job follows a change of membership, or is the first.
        begun = elastic.begin(out, runtime.dist) if os.environ.get(ELASTIC_ENV) else None
        if restarted or begun is not None or cfg.output.resume == "auto":
            # torchrun restarted the workers, or a requeued job asks: continue from the last
            # checkpoint, or replace a start that never reached one.
            found = latest_checkpoint(out) is not None
            if not found and not cfg.output.overwrite:
                refuse_finished(out)
            cfg = replace(cfg, output=replace(cfg.output, resume="yes" if found else "no",
                                              overwrite=cfg.output.overwrite or not found))
            if begun is not None and not found:
                cfg, begun = _first_elastic_start(cfg, begun, runtime.dist)
        return run_train(cfg, runtime.plan, runtime.dist, begun)
    finally:
        runtime.close()


def refuse_finished(out: Path) -> None:
    """A finished run keeps no checkpoint: one line rather than training it again over its
    model."""
    if (out / "summary.json").is_file() and (out / "cpuft_run.json").is_file():
        raise CpuftError(f"the run in {out} has finished (summary.json) and keeps no "
                         "checkpoint to resume from: pass --overwrite to train it again, or "
                         "another --output-dir")


def _first_elastic_start(cfg: TrainConfig, begun: elastic.Start,
                         dist: DistContext | None) -> tuple[TrainConfig, elastic.Start]:
    """The batch of an elastic run's first start, where not every node is in yet."""
    most = int(os.environ[ELASTIC_ENV].rpartition(":")[2])
    world, local = (dist.info.world_size, dist.info.local_world_size) if dist else (1, 1)
    given = cfg.optimization.batch_size
    return (elastic.full_job_batch(cfg, world, most * local),
            replace(begun, given_batch=given))


def run_train(cfg: TrainConfig, plan: SpeedPlan, dist: DistContext | None = None,
              begun: elastic.Start | None = None) -> dict[str, Any]:
    """Run the whole job and return the summary (also written to summary.json by rank 0);
    ``begun``: this start of an elastic job."""
    main = dist is None or dist.info.is_main
    world = dist.info.world_size if dist else 1
    out, resume_from = Path(cfg.output.output_dir), None
    if main:
        out, resume_from = check_output_dir(cfg)
    if cfg.output.resume == "yes":
        cfg = fit_to_world(out, cfg, world)
    run = build_run(cfg, plan, dist=dist)
    cfg = run.cfg
    aside = None
    if main:
        if resume_from is not None:
            check_resume_settings(out, cfg, world)
        aside = clear_output_dir(out, resume_from)
    try:
        return _train(run, out, resume_from, dist, begun)
    finally:
        if main:
            settle_previous(out, aside)


def _train(run: Run, out: Path, resume_from: Path | None, dist: DistContext | None,
           begun: elastic.Start | None) -> dict[str, Any]:
    cfg, main = run.cfg, dist is None or dist.info.is_main
    # Where the nodes do not share the folder, the first rank of each keeps its own run files.
    own_copy = begun is not None and not begun.shared and dist is not None \
        and dist.info.local_rank == 0 and not main
    if dist is not None:
        dist.barrier()  # rank 0 has checked, cleared or found the output dir
        if not main:
            resume_from = latest_checkpoint(out) if cfg.output.resume == "yes" else None
    if begun is not None and (main or own_copy):
        elastic.write_history(out, begun.history)
        if own_copy:
            write_marker(out, run.cfg, run.world_size, resume_from is not None,
                         begun.given_batch)
    before = _before(run, out, resume_from, main)
    logger = MetricLogger(_start_run_folder(run, out, resume_from,
                                            begun.given_batch if begun else None)
                          if main else [])
    if main:
        LOG.info(_describe(run))
        if run.plan.precision == "bf16" and "no native bf16" in run.plan.precision_reason:
            LOG.warning("bf16 was asked for, but this CPU has no native bf16 (avx512_bf16 or "
                        "AMX): it will be emulated and slower than fp32")
        if dist is not None and not cfg.distributed.grad_sync:
            LOG.info("--no-grad-sync: the ranks send no gradients, so each trains apart on its "
                     "own share; this run measures speed, its model is rank 0's alone")
    fit_cfg = run.fit_config(out, resume_from)
    if begun is not None:
        fit_cfg = replace(fit_cfg, checkpoint_every_node=not begun.shared,
                          progress_file=elastic.PROGRESS_FILE,
                          after_stop="an elastic job goes on from there once its nodes meet "
                                     "again (a node came or went), or with --resume")
    try:
        result = fit(run.task.model, run.source, fit_cfg, loss_fn=run.task.loss_fn,
                     logger=logger, dist=dist, evaluate=_evaluation(run))
    except LossNotFinite as e:
        raise CpuftError(f"{e}: lower --lr (now {cfg.optimization.lr:g})") from None
    if begun is not None and (main or own_copy):
        (out / elastic.PROGRESS_FILE).unlink(missing_ok=True)  # the run has ended: no restart
    speeds = _speeds(run, result, dist)
    if not main:
        return {}
    known = last_validation(result)
    evals = run.task.evaluate(run.task.model, run.plan,
                              **({"validation": known} if known else {}))
    run.task.save(run.task.model, out)
    summary = _summary(run, out, result, speeds, evals, dist, resume_from)
    if begun is not None:
        summary["membership"] = begun.history
    if before is not None:
        summary["before"] = before
    write_json(out / "summary.json", summary)
    if not cfg.output.save_total_limit:
        removed = remove_checkpoints(out)
        if removed:
            LOG.info(f"the model is saved: {removed} checkpoint(s) removed (--save-total-limit "
                     "keeps them)")
    return summary


def last_validation(result: FitResult) -> dict[str, float] | None:
    """The validation scores of the evaluation at the last step, where the model ends as that
    evaluation scored it (not replaced by a better one): the final evaluation reuses them."""
    if not result.evaluations or result.evaluations[-1]["step"] != result.steps:
        return None
    if result.best is not None and result.best["step"] != result.steps:
        return None
    return {k.removeprefix("eval_"): v for k, v in result.evaluations[-1].items()
            if k.startswith("eval_")}


def _evaluation(run: Run) -> Evaluate | None:
    """The validation scores now, for --eval-steps; refused where the recipe has none."""
    if not run.cfg.evaluation.eval_steps:
        return None
    validate = run.task.validate
    if validate is None:
        raise CpuftError(f"--eval-steps: the {run.cfg.model.recipe} recipe evaluates only once "
                         "training ends")
    return lambda: validate(run.task.model, run.plan)


def _before(run: Run, out: Path, resume_from: Path | None,
            main: bool) -> dict[str, Any] | None:
    """The model's evaluation before training, where the recipe asks for one: taken at the
    start (kept in before.json), read back on resume."""
    if not run.task.evaluate_before:
        return None
    kept = out / "before.json"
    if resume_from is not None:
        return json.loads(kept.read_text()) if main and kept.is_file() else None
    # Every rank evaluates, so that none waits in a collective past its timeout meanwhile.
    if main:
        LOG.info("evaluating the model before training")
    before = run.task.evaluate(run.task.model, run.plan)
    if main:
        kept.write_text(json.dumps(before, indent=2) + "\n")
    return before


def _start_run_folder(run: Run, out: Path, resume_from: Path | None,
                      given_batch: int | None = None) -> list[MetricSink]:
    """Mark the folder as this run's, and the sinks its metrics go to."""
    write_marker(out, run.cfg, run.world_size, resume_from is not None, given_batch)
    run.task.write_metadata(out)
    if resume_from is not None:
        LOG.info(f"resuming from {resume_from}")
    return metric_sinks(out, resume_from, run.task.name if run.cfg.output.progress else None,
                        run.cfg.output.report_to, to_flat(run.cfg))


def _describe(run: Run) -> str:
    o, plan = run.cfg.optimization, run.plan
    model = run.task.describe().get("model", run.cfg.model.model)
    return (f"fine-tuning {model} on {run.task.name}: {run.task.train_samples} samples, "
            f"{run.total_steps} steps of {o.batch_size * run.world_size * o.grad_accum} samples "
            f"on {run.world_size} rank(s), precision {plan.precision}, {plan.threads} threads, "
            f"allocator {plan.allocator}, compile {plan.compile}")


def _speeds(run: Run, result: FitResult, dist: DistContext | None) -> dict[str, float]:
    """The job's totals over its ranks, at its slowest rank's pace (ranks that do not sync can
    differ)."""
    samples, tokens, comm_wait = float(result.samples), float(result.tokens), \
        result.comm_wait_seconds
    train_seconds, pace_seconds = result.train_seconds, steady_seconds(result.step_seconds)
    if dist is not None:
        samples, tokens, comm_wait = dist.all_reduce_sum([samples, tokens, comm_wait])
        comm_wait /= run.world_size
        train_seconds, pace_seconds = dist.all_reduce_max([train_seconds, pace_seconds])
    return {"samples": samples, "tokens": tokens, "comm_wait": comm_wait,
            "train_seconds": train_seconds, "pace_seconds": pace_seconds}


def evaluations(out: Path) -> list[dict[str, Any]]:
    """The run's evaluations while training, as metrics.jsonl records them (resumed runs'
    included)."""
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    records = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return [r for r in records if any(key.startswith("eval_") for key in r)]


def _summary(run: Run, out: Path, result: FitResult, speeds: dict[str, float],
             evals: dict[str, Any], dist: DistContext | None,
             resume_from: Path | None) -> dict[str, Any]:
    cfg, plan = run.cfg, run.plan
    train_seconds, steps = speeds["train_seconds"], max(1, len(result.step_seconds))
    per_step = {"samples": speeds["samples"] / steps, "tokens": speeds["tokens"] / steps}
    described = run.task.describe()
    return {
        "model": described.get("model"),
        "task": described.get("task", run.task.name),
        "precision": plan.precision,
        "compile": plan.compile,
        "world_size": run.world_size,
        "nodes": dist.nodes if dist else 1,
        "backend": dist.backend if dist else None,
        "bucket_cap_mb": round(dist.bucket_cap_mb, 2) if dist else None,
        "grad_compression": cfg.distributed.grad_compression if dist else None,
        "grad_sync": cfg.distributed.grad_sync if dist else None,
        "train_samples": run.task.train_samples,
        "steps": result.steps,
        "epochs": round(result.steps / run.steps_per_epoch, 4),
        "batch_size": cfg.optimization.batch_size,
        "grad_accum": cfg.optimization.grad_accum,
        "train_seconds": round(train_seconds, 3),
        "train_samples_per_second": round(speeds["samples"] / train_seconds, 3),
        "train_tokens_per_second": round(speeds["tokens"] / train_seconds, 1),
        # after the first tenth of the steps, as `cpuft bench` measures
        "steady_samples_per_second": round(steady_rate(
            result.step_seconds, per_step["samples"], speeds["pace_seconds"]), 3),
        "steady_tokens_per_second": round(steady_rate(
            result.step_seconds, per_step["tokens"], speeds["pace_seconds"]), 3),
        "step_time_split": {
            "seconds_per_step": round(train_seconds / steps, 5),
            "comm_wait_fraction": round(speeds["comm_wait"] / train_seconds, 4),
            "compute_fraction": round(1 - speeds["comm_wait"] / train_seconds, 4),
        },
        "forecast_inputs": forecast_inputs(
            run, seconds_per_step=speeds["pace_seconds"] / max(1, steps - warmup_steps(steps)),
            tokens_per_step=per_step["tokens"] / run.world_size,
            comm_wait_fraction=speeds["comm_wait"] / train_seconds,
            nodes=dist.nodes if dist else 1),
        "final_loss": result.final_loss,
        **evals,
        "evaluations": evaluations(out),
        "best": ({"step": result.best["step"],
                  "eval_" + best_metric(cfg, run.task.best_metric)[0]: result.best["value"]}
                 if result.best else None),
        **{k: v for k, v in described.items() if k not in ("model", "task")},
        "speedups": plan.to_dict(),
        "optimizer_kernel": result.optimizer_kernel,
        "peak_memory_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "versions": versions(),
        "resumed_from": resume_from.name if resume_from else None,
    }
