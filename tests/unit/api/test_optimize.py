"""cpuft.optimize and cpuft.autocast on models and loops of a user's own."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

import cpuft
from cpuft.errors import CpuftError, CpuftTypeError
from cpuft.speedups.dropout import FastDropout


class PatchAttention(nn.Module):
    """Convolutions, dropout and torch's own attention module: a tiny vision transformer."""

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 16, kernel_size=4, stride=4)
        self.norm = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.1)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.patches(images)).flatten(2).transpose(1, 2)
        x = self.drop(x)
        x, _ = self.attention(x, x, x)
        return self.head(x.mean(dim=1))


class Unknown(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Dropout(0.0), nn.Linear(32, 2))
        self.odd = Unknown()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(self.odd(x.view(-1, 2, 4)).view(-1, 8))


def _data(n: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return x, (x[:, 0] + x[:, 1] > 0).long()


def test_dropout_attention_and_convolutions_each_get_a_choice_with_its_reason() -> None:
    torch.manual_seed(0)
    model = PatchAttention()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = cpuft.optimize(model, optimizer, precision="fp32",
                                      example_input=torch.randn(4, 3, 32, 32))
    plan = cpuft.report_plan(model)
    assert isinstance(model.drop, FastDropout)
    assert plan["attention_reason"] == "the model has no switchable attention: cpuft_eager " \
        "not used"
    assert plan["channels_last_reason"].startswith("measured on a 4x3x32x32 batch")
    assert (plan["channels_last"]
            == model.patches.weight.is_contiguous(memory_format=torch.channels_last))
    assert plan["precision"] == "fp32" and plan["fused_optimizer_reason"] == \
        "torch's fused AdamW"
    assert optimizer.defaults["fused"] is True
    images = torch.randn(4, 3, 32, 32)
    with cpuft.autocast():
        loss = model(images).sum()
    loss.backward()
    optimizer.step()


def test_a_transformers_model_gets_matmul_attention(tiny_model: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=2)
    model = cpuft.optimize(model, precision="fp32")
    plan = cpuft.report_plan(model)
    assert plan["attention"] == "cpuft_eager"
    assert plan["channels_last_reason"] == "the model has no 1-d or 2-d convolutions"
    assert plan["bf16_weights_reason"] == "fp32 run"
    assert plan["fused_optimizer_reason"] == "no optimizer given"


def test_an_unknown_module_is_left_alone() -> None:
    model = Mlp()
    odd = model.odd
    before = copy.deepcopy(model.state_dict())
    model = cpuft.optimize(model, precision="fp32")
    assert model.odd is odd and type(model.odd) is Unknown
    assert isinstance(model.body[2], nn.Dropout)  # p = 0: nothing to draw, nothing swapped
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, before[name])


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int,
           start: int = 0) -> list[float]:
    x, y = _data()
    losses = []
    for step in range(start, start + steps):
        batch = slice((step * 16) % 64, (step * 16) % 64 + 16)
        with cpuft.autocast(model):
            loss = nn.functional.cross_entropy(model(x[batch]).float(), y[batch])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def test_bf16_losses_follow_fp32_and_the_state_saves_and_loads(tmp_path: Path) -> None:
    torch.manual_seed(0)
    reference = Mlp()
    plain = copy.deepcopy(reference)
    fp32_losses = _train(plain, torch.optim.AdamW(plain.parameters(), lr=1e-2), 8)

    model = copy.deepcopy(reference)
    model, optimizer = cpuft.optimize(model, torch.optim.AdamW(model.parameters(), lr=1e-2),
                                      precision="bf16")
    plan = cpuft.report_plan(model)
    assert plan["precision"] == "bf16" and plan["bf16_weights"]
    assert model.body[0].weight.dtype == torch.bfloat16
    losses = _train(model, optimizer, 4)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
               tmp_path / "state.pt")
    losses += _train(model, optimizer, 4, start=4)
    assert losses == pytest.approx(fp32_losses, rel=0.05, abs=0.02)

    saved = torch.load(tmp_path / "state.pt", weights_only=True)
    assert saved["model"]["body.0.weight"].dtype == torch.float32  # the masters, not bf16
    again = copy.deepcopy(reference)
    again, again_optimizer = cpuft.optimize(
        again, torch.optim.AdamW(again.parameters(), lr=1e-2), precision="bf16")
    again.load_state_dict(saved["model"])
    again_optimizer.load_state_dict(saved["optimizer"])
    assert _train(again, again_optimizer, 4, start=4) == pytest.approx(losses[4:], rel=1e-3)


def test_another_optimizer_steps_the_masters() -> None:
    torch.manual_seed(0)
    model = Mlp()
    model, optimizer = cpuft.optimize(model, torch.optim.SGD(model.parameters(), lr=0.1,
                                                             momentum=0.9), precision="bf16")
    assert type(optimizer.inner) is torch.optim.SGD and not optimizer.kernel
    losses = _train(model, optimizer, 8)
    assert losses[-1] < losses[0]
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    optimizer.step()
    scheduler.step()
    assert optimizer.inner.param_groups[0]["lr"] == pytest.approx(0.05)


def test_a_model_without_parameters_is_refused() -> None:
    with pytest.raises(CpuftError, match=r"the model \(ReLU\) has no parameters to train"):
        cpuft.optimize(nn.ReLU())


def test_autocast_is_bf16_exactly_where_optimize_chose_it() -> None:
    fp32_model = cpuft.optimize(nn.Linear(4, 4), precision="fp32")
    bf16_model = cpuft.optimize(nn.Linear(4, 4), precision="bf16")
    x = torch.randn(2, 4)
    with cpuft.autocast(fp32_model):
        assert fp32_model(x).dtype == torch.float32
    with cpuft.autocast(bf16_model):
        assert bf16_model(x).dtype == torch.bfloat16
    with cpuft.autocast():  # the model optimized last
        assert bf16_model(x).dtype == torch.bfloat16


def test_optimize_returns_what_ipex_returns_and_takes_its_dtype():
    model = nn.Linear(4, 4)
    assert cpuft.optimize(model, dtype=torch.float32) is model  # no optimizer: the model
    assert cpuft.report_plan(model)["precision"] == "fp32"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    returned = cpuft.optimize(model, optimizer, dtype=torch.float32)
    assert isinstance(returned, tuple) and returned[0] is model and returned[1] is optimizer
    bf16 = nn.Linear(4, 4)
    cpuft.optimize(bf16, dtype=torch.bfloat16)
    assert cpuft.report_plan(bf16)["precision"] == "bf16"
    with pytest.raises(CpuftTypeError, match=r"dtype must be torch\.bfloat16 or torch\.float32"):
        cpuft.optimize(nn.Linear(4, 4), dtype=torch.float16)
    with pytest.raises(CpuftError, match="disagree"):
        cpuft.optimize(nn.Linear(4, 4), dtype=torch.bfloat16, precision="fp32")


def test_cpuft_optimize_switched_off_hands_back_what_it_was_given(monkeypatch):
    monkeypatch.setenv("CPUFT_OPTIMIZE", "0")
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    got_model, got_optimizer = cpuft.optimize(model, optimizer)
    assert got_model is model and got_optimizer is optimizer
    assert type(model[1]) is nn.Dropout and not optimizer.defaults.get("fused")
    with cpuft.autocast(model):  # no plan for this model: nothing is cast
        assert model(torch.randn(2, 4)).dtype == torch.float32
