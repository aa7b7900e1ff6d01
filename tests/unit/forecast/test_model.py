"""The time and cost model behind cpuft plan: pure functions on hand-computed cases."""

from __future__ import annotations

import pytest

from cpuft.durations import parse_duration
from cpuft.errors import CpuftError
from cpuft.forecast.calibration import FIXED_SHARE, HIDDEN_SHARE, read_calibration
from cpuft.forecast.comm import (
    Link,
    allgather_seconds,
    link_from_cluster_check,
    ring_allreduce_seconds,
)
from cpuft.forecast.model import (
    ISA_SPEED,
    Calibration,
    Job,
    Target,
    cheapest_within,
    compute_seconds,
    forecast,
    last_paying,
    step_seconds,
)
from cpuft.forecast.prices import SHIPPED, load_prices
from cpuft.forecast.sheet import parse_nodes
from tests.helpers import calibration_file

TEN_GBIT = Link(gbit=10.0, latency_s=50e-6, source="test")


def test_a_ring_all_reduce_sends_two_k_minus_one_over_k_of_the_bytes():
    # 100 MB over 4 nodes at 10 Gbit/s: 1.5 x 0.08 s, plus 6 hops of 50 us
    assert ring_allreduce_seconds(100e6, 4, TEN_GBIT) == pytest.approx(0.12 + 6 * 50e-6)
    assert ring_allreduce_seconds(100e6, 2, TEN_GBIT) == pytest.approx(0.08 + 2 * 50e-6)
    assert ring_allreduce_seconds(100e6, 1, TEN_GBIT) == 0.0


def test_a_gather_receives_every_other_nodes_rows():
    # 1 MB from each of 2 other nodes at 10 Gbit/s: 2 x (0.8 ms + 50 us)
    assert allgather_seconds(1e6, 3, TEN_GBIT) == pytest.approx(2 * (0.8e-3 + 50e-6))
    assert allgather_seconds(1e6, 1, TEN_GBIT) == 0.0


def test_the_link_cluster_check_measured():
    report = {"allreduce": {"world_size": 3, "rows": [
        {"bytes": 4096, "seconds": 0.0008, "bus_gb_per_s": 0.003},
        {"bytes": 32 * 2**20, "seconds": 0.05, "bus_gb_per_s": 1.25}]}}
    link = link_from_cluster_check(report)
    assert link.gbit == pytest.approx(10.0) and link.latency_s == pytest.approx(0.0002)
    with pytest.raises(CpuftError, match="no all-reduce measurement"):
        link_from_cluster_check({"allreduce": None})


CAL = Calibration(steps=((0.0, 0.1), (64.0, 0.74)), cores=2, isa="avx2",
                  dense_gradient_bytes=100e6, hidden_share=0.5)
TARGET = Target(name="t", cores=4, isa="avx2", link=TEN_GBIT, on_demand_per_hour=2.0,
                spot_per_hour=0.5)


def test_compute_scales_with_cores_and_the_isa_class():
    # 0.1 s fixed and 0.01 s a sample: (0.1 + 32 x 0.01) on twice the cores
    assert compute_seconds(CAL, TARGET, 32) == pytest.approx(0.21)
    amx = Target(name="a", cores=4, isa="amx", link=TEN_GBIT)
    assert compute_seconds(CAL, amx, 32) == pytest.approx(0.21 / ISA_SPEED["amx"])


def test_a_forecast_by_hand():
    job = Job(samples=6400, epochs=1.0, global_batch=64)  # 100 steps
    one = forecast(CAL, TARGET, job, 1)
    assert one.step_seconds == pytest.approx((0.1 + 0.64) / 2)  # 0.37, nothing sent
    assert one.efficiency == pytest.approx(1.0)
    assert one.wall_seconds == pytest.approx(37.0)
    assert one.cost_on_demand == pytest.approx(37 / 3600 * 2.0)
    two = forecast(CAL, TARGET, job, 2)
    compute = (0.1 + 0.32) / 2
    comm = 0.08 + 2 * 50e-6
    assert two.compute_seconds == pytest.approx(compute) and two.comm_seconds == \
        pytest.approx(comm)
    assert two.step_seconds == pytest.approx(compute + comm / 2)
    assert two.efficiency == pytest.approx(0.37 / two.step_seconds / 2)
    assert two.cost_spot == pytest.approx(two.wall_seconds / 3600 * 2 * 0.5)


def test_compute_follows_the_tokens_a_sample_of_the_jobs_data():
    cal = Calibration(steps=CAL.steps, cores=2, isa="avx2", dense_gradient_bytes=0.0,
                      tokens_per_sample=20.0)
    short = forecast(cal, TARGET, Job(samples=64, epochs=1.0, global_batch=64), 1)
    long = forecast(cal, TARGET, Job(samples=64, epochs=1.0, global_batch=64,
                                     tokens_per_sample=30.0), 1)
    assert long.step_seconds == pytest.approx(1.5 * short.step_seconds)
    assert long.efficiency == pytest.approx(1.0)


def test_the_cheapest_run_within_a_deadline_and_where_nodes_stop_paying():
    job = Job(samples=64000, epochs=1.0, global_batch=64)
    runs = [forecast(CAL, TARGET, job, k) for k in (1, 2, 4, 8, 16)]
    walls = {f.nodes: f.wall_seconds for f in runs}
    best = cheapest_within(runs, walls[4] + 1)
    assert best is not None and best.nodes == 4  # 1 and 2 are too slow; 4 is cheaper than 8
    assert cheapest_within(runs, min(walls.values()) - 1) is None
    # Speeds, steps/s: the node that takes 4 to 8 adds less than half a node's worth
    speed = {f.nodes: 1 / f.step_seconds for f in runs}
    one = speed[1]
    gains = {k: (speed[b] - speed[k]) / (b - k) / one for k, b in ((1, 2), (2, 4), (4, 8))}
    first_low = next(k for k, g in gains.items() if g < 0.5)
    assert last_paying(runs, 0.5).nodes == first_low


def test_durations_and_node_lists():
    assert parse_duration("30m", "--x") == 1800 and parse_duration("1h30m", "--x") == 5400
    assert parse_duration("90", "--x") == 90 and parse_duration("2d", "--x") == 172800
    for bad in ("soon", "30x", "0m", ""):
        with pytest.raises(CpuftError):
            parse_duration(bad, "--deadline")
    assert parse_nodes("8,1,2,2") == [1, 2, 8]
    with pytest.raises(CpuftError, match="at least 1"):
        parse_nodes("0,2")


def test_the_shipped_price_table_loads_and_a_broken_one_says_what_is_wrong(tmp_path):
    prices = load_prices(SHIPPED)
    assert len(prices) >= 8 and {p.isa for p in prices.values()} == set(ISA_SPEED)
    assert all(p.on_demand_per_hour > (p.spot_per_hour or 0) for p in prices.values())
    no_spot = tmp_path / "p.csv"
    no_spot.write_text("instance,cloud,physical_cores,isa,network_gbit,on_demand_usd_per_hour,"
                       "taken\nx,aws,8,avx2,10,1.0,2026\n")
    with pytest.raises(CpuftError, match="no spot_usd_per_hour column"):
        load_prices(no_spot)
    bad = tmp_path / "b.csv"
    bad.write_text("instance,cloud,physical_cores,isa,network_gbit,on_demand_usd_per_hour,"
                   "spot_usd_per_hour,taken\nx,aws,eight,avx2,10,1.0,,2026\n")
    with pytest.raises(CpuftError, match="row 2: physical_cores 'eight' is not a number"):
        load_prices(bad)


def test_a_calibration_names_what_it_measured_and_what_it_assumed(tmp_path):
    one = read_calibration(calibration_file(tmp_path / "a"))
    assert one.calibration.steps == ((0.0, pytest.approx(FIXED_SHARE * 0.5)), (32.0, 0.5))
    assert one.calibration.hidden_share == HIDDEN_SHARE
    assert any(a.startswith("fixed work a step: 10%") for a in one.assumed)
    # Timed at 16 and 64 samples too: steps are read off the lines between the three
    halves = read_calibration(calibration_file(
        tmp_path / "b", step_seconds_by_batch={"16": 0.3, "32": 0.5, "64": 0.8}))
    assert halves.calibration.steps == ((16.0, 0.3), (32.0, 0.5), (64.0, 0.8))
    assert step_seconds(halves.calibration.steps, 24) == pytest.approx(0.4)
    assert step_seconds(halves.calibration.steps, 48) == pytest.approx(0.65)
    assert step_seconds(halves.calibration.steps, 8) == pytest.approx(0.2)  # the first line on
    assert step_seconds(halves.calibration.steps, 128) == pytest.approx(1.4)  # the last line on
    assert not any(a.startswith("fixed work") for a in halves.assumed)
    # Two nodes waited 0.05 s of a 0.5 s step on a link that needs 0.0721 s for 90 MB
    two = read_calibration(calibration_file(tmp_path / "c", nodes=2, comm_wait_fraction=0.1))
    hidden = two.on_link(TEN_GBIT)
    raw = ring_allreduce_seconds(90e6, 2, TEN_GBIT)
    assert hidden.calibration.hidden_share == pytest.approx(1 - 0.05 / raw)
    assert two.calibration.steps[-1] == (32.0, pytest.approx(0.45))  # compute, not the wait
    assert not any(a.startswith("hidden") for a in hidden.assumed)
    taken = one.hiding_as(two, TEN_GBIT)
    assert taken.calibration.hidden_share == hidden.calibration.hidden_share
    assert taken.calibration.steps == one.calibration.steps
    with pytest.raises(CpuftError, match="ran on one node"):
        one.hiding_as(one, TEN_GBIT)
    with pytest.raises(CpuftError, match=r"forecast_inputs\.isa 'sse' is not one of"):
        read_calibration(calibration_file(tmp_path / "d", isa="sse"))
    (tmp_path / "e.json").write_text("{}")
    with pytest.raises(CpuftError, match="no forecast_inputs in it"):
        read_calibration(tmp_path / "e.json")
