"""bf16 for a loop's own model only where it pays on that model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cpuft.runtime import preview
from cpuft.speedups import model_precision
from cpuft.speedups.model_precision import precision_for_model


def bf16_plan():
    return preview().replaced(precision="bf16", precision_reason="auto: bf16 matmul 3x fp32")


def mlp(width: int = 8) -> nn.Module:
    return nn.Sequential(nn.Linear(width, width), nn.BatchNorm1d(width), nn.Dropout(0.5),
                         nn.Linear(width, 2))


def test_a_small_model_without_a_batch_keeps_fp32_and_says_why():
    plan = precision_for_model(mlp(), bf16_plan(), "auto", None)
    assert plan.precision == "fp32"
    assert plan.precision_reason.startswith("auto: the model trains 106 weights, too few")


@pytest.mark.parametrize("requested, precision", [("bf16", "bf16"), ("auto", "fp32")])
def test_a_precision_asked_for_or_already_fp32_is_left(requested, precision):
    plan = bf16_plan().replaced(precision=precision)
    assert precision_for_model(mlp(), plan, requested, None) == plan


def test_a_large_model_is_not_measured(monkeypatch):
    monkeypatch.setattr(model_precision, "MEASURED_BELOW", 100)
    monkeypatch.setattr(model_precision, "pass_seconds", lambda *a: pytest.fail("measured"))
    assert precision_for_model(mlp(), bf16_plan(), "auto", torch.randn(4, 8)) == bf16_plan()


@pytest.mark.parametrize("bf16_seconds, precision, reason", [
    (2.0, "fp32", "auto: on a 4x8 batch of the model's own, bf16 trained at 0.50x fp32's speed: "
                  "fp32"),
    (0.5, "bf16", "auto: bf16 matmul 3x fp32; on a 4x8 batch of the model's own, bf16 trained "
                  "at 2.00x fp32's speed"),
])
def test_with_a_batch_the_faster_precision_is_measured(monkeypatch, bf16_seconds, precision,
                                                       reason):
    monkeypatch.setattr(model_precision, "pass_seconds",
                        lambda model, x, p: bf16_seconds if p == "bf16" else 1.0)
    plan = precision_for_model(mlp(), bf16_plan(), "auto", torch.randn(4, 8))
    assert (plan.precision, plan.precision_reason) == (precision, reason)


def test_rank_0s_measurement_decides_for_every_rank(monkeypatch):
    monkeypatch.setattr(model_precision, "pass_seconds",
                        lambda model, x, p: 2.0 if p == "bf16" else 1.0)
    plan = precision_for_model(mlp(), bf16_plan(), "auto", torch.randn(4, 8),
                               shared=lambda gain: 3.0)
    assert plan.precision == "bf16" and "3.00x" in plan.precision_reason


def test_measuring_leaves_the_model_and_the_random_stream_as_they_were():
    torch.manual_seed(0)
    model = mlp()
    model.eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batch = torch.randn(4, 8)
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    precision_for_model(model, bf16_plan(), "auto", batch)  # its dropout draws in train mode
    assert torch.equal(torch.rand(3), expected)
    for k, v in model.state_dict().items():  # BatchNorm's running statistics untouched
        assert torch.equal(v, state[k]), k
    assert not model.training and all(p.grad is None for p in model.parameters())


def test_a_batch_the_model_cannot_take_falls_back_to_the_size_rule():
    plan = precision_for_model(mlp(), bf16_plan(), "auto", torch.randn(4, 5))
    assert plan.precision == "fp32" and "106 weights" in plan.precision_reason
