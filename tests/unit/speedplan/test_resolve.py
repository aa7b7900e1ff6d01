import pytest
import torch

from cpuft.speedplan.choices import BF16_MIN_SPEEDUP, precision_from_speedup
from cpuft.speedplan.probe import bf16_matmul_speedup
from cpuft.speedplan.resolve import settle_precision
from cpuft.speedplan.speed_plan import SpeedPlan


def plan(precision: str) -> SpeedPlan:
    """A plan as make_plan leaves it: 'auto' is a precision still to be measured (None)."""
    return SpeedPlan(precision=None if precision == "auto" else precision,
                     precision_reason="auto: CPU has avx512_bf16", threads=1)


@pytest.mark.parametrize(
    ("speedup", "chosen"),
    [(0.5, "fp32"), (BF16_MIN_SPEEDUP - 0.01, "fp32"), (BF16_MIN_SPEEDUP, "bf16"), (2.4, "bf16")],
)
def test_bf16_only_when_its_matmuls_are_clearly_faster(speedup, chosen):
    precision, reason = precision_from_speedup(speedup)
    assert precision == chosen
    assert f"{speedup:.2f}x fp32" in reason


def test_auto_is_measured_once_and_recorded():
    calls = []

    def measure() -> float:
        calls.append(1)
        return 0.53

    p = plan("auto")
    p = settle_precision(p, "auto", measure=measure)
    assert (p.precision, len(calls)) == ("fp32", 1)
    assert "0.53x" in p.precision_reason
    decided = plan("bf16")
    decided = settle_precision(decided, "bf16", measure=measure)
    assert decided.precision == "bf16" and len(calls) == 1


def test_ranks_keep_bf16_only_if_every_rank_chose_it():
    seen = []

    def others_fp32(flag: bool) -> bool:
        seen.append(flag)
        return False

    p = plan("auto")
    p = settle_precision(p, "auto", others_fp32, measure=lambda: 2.4)
    assert p.precision == "fp32" and seen == [True]
    assert "another rank" in p.precision_reason
    # A rank without native bf16 (fp32 without measuring) still joins the vote.
    fixed = plan("fp32")
    fixed = settle_precision(fixed, "auto", others_fp32, measure=lambda: pytest.fail("measured"))
    assert fixed.precision == "fp32" and seen == [True, False]
    agreed = plan("auto")
    agreed = settle_precision(agreed, "auto", lambda flag: flag, measure=lambda: 2.4)
    assert agreed.precision == "bf16"


def test_forced_precision_is_not_put_to_a_vote():
    p = plan("bf16")
    p = settle_precision(p, "bf16", lambda flag: pytest.fail("voted"))
    assert p.precision == "bf16"


def test_matmul_speedup_is_the_median_of_fp32_time_over_bf16_time(monkeypatch):
    from cpuft.speedplan import probe

    bf16_times = iter([1.0, 4.0, 0.5])  # fp32 takes 2 s every round: ratios 2, 0.5, 4

    def timed(a, b, reps):
        return 2.0 if a.dtype == torch.float32 else next(bf16_times)

    monkeypatch.setattr(probe, "_timed", timed)
    assert bf16_matmul_speedup(size=8, rounds=3, reps=1) == 2.0


def test_measuring_leaves_the_seeded_generator_alone():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    bf16_matmul_speedup(size=32, rounds=1, reps=1)
    assert torch.equal(torch.rand(3), expected)
