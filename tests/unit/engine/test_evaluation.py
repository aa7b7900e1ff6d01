"""Evaluation while training, kept checkpoints and the best model, on a one-layer model."""

import json

import pytest
import torch
from torch import nn

from cpuft.engine.checkpoint import checkpoint_dirs, load_checkpoint, save_checkpoint
from cpuft.engine.fit import FitConfig, fit
from cpuft.errors import CpuftError
from cpuft.metrics import JsonlSink, MetricLogger


class Batches:
    def num_batches(self, epoch):
        return 4

    def iterate(self, epoch, start=0):
        for i in range(start, 4):
            yield {"x": torch.full((2, 4), float(i + 1))}


def loss(model, batch):
    return (model(batch["x"]) - 1).pow(2).mean()


class Scripted:
    """Scores in turn, noting the model's mode and weights at each call."""

    def __init__(self, model, values):
        self.model, self.values, self.modes, self.weights = model, list(values), [], []

    def __call__(self):
        self.modes.append(self.model.training)
        self.weights.append(self.model.weight.detach().clone())
        return {"accuracy": self.values.pop(0), "loss": 1.0}


def test_evaluations_come_every_n_steps_and_at_the_last_in_eval_mode(tmp_path):
    model = nn.Linear(4, 1)
    scores = Scripted(model, [0.5, 0.6, 0.7])
    result = fit(model, Batches(), FitConfig(total_steps=5, eval_steps=2, lr=1e-3),
                 loss_fn=loss, evaluate=scores,
                 logger=MetricLogger([JsonlSink(tmp_path / "metrics.jsonl")]))
    assert [e["step"] for e in result.evaluations] == [2, 4, 5]
    assert result.evaluations[0] == {"step": 2, "epoch": 0.5, "eval_accuracy": 0.5,
                                     "eval_loss": 1.0}
    assert scores.modes == [False, False, False] and model.training
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval_accuracy" in r] == [2, 4, 5]
    assert result.best is None


@pytest.mark.parametrize("greater, values, best_step", [
    (True, [0.5, 0.9, 0.7], 4),    # accuracy: the middle evaluation is the best
    (False, [0.5, 0.9, 0.7], 2),   # a loss: the first
])
def test_the_model_ends_as_its_best_evaluation_and_that_checkpoint_is_kept(
        tmp_path, greater, values, best_step):
    model = nn.Linear(4, 1)
    scores = Scripted(model, values)
    result = fit(model, Batches(), FitConfig(
        total_steps=6, eval_steps=2, lr=0.05, output_dir=tmp_path, save_steps=1,
        save_total_limit=1, best_metric="accuracy", greater_is_better=greater),
        loss_fn=loss, evaluate=scores)
    assert result.best == {"step": best_step, "value": values[best_step // 2 - 1],
                           "metric": "accuracy"}
    # The newest checkpoint, and the best besides, whatever the limit.
    assert [p.name for p in checkpoint_dirs(tmp_path)] == [f"checkpoint-{best_step}",
                                                           "checkpoint-6"]
    assert torch.equal(model.weight.detach(), scores.weights[best_step // 2 - 1])
    assert not torch.equal(model.weight.detach(), scores.weights[-1])
    assert load_checkpoint(tmp_path / "checkpoint-6")["best"]["step"] == best_step


def test_a_resumed_run_keeps_its_best_so_far(tmp_path):
    model = nn.Linear(4, 1)
    config = FitConfig(total_steps=4, eval_steps=2, lr=0.05, output_dir=tmp_path,
                       best_metric="accuracy")
    fit(model, Batches(), config, loss_fn=loss, evaluate=Scripted(model, [0.9, 0.1]))
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["checkpoint-2", "checkpoint-4"]
    resumed = nn.Linear(4, 1)
    result = fit(resumed, Batches(), FitConfig(
        total_steps=6, eval_steps=2, lr=0.05, output_dir=tmp_path, best_metric="accuracy",
        resume_from=tmp_path / "checkpoint-4"), loss_fn=loss,
        evaluate=Scripted(resumed, [0.2]))
    assert result.best == {"step": 2, "value": 0.9, "metric": "accuracy"}
    best = load_checkpoint(tmp_path / "checkpoint-2")["model"]
    assert torch.equal(resumed.weight, best["weight"])


def test_a_metric_the_evaluation_does_not_give_is_named(tmp_path):
    model = nn.Linear(4, 1)
    with pytest.raises(CpuftError, match="--metric-for-best-model f1: the evaluation gives "
                                         "accuracy, loss"):
        fit(model, Batches(), FitConfig(total_steps=2, eval_steps=1, output_dir=tmp_path,
                                        best_metric="f1"),
            loss_fn=loss, evaluate=Scripted(model, [0.5, 0.5]))


def test_rotation_keeps_the_newest_and_the_protected_step(tmp_path):
    for step in range(1, 6):
        save_checkpoint(tmp_path, step, {"step": step}, keep=2, protect=2)
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["checkpoint-2", "checkpoint-4",
                                                           "checkpoint-5"]


@pytest.mark.parametrize("greater", [True, False])
def test_an_evaluation_that_is_not_finite_is_never_the_best(tmp_path, said, greater):
    """Issue 45: a NaN first evaluation stayed the best for good (nothing compares above it),
    and the model was swapped back to it."""
    model = nn.Linear(4, 1)
    scores = Scripted(model, [float("nan"), 0.7, float("inf") if greater else float("-inf")])
    result = fit(model, Batches(), FitConfig(
        total_steps=6, eval_steps=2, lr=0.05, output_dir=tmp_path, best_metric="accuracy",
        greater_is_better=greater), loss_fn=loss, evaluate=scores)
    assert result.best == {"step": 4, "value": 0.7, "metric": "accuracy"}
    assert torch.equal(model.weight.detach(), scores.weights[1])
    warned = [line for line in said if "not finite is never the best" in line]
    assert len(warned) == 1 and "accuracy is nan" in warned[0]


@pytest.mark.parametrize("metric", ["", "loss"])
def test_a_resume_uses_the_old_best_only_when_asked_by_the_same_score(tmp_path, said, metric):
    """Issue 45: resuming without a best metric still swapped in the old best model, and
    resuming with another metric compared the old metric's values with the new one's."""
    model = nn.Linear(4, 1)
    config = FitConfig(total_steps=4, eval_steps=2, lr=0.05, output_dir=tmp_path,
                       best_metric="accuracy")
    fit(model, Batches(), config, loss_fn=loss, evaluate=Scripted(model, [0.9, 0.1]))
    old_best = load_checkpoint(tmp_path / "checkpoint-2")["model"]["weight"]
    resumed = nn.Linear(4, 1)
    result = fit(resumed, Batches(), FitConfig(
        total_steps=6, eval_steps=2, lr=0.05, output_dir=tmp_path, best_metric=metric,
        greater_is_better=False, resume_from=tmp_path / "checkpoint-4"), loss_fn=loss,
        evaluate=Scripted(resumed, [0.2]))
    assert not torch.equal(resumed.weight, old_best)  # the model is this run's, not step 2's
    if metric:  # its own best by loss (1.0 at step 6), not accuracy 0.9 read as a loss
        assert result.best == {"step": 6, "value": 1.0, "metric": "loss"}
        assert any("chosen by accuracy, not loss" in line for line in said)
    else:
        assert result.best is None
