import pytest

from cpuft.metrics.pace import steady_rate, steady_seconds, warmup_steps


@pytest.mark.parametrize(("steps", "cut"), [(1, 0), (2, 1), (10, 1), (40, 4), (321, 32)])
def test_warm_up_is_the_first_tenth_but_never_every_step(steps, cut):
    assert warmup_steps(steps) == cut


def test_steady_rate_leaves_the_slow_first_steps_out():
    seconds = [5.0, 3.0] + [0.5] * 18  # 20 steps: the first 2 are warm-up
    assert steady_seconds(seconds) == pytest.approx(9.0)
    assert steady_rate(seconds, 32) == pytest.approx(32 * 18 / 9.0)
    assert steady_rate([], 32) == 0.0
    # a slower rank's 12 s for the same 18 steps sets the pace
    assert steady_rate(seconds, 32, seconds=12.0) == pytest.approx(32 * 18 / 12.0)
