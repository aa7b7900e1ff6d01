"""What a recipe is: it turns a config into what the engine trains and how the result is judged.

A recipe loads the data and the model (``Recipe.load``); the ``Task`` it gives holds the model,
the training batches, the loss, the evaluation, how to save, and the fields it adds to
summary.json. Nothing here trains: ``cpuft.job.build`` puts a task and a speed plan together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from cpuft.config import TrainConfig
from cpuft.engine.fit import BatchSource
from cpuft.engine.step import LossFn
from cpuft.speedplan.speed_plan import SpeedPlan


@dataclass(kw_only=True)
class Task:
    """One loaded job: the engine's inputs and the recipe's judgement of its output."""

    name: str
    """What is trained on, for messages and summary.json (a task or a file's name)."""
    cfg: TrainConfig
    """The config as the recipe settled it (say, a sequence length cut to the model's)."""
    model: nn.Module
    train_samples: int
    batches: Callable[[SpeedPlan, int, int], BatchSource]
    """(plan, rank, world size) -> this rank's training batches."""
    evaluate: Callable[..., dict[str, Any]]
    """(model, settled plan) -> summary.json's evaluation fields ('eval', 'test'). A recipe
    with ``validate`` also takes ``validation=``: the validation scores of an evaluation at the
    last step, which the job passes where it has them, so that they are not taken twice."""
    best_metric: str = "loss"
    """The score that picks the best model where --metric-for-best-model names none."""
    save: Callable[[nn.Module, Path], None]
    """Write the trained model (and what loads it) into the output folder."""
    describe: Callable[[], dict[str, Any]]
    """The recipe's own summary.json fields (model, task, labels...)."""
    write_metadata: Callable[[Path], None] = lambda _out: None
    """Files the run folder needs before training (a label map, say)."""
    loss_fn: LossFn | None = None
    """None: the model returns ``.loss`` itself."""
    validate: Callable[[nn.Module, SpeedPlan], dict[str, float]] | None = None
    """(model, settled plan) -> the scores on the validation data alone (--eval-steps); None:
    the recipe evaluates only once training ends."""
    evaluate_before: bool = False
    """Also evaluate the model before training (summary.json's ``before``), to show what
    fine-tuning bought."""


class Recipe(Protocol):
    name: str

    def load(self, cfg: TrainConfig) -> Task: ...
