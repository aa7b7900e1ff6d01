"""Channels-last is one choice for a whole job: the gain rank 0 measured decides every rank's
layout, since DDP needs the same strides on every rank."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from cpuft.speedups.channels_last import MIN_GAIN, use_channels_last
from tests.helpers import run_two_ranks


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))


def _is_channels_last(model: nn.Module) -> bool:
    return model[0].weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("shared_gain", [MIN_GAIN + 1.0, MIN_GAIN - 0.5])
def test_the_shared_gain_decides_not_the_own_measurement(shared_gain: float) -> None:
    model = _cnn()
    seen = []

    def shared(gain: float) -> float:
        seen.append(gain)
        return shared_gain

    on, reason = use_channels_last(model, torch.randn(2, 3, 16, 16), "fp32", rounds=1,
                                   shared=shared)
    assert len(seen) == 1 and seen[0] > 0
    assert on is (shared_gain >= MIN_GAIN) and _is_channels_last(model) is on
    assert reason.startswith("measured on rank 0 on a 2x3x16x16 batch: "
                             f"channels-last {shared_gain:.2f}x")


def test_a_rank_that_has_not_joined_its_job_stays_contiguous() -> None:
    model = _cnn()
    on, reason = use_channels_last(model, torch.randn(2, 3, 16, 16), "fp32", rounds=1,
                                   shared=lambda gain: None)
    assert on is False and not _is_channels_last(model)
    assert "cpuft.distributed.init()" in reason
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 2)


RANKS = """
import json
import os
import torch
from torch import nn
import cpuft.distributed
from cpuft.speedups import channels_last

cpuft.distributed.init("gloo")
rank = torch.distributed.get_rank()
# rank 0 finds channels-last twice as fast, rank 1 twice as slow
channels_last.pass_seconds = lambda model, images, precision: (
    0.5 if images.is_contiguous(memory_format=torch.channels_last) == (rank == 0) else 1.0)
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 2))
on, reason = channels_last.use_channels_last(model, torch.randn(2, 3, 16, 16), "fp32",
                                             shared=cpuft.distributed.rank0_value)
ddp = nn.parallel.DistributedDataParallel(model)  # refuses ranks whose strides differ
ddp(torch.randn(2, 3, 16, 16)).sum().backward()
print(json.dumps({"rank": rank, "on": on, "reason": reason,
                  "channels_last": model[0].weight.is_contiguous(
                      memory_format=torch.channels_last)}), flush=True)
# Every collective is done: leave without gloo's teardown, which in torch 2.13 can abort a rank
# whose peer has already gone ("terminate called without an active exception").
os._exit(0)
"""


@pytest.mark.multiprocess
def test_two_ranks_that_measure_differently_take_rank_0s_layout(tmp_path) -> None:
    results = [json.loads(line) for line in run_two_ranks(RANKS, tmp_path)]
    assert [r["on"] for r in results] == [True, True]
    assert [r["channels_last"] for r in results] == [True, True]
    assert results[0]["reason"].startswith("measured on a 2x3x16x16 batch: channels-last 2.00x")
    assert results[1]["reason"].startswith("measured on rank 0 on a 2x3x16x16 batch: "
                                           "channels-last 2.00x")


class Mnist(nn.Module):
    """pytorch/examples' mnist/main.py network: 28x28 one-channel images only."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, 1), nn.Conv2d(8, 16, 3, 1)
        self.fc = nn.Linear(16 * 12 * 12, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.conv2(torch.relu(self.conv1(x)))), 2)
        return self.fc(torch.flatten(x, 1))


def test_a_batch_that_is_no_image_tensor_is_not_measured_on() -> None:
    # the recipes hand over their first batch, a dict of token ids
    on, reason = use_channels_last(_cnn(), {"input_ids": torch.zeros(2, 3)}, "fp32")
    assert not on and reason == "not measured: the example input is not a tensor of images"


def test_layout_is_measured_on_the_users_own_batch_never_a_made_up_one() -> None:
    import cpuft

    on, reason = use_channels_last(Mnist(), None, "fp32")
    assert not on and reason.startswith("not measured: no batch of the model's own")
    model = cpuft.optimize(Mnist(), precision="fp32")
    assert cpuft.report_plan(model)["channels_last_reason"].startswith("not measured")

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.randn(32, 1, 28, 28, generator=g), torch.randint(0, 10, (32,), generator=g)),
        batch_size=16, shuffle=True)
    model = Mnist()
    cpuft.fit(model, data, criterion=nn.functional.cross_entropy, max_steps=2,
              precision="fp32", progress=False)
    reason = cpuft.report_plan(model)["channels_last_reason"]
    assert reason.startswith("measured on a 16x1x28x28 batch: channels-last"), reason
    # One-pass data cannot be looked at first: nothing of it is lost.
    one_pass = Mnist()
    result = cpuft.fit(one_pass, iter(list(data)), criterion=nn.functional.cross_entropy,
                       max_steps=2, precision="fp32", progress=False)
    assert result.steps == 2 and result.samples == 32
    assert cpuft.report_plan(one_pass)["channels_last_reason"].startswith("not measured")
