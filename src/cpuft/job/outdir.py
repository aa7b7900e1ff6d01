"""The run folder: check it before anything loads, clear it only once the new run is ready,
and keep a resumed run's settings and metrics consistent."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from cpuft.config import TrainConfig, to_flat
from cpuft.config.fields import settings
from cpuft.engine.checkpoint import latest_checkpoint
from cpuft.errors import CpuftError
from cpuft.log import get_logger
from cpuft.metrics import JsonlSink, MetricSink, progress_sink
from cpuft.paths import check_writable_dir, write_json

LOG = get_logger(__name__)
RUN_MARKER = "cpuft_run.json"
RESUME_KEEPS = tuple(name for name, s in settings().items() if s.same_on_resume)
"""Settings a resumed run must share with the run it continues (marked on their fields): with
any other, its remaining steps would see other data or other updates. Steps, epochs, saving,
logging and the speed options may change."""


def check_output_dir(cfg: TrainConfig) -> tuple[Path, Path | None]:
    """The output dir and the checkpoint to resume from (if --resume); changes nothing.

    Clearing waits for ``clear_output_dir``, after the data and the model have loaded, so a run
    that fails its checks leaves the run already there as it was.
    """
    out = Path(cfg.output.output_dir)
    if out.exists() and not out.is_dir():
        raise CpuftError(f"--output-dir {out} is a file")
    check_writable_dir(str(out), "--output-dir")
    holds_run = (out / RUN_MARKER).is_file()
    if cfg.output.resume == "yes":
        ckpt = latest_checkpoint(out) if holds_run else None
        if ckpt is None:
            finished = holds_run and (out / "summary.json").is_file()
            raise CpuftError(f"--resume: no checkpoint in {out}" + (
                ": the run has finished, and its checkpoints go once its model is saved "
                "(--save-total-limit keeps them)" if finished else ""))
        return out, ckpt
    if out.is_dir() and any(out.iterdir()):
        if not holds_run:
            raise CpuftError(f"--output-dir {out} is not empty and holds no cpuft run: use another")
        if not cfg.output.overwrite:
            raise CpuftError(
                f"--output-dir {out} holds another run: pass --overwrite to replace it, "
                "or --resume to continue it"
            )
    return out, None


def _marker(out: Path) -> dict[str, Any]:
    try:
        marker = json.loads((out / RUN_MARKER).read_text())
        if not isinstance(marker.get("config"), dict):
            raise ValueError
    except (OSError, ValueError, AttributeError):
        raise CpuftError(f"--resume: {out / RUN_MARKER} cannot be read") from None
    return dict(marker)


def fit_to_world(out: Path, cfg: TrainConfig, world: int) -> TrainConfig:
    """A run resumed on another number of ranks (a host lost for good) keeps its global batch:
    each rank takes its share of it, so the data order and the schedule stay the run's."""
    marker = _marker(out)
    saved_world = int(marker.get("world_size", world))
    saved_batch = marker["config"].get("batch_size")
    # The batch a rank took when the run began, before any resume on another world changed it:
    # given again (the same command, restarted), it means the run's global batch.
    given = marker.get("given_batch_size", saved_batch)
    if cfg.optimization.batch_size not in (saved_batch, given) or not saved_batch:
        return cfg
    global_batch = saved_batch * saved_world
    if global_batch % world:
        raise CpuftError(f"--resume: the run's global batch of {global_batch} samples does not "
                         f"split over {world} ranks: resume on a number of ranks that divides it")
    if saved_world != world:
        LOG.info(f"resuming a run of {saved_world} rank(s) on {world}: {global_batch // world} "
                 f"samples a rank, the same global batch of {global_batch}")
    return replace(cfg, optimization=replace(cfg.optimization,
                                             batch_size=global_batch // world))


def write_marker(out: Path, cfg: TrainConfig, world: int, resumed: bool,
                 given: int | None = None) -> None:
    """Mark ``out`` as this run's: its settings and world, and ``given``, the --batch-size the
    run was started with (by default this start's, or the marker's on resume): what a later
    resume on another world keeps the global batch by."""
    if given is None:
        given = cfg.optimization.batch_size
        if resumed and (out / RUN_MARKER).is_file():
            given = _marker(out).get("given_batch_size", given)
    write_json(out / RUN_MARKER, {"config": to_flat(cfg), "world_size": world,
                                  "given_batch_size": given})


def check_resume_settings(out: Path, cfg: TrainConfig, world: int = 1) -> None:
    """Refuse to resume the run in ``out`` with settings that would make it another run."""
    marker = _marker(out)
    saved = dict(marker["config"])
    now = json.loads(json.dumps(to_flat(cfg)))
    saved_world = int(marker.get("world_size", world))
    if "batch_size" in saved:  # what must not change is the global batch
        saved["batch_size"] *= saved_world
        now["batch_size"] *= world
    changed = [key for key in RESUME_KEEPS if key in saved and saved[key] != now[key]]
    if changed:
        def shown(value: Any) -> str:
            return ",".join(map(str, value)) if isinstance(value, list) else str(value)

        diffs = "; ".join(f"--{key.replace('_', '-')} was {shown(saved[key]) or '(unset)'}, now "
                          f"{shown(now[key]) or '(unset)'}" for key in changed)
        raise CpuftError(f"--resume: the run in {out} had other settings ({diffs}): resume with "
                         "its settings, or start a new run in another --output-dir")


def clear_output_dir(out: Path, resume_from: Path | None) -> Path | None:
    """Make ``out`` ready for the run (``check_output_dir`` allowed it). An old run there is
    moved aside, not deleted: ``settle_previous`` deletes it once the new run has a checkpoint
    or has finished, or puts it back if the new run fails before."""
    aside = None
    if resume_from is None and out.is_dir() and any(out.iterdir()):
        aside = out.with_name(f".{out.name}.previous-{os.getpid()}")
        out.rename(aside)
    out.mkdir(parents=True, exist_ok=True)
    return aside


def settle_previous(out: Path, aside: Path | None) -> None:
    """After the new run ended, well or not: the run set aside goes if the new one has a
    checkpoint or a summary to show, and comes back otherwise."""
    if aside is None or not aside.exists():
        return
    if (out / "summary.json").is_file() or latest_checkpoint(out) is not None:
        shutil.rmtree(aside)
    else:
        shutil.rmtree(out)
        aside.rename(out)


def trim_metrics(path: Path, last_step: int) -> None:
    """Drop records after the checkpoint being resumed, so steps are not logged twice, and any
    line a stopped run left half-written."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) \
                and record["step"] <= last_step:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept))


def metric_sinks(out: Path | None, resume_from: Path | None,
                 progress_name: str | None, report_to: str = "none",
                 run_settings: dict[str, Any] | None = None) -> list[MetricSink]:
    """Where the main rank's metrics go: ``out``'s metrics.jsonl, trimmed to the checkpoint
    resumed from and appended to; TensorBoard events with ``report_to`` (with
    ``run_settings`` as their hyperparameters); and the progress line, where ``progress_name`` is
    given."""
    sinks: list[MetricSink] = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        step = int(resume_from.name.split("-")[-1]) if resume_from is not None else None
        if step is not None:
            trim_metrics(out / "metrics.jsonl", step)
        sinks.append(JsonlSink(out / "metrics.jsonl", append=resume_from is not None))
        if report_to == "tensorboard":
            from cpuft.metrics.tensorboard import FOLDER, TensorBoardSink

            sinks.append(TensorBoardSink(out / FOLDER,
                                         purge_step=step + 1 if step is not None else None,
                                         settings=run_settings))
    if progress_name is not None:
        sinks.append(progress_sink(progress_name))
    return sinks
