"""``cpuft.fit(model, data, ...)``: train any module on any iterable of batches, with cpuft's
speed-ups, checkpoints, exact resume, metrics, progress, SIGTERM handling and, under
``cpuft launch``, DDP.

The keywords are ``cpuft train``'s settings (``max_steps``, ``lr``, ``output_dir``,
``save_steps``, ``resume``, ``precision``...), typed in ``FitSettings`` and checked as the
command line checks them.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

import torch
from torch import nn

from cpuft.api.checks import check_model, validate_arguments
from cpuft.api.fit_settings import FitSettings
from cpuft.api.optimize import remember_plan
from cpuft.config import TrainConfig, config_from, to_flat
from cpuft.config.fields import settings
from cpuft.distributed import rank0_value
from cpuft.engine.checkpoint import latest_checkpoint
from cpuft.engine.fit import FitResult, LossNotFinite
from cpuft.engine.fit import fit as engine_fit
from cpuft.engine.step import Batch, LossFn
from cpuft.errors import CpuftError, CpuftTypeError
from cpuft.job.build import fit_config
from cpuft.job.outdir import clear_output_dir, metric_sinks, settle_previous
from cpuft.log import get_logger
from cpuft.metrics import MetricLogger
from cpuft.paths import check_writable_dir
from cpuft.runtime import start
from cpuft.speedups.model_precision import precision_for_model
from cpuft.speedups.registry import apply_speedups

LOG = get_logger(__name__)


@dataclass
class IterableBatches:
    """Any iterable of batches as ``fit``'s batch source.

    A source that can seek (``iterate(epoch, start)``) resumes where it stopped. A DataLoader
    gets each epoch's shuffle and worker seeds from the run's seed and the epoch, so that a
    resumed epoch repeats its order; its batches already trained are then skipped by drawing
    them, which it logs. Under many ranks, a DataLoader with a DistributedSampler is
    already this rank's share; any other data is dealt out batch by batch, rank r taking
    batches r, r + world, ...
    """

    data: Iterable[Any]
    seed: int
    max_batches: int
    """Batches an epoch gives when the data has no length."""
    rank: int = 0
    world_size: int = 1
    _dealt: bool = field(init=False, default=True)

    def __post_init__(self) -> None:
        sampler = getattr(self.data, "sampler", None)
        self._dealt = self.world_size > 1 and not isinstance(
            sampler, torch.utils.data.distributed.DistributedSampler)

    def _length(self) -> int | None:
        try:
            return len(self.data)  # type: ignore[arg-type]
        except TypeError:
            return None

    def num_batches(self, epoch: int) -> int:
        own = getattr(self.data, "num_batches", None)
        if callable(own) and not self._dealt:
            return int(own(epoch))
        total = self._length()
        if total is None:
            return self.max_batches
        return total // self.world_size if self._dealt else total

    def _start_epoch(self, epoch: int) -> None:
        sampler: Any = getattr(self.data, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        seed = self.seed * 100_003 + epoch
        if isinstance(sampler, torch.utils.data.RandomSampler):
            sampler.generator = torch.Generator().manual_seed(seed)
        if isinstance(self.data, torch.utils.data.DataLoader):
            # Its iterator draws the workers' base seed from this, not from torch's global
            # generator, whose stream (dropout) a resumed run restores exactly.
            self.data.generator = torch.Generator().manual_seed(seed + 1)

    def iterate(self, epoch: int, start: int = 0) -> Iterator[Batch]:
        seek = getattr(self.data, "iterate", None)
        if callable(seek) and not self._dealt:
            yield from seek(epoch, start)
            return
        self._start_epoch(epoch)
        if start:
            LOG.info(f"resuming: drawing the {start} batch(es) of epoch {epoch} already trained "
                     "to skip them (the data cannot seek)")
        for i, batch in enumerate(self._mine(iter(self.data))):
            if i >= start:
                yield batch
        if self._length() is None:
            raise CpuftError("the data ran out before max_steps: pass fewer max_steps, or data "
                             "that gives more batches")

    def _mine(self, batches: Iterator[Any]) -> Iterator[Any]:
        for i, batch in enumerate(batches):
            if not self._dealt or i % self.world_size == self.rank:
                yield batch


def first_input(data: Iterable[Any]) -> torch.Tensor | None:
    """The input of the data's first batch, for the speed-ups that measure the model on it
    (channels-last): the first of a pair, or the batch itself. None where taking it would use
    it up (a one-pass iterator), or where it is no tensor."""
    if isinstance(data, Iterator):  # a batch drawn here would be lost to training
        return None
    rng = torch.random.get_rng_state()  # a shuffling loader draws its order from it
    seek = getattr(data, "iterate", None)  # a source that seeks gives any epoch again
    try:
        batch = next(seek(0) if callable(seek) else iter(data))
    except StopIteration:
        return None
    finally:
        torch.random.set_rng_state(rng)
    first = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
    return first if isinstance(first, torch.Tensor) else None


def pair_loss(criterion: Callable[[Any, Any], torch.Tensor]) -> LossFn:
    """The loss of (input, target) batches: ``criterion(model(input), target)``."""

    def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise CpuftError(f"cpuft.fit: criterion= takes (input, target) batches, not "
                             f"{_kind(batch)}: give loss_fn=(model, batch) -> loss for others")
        return criterion(model(batch[0]), batch[1])

    return loss


def _kind(batch: Any) -> str:
    return (f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, (tuple, list))
            else type(batch).__name__)


def _model_loss(model: nn.Module, batch: Batch) -> Any:
    if not isinstance(batch, dict):
        raise CpuftError(f"cpuft.fit: the data gives {_kind(batch)} batches: give "
                         "criterion=(output, target) -> loss for (input, target) pairs, or "
                         "loss_fn=(model, batch) -> loss; a model that computes its own loss "
                         "takes dicts of its keyword arguments")
    out = model(**batch)
    loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    if loss is None:
        raise CpuftError(f"cpuft.fit: the model's output ({type(out).__name__}) holds no loss: "
                         "give criterion= or loss_fn=")
    return loss


def _one_value(loss_fn: Callable[[nn.Module, Batch], Any], where: str) -> LossFn:
    """``loss_fn``, refusing what is not a loss: a tensor of one value."""

    def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        value = loss_fn(model, batch)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else None
            raise CpuftError(f"cpuft.fit: {where} must give a tensor of one value, not "
                             f"{type(value).__name__}" + (f" of shape {shape}" if shape else ""))
        return value

    return loss


NOT_READ = {"batch_size", "eval_batch_size", "dynamic_padding", "group_by_length",
            "gradient_checkpointing"}
"""cpuft train settings of how batches and models are made, which cpuft.fit takes as given
(with the model and data sections and the recipes' own)."""


def _config(settings_given: dict[str, Any]) -> TrainConfig:
    known = settings()
    unknown = sorted(set(settings_given) - set(known))
    if unknown:
        raise CpuftError(f"cpuft.fit: unknown setting {unknown[0]!r} (the names are cpuft "
                         "train's flags, with _ for -)")
    unread = sorted(name for name in settings_given if known[name].recipe or name in NOT_READ
                    or known[name].section in ("model", "data"))
    if unread:
        raise CpuftError(f"cpuft.fit: {unread[0]} is a cpuft train setting that cpuft.fit does "
                         "not read: it trains the model and the batches you give it")
    try:
        cfg = config_from(settings_given)
    except CpuftTypeError as e:
        raise CpuftTypeError(f"cpuft.fit: {e}") from None
    except CpuftError as e:
        raise CpuftError(f"cpuft.fit: {e}") from None
    validate_arguments(cfg, "cpuft.fit")
    return cfg


def _output_dir(out: Path, resume: bool, overwrite: bool) -> bool:
    """Refuse a folder that cannot take the run, or that holds another run the user did not
    say to continue or replace; whether it holds one."""
    if out.exists() and not out.is_dir():
        raise CpuftError(f"cpuft.fit: output_dir {out} is a file")
    check_writable_dir(str(out), "cpuft.fit: output_dir")
    holds_run = out.is_dir() and ((out / "metrics.jsonl").exists()
                                  or latest_checkpoint(out) is not None)
    if holds_run and not resume and not overwrite:
        raise CpuftError(f"cpuft.fit: output_dir {out} holds another run: pass overwrite=True "
                         "to replace it, or resume=True to continue it")
    return holds_run


def fit(model: nn.Module, data: Iterable[Any], *, loss_fn: LossFn | None = None,
        criterion: Callable[[Any, Any], torch.Tensor] | None = None,
        evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
        example_input: torch.Tensor | None = None,
        **train_settings: Unpack[FitSettings]) -> FitResult:
    """Train ``model`` on ``data`` with cpuft's speed-ups, checkpoints and exact resume.

    Started by ``cpuft launch``, every rank calls it and the model trains under DDP, each rank
    on its share of the batches.

    Args:
        model: any ``nn.Module``; trained in place.
        data: a DataLoader or any iterable of batches. The loss gets each batch as the data
            gives it.
        loss_fn: ``loss_fn(model, batch) -> loss``, a tensor of one value, called with the
            loader's own batch: ``(x, y)``, a dict, whatever it yields.
        criterion: for ``(input, target)`` batches instead of ``loss_fn``: the loss is
            ``criterion(model(input), target)``. With neither, each batch is a dict of the
            model's keyword arguments and the model's output holds ``.loss`` (Hugging Face
            models given ``labels``).
        evaluate: ``evaluate(model) -> {"accuracy": ..., "loss": ...}``, scores on held-out
            data, called in eval mode every ``eval_steps`` steps and at the last; each call is
            recorded in metrics.jsonl. With ``load_best_model_at_end``, ``model`` ends as it was
            at its best evaluation by ``metric_for_best_model`` (default ``loss``, lower is
            better; other names, higher).
        example_input: an input batch as the model takes it, for the speed-ups that measure
            the model before choosing (channels-last); default: the input of the data's first
            batch, where the data can be iterated again.
        **train_settings: ``cpuft train``'s settings by name (``FitSettings``): ``max_steps``
            (or ``epochs`` for data with a length), ``lr``, ``lr_schedule``, ``precision``,
            ``output_dir``, ``save_steps``, ``resume``...

    Returns:
        The run's ``FitResult``: steps, samples, losses, time per step, the evaluations and the
        best one.

    Raises:
        CpuftError: a setting that cannot work, a batch the loss cannot take, a loss that is not
            one finite value, an output_dir that holds another run (``overwrite=True`` or
            ``resume=True``), or a damaged checkpoint. The message says which and what to do.
        CpuftTypeError: a setting of the wrong type (also a ``TypeError``).
        Interrupted: a signal stopped the run; its checkpoint is written where there is an
            output_dir.
    """
    check_model(model, "cpuft.fit")
    if criterion is not None:
        if loss_fn is not None:
            raise CpuftError("cpuft.fit: give loss_fn or criterion, not both")
        loss = _one_value(pair_loss(criterion), "criterion")
    else:
        loss = _one_value(loss_fn or _model_loss, "loss_fn" if loss_fn else "the model's loss")
    given: dict[str, Any] = {"output_dir": "", **train_settings}
    if isinstance(given["output_dir"], os.PathLike):
        given["output_dir"] = os.fspath(given["output_dir"])
    cfg = _config(given)
    if cfg.evaluation.eval_steps and evaluate is None:
        raise CpuftError("cpuft.fit: eval_steps needs evaluate=(model) -> scores")
    if cfg.evaluation.load_best_model_at_end and not cfg.output.output_dir:
        raise CpuftError("cpuft.fit: load_best_model_at_end keeps the best model's checkpoint: "
                         "give output_dir")
    out = Path(cfg.output.output_dir) if cfg.output.output_dir else None
    resume = cfg.output.resume != "no"  # no checkpoint yet: fit starts afresh with either
    if resume and out is None:
        raise CpuftError("cpuft.fit: resume=True needs the output_dir of the run to resume")
    replaces = out is not None and _output_dir(out, resume, cfg.output.overwrite) \
        and not resume
    runtime = start(cfg, own_loop=True)
    dist = runtime.dist
    rank, world = (dist.info.rank, dist.info.world_size) if dist else (0, 1)
    example = example_input if example_input is not None else functools.cache(
        lambda: first_input(data))  # drawn once, where a choice needs a batch to measure on
    plan = precision_for_model(model, runtime.plan, cfg.speedups.precision, example,
                               shared=rank0_value)
    plan = apply_speedups(model, plan, example)
    remember_plan(model, plan)  # cpuft.report_plan(model) tells what this run chose
    o = cfg.optimization
    source = IterableBatches(data, seed=o.seed, max_batches=o.max_steps * o.grad_accum,
                             rank=rank, world_size=world)
    per_epoch = math.ceil(source.num_batches(0) / o.grad_accum)
    if per_epoch == 0 and not o.max_steps:
        raise CpuftError("cpuft.fit: the data has no length: pass max_steps")
    total = o.max_steps or max(1, math.ceil(o.epochs * per_epoch))
    resume_from = latest_checkpoint(out) if out is not None and resume else None
    if resume and resume_from is None:
        LOG.info(f"no checkpoint in {out} to resume from: starting afresh")
    # The run replaced stays aside until this one has a checkpoint (settle_previous).
    aside = clear_output_dir(out, None) if out is not None and replaces and rank == 0 else None
    try:
        sinks = metric_sinks(out, resume_from, type(model).__name__ if cfg.output.progress
                             else None, cfg.output.report_to, to_flat(cfg)) if rank == 0 else []
        return engine_fit(model, source, fit_config(cfg, plan, total, out, resume_from),
                          loss_fn=loss, logger=MetricLogger(sinks), dist=dist,
                          evaluate=(lambda: evaluate(model)) if evaluate is not None else None)
    except LossNotFinite as e:
        raise CpuftError(f"cpuft.fit: {e}: lower lr (now {cfg.optimization.lr:g})") from None
    finally:
        if out is not None and rank == 0:
            settle_previous(out, aside)
