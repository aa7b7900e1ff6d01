"""1-d convolutions run as height-1 2-d ones: the same sums, the input's memory order kept, and
used only where the run's own first batch measures it faster."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification

from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.channels_last import (
    MIN_GAIN,
    ChannelsLastSpeedUp,
    _as_height_one,
    use_height_one_convs,
)
from cpuft.speedups.registry import PatchContext


def _lying_channels_last(batch: int, channels: int, length: int) -> torch.Tensor:
    """A (batch, channels, length) tensor whose channels are its fastest dimension."""
    return torch.randn(batch, length, channels).transpose(1, 2)


@pytest.mark.parametrize("conv", [
    nn.Conv1d(8, 12, 1, groups=4), nn.Conv1d(8, 8, 1), nn.Conv1d(8, 6, 3, padding=1, bias=False),
    nn.Conv1d(8, 8, 5, stride=2, padding=2, dilation=1, groups=8),
    nn.Conv1d(8, 4, 3, padding="same", dilation=2), nn.Conv1d(8, 4, 3, padding="valid"),
])
@pytest.mark.parametrize("channels_last", [True, False])
def test_the_height_one_convolution_gives_the_1d_ones_output_and_gradients(conv, channels_last):
    torch.manual_seed(0)
    x = (_lying_channels_last(3, 8, 10) if channels_last else torch.randn(3, 8, 10))
    x.requires_grad_()
    expected = conv(x)
    grad_out = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, (x, conv.weight), grad_out)
    got = _as_height_one(conv, x)
    grads = torch.autograd.grad(got, (x, conv.weight), grad_out)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for g, e in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    if channels_last and conv.kernel_size == (1,):  # read and written as it lies: no reorder
        assert got.stride(1) == 1


def _convnet() -> nn.Module:
    torch.manual_seed(0)

    class Circular(nn.Conv1d):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # a forward of its own
            return super().forward(x) * 2

    return nn.Sequential(nn.Conv1d(4, 8, 1, groups=2), nn.ReLU(),
                         nn.Conv1d(8, 8, 3, padding=1, padding_mode="circular"),
                         Circular(8, 8, 1), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                         nn.Linear(8, 2))


def _patched(model: nn.Module) -> list[bool]:
    return ["forward" in m.__dict__ for m in model.modules() if isinstance(m, nn.Conv1d)]


@pytest.mark.parametrize("shared_gain", [MIN_GAIN + 1.0, MIN_GAIN - 0.5])
def test_the_measured_gain_decides_and_only_plain_convolutions_are_served(shared_gain):
    model, seen = _convnet(), []

    def shared(gain: float) -> float:
        seen.append(gain)
        return shared_gain

    example = torch.randn(2, 4, 16)
    before = model(example)
    on, reason = use_height_one_convs(model, example, "fp32", rounds=1, shared=shared)
    assert len(seen) == 1 and seen[0] > 0
    assert on is (shared_gain >= MIN_GAIN)
    # circular padding and a forward of its own are left to their class
    assert _patched(model) == [on, False, False]
    assert reason.startswith("measured on rank 0 on the first batch: 1 1-d convolution(s)")
    assert f"{shared_gain:.2f}x" in reason
    assert all(p.grad is None for p in model.parameters())
    torch.testing.assert_close(model(example), before, rtol=1e-5, atol=1e-5)


def test_without_a_batch_of_its_own_nothing_is_measured_or_patched():
    model = _convnet()
    on, reason = use_height_one_convs(model, None, "fp32")
    assert not on and reason.startswith("not measured: no batch of the model's own")
    assert _patched(model) == [False, False, False]
    on, reason = use_height_one_convs(nn.Linear(2, 2), torch.randn(2, 2), "fp32")
    assert not on and reason == "the model has no 1-d or 2-d convolutions"


def test_a_model_that_cannot_train_on_the_batch_is_left_as_it_was():
    model, seen = _convnet(), []
    on, reason = use_height_one_convs(model, torch.randn(2, 3, 16), "fp32", rounds=1,
                                      shared=lambda gain: seen.append(gain) or MIN_GAIN + 1)
    assert not on and reason.startswith("not measured: the model did not train on its first "
                                        "batch (RuntimeError: ")
    assert _patched(model) == [False, False, False]
    assert seen == [0.0]  # it still took part in the job's choice: no rank waits on it


def test_squeezebert_is_measured_on_the_runs_first_batch(monkeypatch):
    # SqueezeBERT's projections are 1x1 Conv1d over hidden states that lie channels-last
    config = AutoConfig.for_model("squeezebert", vocab_size=60, hidden_size=32,
                                  embedding_size=32, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=64)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    batch = {"input_ids": torch.randint(0, 60, (4, 12)), "labels": torch.tensor([0, 1, 0, 1])}
    drawn = []

    def first_batch() -> dict[str, torch.Tensor]:
        drawn.append(1)
        return batch

    import cpuft.speedups.channels_last as channels_last
    monkeypatch.setattr(channels_last, "rank0_value", lambda gain: MIN_GAIN)
    decided = ChannelsLastSpeedUp().apply(model, Decision(True, "where it measures faster"),
                                          PatchContext(precision="bf16",
                                                       example_input=first_batch))
    assert drawn == [1] and decided.on
    assert decided.reason.startswith("measured on rank 0 on the first batch: 6 1-d conv")
    assert _patched(model) == [True] * 6
