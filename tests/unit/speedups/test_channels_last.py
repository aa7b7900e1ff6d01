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
import torch
from torch import nn
import cpuft.distributed
from cpuft.speedups import channels_last

cpuft.distributed.init("gloo")
rank = torch.distributed.get_rank()
# rank 0 finds channels-last twice as fast, rank 1 twice as slow
channels_last._pass_seconds = lambda model, images, precision: (
    0.5 if images.is_contiguous(memory_format=torch.channels_last) == (rank == 0) else 1.0)
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 2))
on, reason = channels_last.use_channels_last(model, torch.randn(2, 3, 16, 16), "fp32",
                                             shared=cpuft.distributed.rank0_value)
ddp = nn.parallel.DistributedDataParallel(model)  # refuses ranks whose strides differ
ddp(torch.randn(2, 3, 16, 16)).sum().backward()
print(json.dumps({"rank": rank, "on": on, "reason": reason,
                  "channels_last": model[0].weight.is_contiguous(
                      memory_format=torch.channels_last)}))
torch.distributed.destroy_process_group()
"""


@pytest.mark.multiprocess
def test_two_ranks_that_measure_differently_take_rank_0s_layout(tmp_path) -> None:
    results = [json.loads(line) for line in run_two_ranks(RANKS, tmp_path)]
    assert [r["on"] for r in results] == [True, True]
    assert [r["channels_last"] for r in results] == [True, True]
    assert results[0]["reason"].startswith("measured on a 2x3x16x16 batch: channels-last 2.00x")
    assert results[1]["reason"].startswith("measured on rank 0 on a 2x3x16x16 batch: "
                                           "channels-last 2.00x")
