"""A recipe is one module and one registration: a toy recipe declared in this test file, with
settings of its own and a default of its own, trains end to end through ``cpuft train``, and
each recipe refuses the other's settings."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from cpuft.cli.main import main
from cpuft.config import TrainConfig, registered_recipes
from cpuft.config import recipes as registry
from cpuft.config.fields import settings
from cpuft.config.recipes import RecipeSpec, register_recipe
from cpuft.recipes.base import Task
from cpuft.speedplan.speed_plan import SpeedPlan


@dataclass(kw_only=True, frozen=True)
class LineSettings:
    """The toy recipe's own settings."""

    points: int = 64
    """Samples of the line to fit."""
    slope: float = 2.0
    """The line's slope, which the model should learn."""


@dataclass
class LineBatches:
    x: torch.Tensor
    batch_size: int

    def num_batches(self, epoch: int) -> int:
        return len(self.x) // self.batch_size

    def iterate(self, epoch: int, start: int = 0) -> Iterator[dict[str, torch.Tensor]]:
        for i in range(start, self.num_batches(epoch)):
            yield {"x": self.x[i * self.batch_size:(i + 1) * self.batch_size]}


class LineRecipe:
    """Fits y = slope * x with one weight."""

    name = "line"

    def load(self, cfg: TrainConfig) -> Task:
        own = cfg.of(LineSettings)
        x = torch.linspace(-1, 1, own.points).unsqueeze(1)
        torch.manual_seed(cfg.optimization.seed)
        model = nn.Linear(1, 1, bias=False)

        def loss(m: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            return nn.functional.mse_loss(m(batch["x"]).float(), own.slope * batch["x"])

        def evaluate(m: nn.Module, plan: SpeedPlan) -> dict[str, Any]:
            return {"eval": {"slope": float(m.weight.detach().float())}, "test": None}

        def save(m: nn.Module, out: Path) -> None:
            (out / "slope.json").write_text(json.dumps(float(m.weight.detach().float())))

        logging.getLogger("cpuft.recipes.line").info(
            f"fitting a line of slope {own.slope} through {own.points} points")
        return Task(name="line", cfg=cfg, model=model, train_samples=own.points,
                    batches=lambda plan, rank, world: LineBatches(
                        x[rank::world], cfg.optimization.batch_size),
                    evaluate=evaluate, save=save, describe=lambda: {"model": "one weight"},
                    loss_fn=loss)


@pytest.fixture
def line_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_RECIPES", registered_recipes())
    register_recipe(RecipeSpec("line", LineRecipe, LineSettings, defaults={"lr": 0.1}))
    yield
    settings.cache_clear()


def train(out: Path, *extra: str) -> int:
    return main(["train", "--recipe", "line", "--output-dir", str(out), "--no-progress",
                 "--precision", "fp32", "--batch-size", "8", "--epochs", "20",
                 "--warmup-ratio", "0", *extra])


def test_a_registered_recipe_trains_end_to_end_with_its_own_settings(line_recipe, tmp_path,
                                                                      capsys):
    out = tmp_path / "line"
    assert train(out, "--slope", "-1.5", "--points", "32") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "fitting a line of slope -1.5 through 32 points" in capsys.readouterr().out
    assert summary["train_samples"] == 32 and summary["steps"] == 80
    assert summary["eval"]["slope"] == pytest.approx(-1.5, abs=0.05)
    assert json.loads((out / "slope.json").read_text()) == pytest.approx(-1.5, abs=0.05)
    recorded = json.loads((out / "cpuft_run.json").read_text())["config"]
    assert (recorded["slope"], recorded["points"], recorded["lr"]) == (-1.5, 32, 0.1)


def test_a_recipe_refuses_anothers_settings_in_one_line(line_recipe, tmp_path, capsys):
    assert train(tmp_path / "a", "--lora-r", "4") == 2
    err = capsys.readouterr().err.strip()
    assert err == ("cpuft: --lora-r is a setting of the causal-lm recipe, which this run does "
                   "not use (--recipe line): drop it, or pass --recipe causal-lm")
    assert main(["train", "--slope", "3", "--output-dir", str(tmp_path / "b")]) == 2
    assert "--slope is a setting of the line recipe" in capsys.readouterr().err


def test_the_toy_leaves_no_trace():
    assert "line" not in registered_recipes() and "slope" not in settings()
