"""The spot column's model of preemptions: hand-computed cases."""

from __future__ import annotations

import math

import pytest

from cpuft.forecast.comm import Link
from cpuft.forecast.model import Calibration, Job, Target, forecast
from cpuft.forecast.preemption import Preemption, expected_preemptions, spot_wall_seconds

HOUR = 3600.0


def test_a_ten_hour_run_on_four_nodes_taken_back_once_in_twenty_node_hours():
    # Each loss: half of 10 min lost plus 1 min restarting = 6 min = 0.1 h. Four nodes at
    # 0.05 an hour lose 4 x 0.05 x 0.1 = 2% of each hour: 10 h / 0.98.
    p = Preemption(per_node_hour=0.05, checkpoint_every_s=600, restart_s=60)
    wall = spot_wall_seconds(10 * HOUR, 4, p)
    assert wall / HOUR == pytest.approx(10.204, abs=1e-3)
    assert expected_preemptions(wall, 4, p) == pytest.approx(4 * 0.05 * 10.204, abs=1e-3)
    # As many hours lost as the preemptions cost: 2.04 x 0.1 h
    assert wall - 10 * HOUR == pytest.approx(expected_preemptions(wall, 4, p) * 360)


def test_more_nodes_or_rarer_checkpoints_lose_more():
    p = Preemption(per_node_hour=0.1, checkpoint_every_s=1800, restart_s=0)
    # 8 nodes x 0.1 x 15 min: a fifth of each hour lost -> 1 h / 0.8
    assert spot_wall_seconds(HOUR, 8, p) == pytest.approx(1.25 * HOUR)
    assert spot_wall_seconds(HOUR, 8, Preemption(0.1, 600, 0)) < 1.25 * HOUR
    assert spot_wall_seconds(HOUR, 1, Preemption(0.0)) == HOUR


def test_preemptions_faster_than_the_job_recovers_never_end():
    # 40 nodes x 0.1 x (15 min): every hour loses exactly an hour
    assert spot_wall_seconds(HOUR, 40, Preemption(0.1, 1800, 0)) == math.inf
    assert spot_wall_seconds(HOUR, 80, Preemption(0.1, 1800, 0)) == math.inf


def test_the_spot_cost_pays_for_the_longer_spot_run():
    link = Link(gbit=10.0, latency_s=50e-6, source="test")
    cal = Calibration(steps=((0.0, 0.0), (36.0, 36.0)), cores=1, isa="avx2",
                      dense_gradient_bytes=0.0)
    target = Target(name="t", cores=1, isa="avx2", link=link, on_demand_per_hour=2.0,
                    spot_per_hour=0.5)
    job = Job(samples=36 * 1000, epochs=1.0, global_batch=36)  # 1000 steps of 36 s: 10 h
    calm = forecast(cal, target, job, 1)
    assert calm.wall_seconds == pytest.approx(10 * HOUR)
    assert calm.spot_wall_seconds == calm.wall_seconds and calm.spot_preemptions == 0
    assert calm.cost_spot == pytest.approx(10 * 0.5)
    # One node at 0.2 an hour, a loss 30 min: 10% of each hour lost
    rough = forecast(cal, target, job, 1, Preemption(0.2, 1800, 900))
    assert rough.spot_wall_seconds == pytest.approx(10 * HOUR / 0.9)
    assert rough.spot_preemptions == pytest.approx(0.2 * 10 / 0.9)
    assert rough.cost_spot == pytest.approx(10 / 0.9 * 0.5)
    assert rough.cost_on_demand == calm.cost_on_demand == pytest.approx(20.0)
    never = forecast(cal, target, job, 1, Preemption(2.0, 1800, 900))
    assert never.cost_spot == math.inf and never.spot_wall_seconds == math.inf
