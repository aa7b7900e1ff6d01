import torch

from cpuft.distributed import powersgd
from cpuft.distributed.powersgd import PowerSGD


def test_which_gradients_are_compressed():
    ps = PowerSGD(rank=4)
    assert ps.compresses(torch.Size([384, 384])) and ps.compresses(torch.Size([1536, 384]))
    assert not ps.compresses(torch.Size([384]))  # vectors go as they are
    assert not ps.compresses(torch.Size([4, 100]))  # no smaller than its rank
    assert not ps.compresses(torch.Size([12, 12]))  # factors as big as the matrix


def test_low_rank_gradients_pass_exactly_and_the_rest_is_carried_over(monkeypatch):
    monkeypatch.setattr(powersgd.dist, "all_reduce", lambda t, *a, **k: None)  # one rank
    torch.manual_seed(0)
    params = [torch.empty(64, 48), torch.empty(48)]
    low_rank = torch.randn(64, 2) @ torch.randn(2, 48)
    vector = torch.randn(48)
    buffer = torch.cat([low_rank.reshape(-1), vector])
    ps = PowerSGD(rank=4, start_step=0)
    ps._compressed(0, buffer, params, world=1)
    torch.testing.assert_close(buffer[: 64 * 48].view(64, 48), low_rank, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(buffer[64 * 48:], vector)
    assert float(ps.errors[0].abs().max()) < 1e-4

    full_rank = torch.randn(64, 48)
    buffer = torch.cat([full_rank.reshape(-1), vector])
    ps._compressed(0, buffer, params, world=1)
    sent = buffer[: 64 * 48].view(64, 48)
    # What rank 4 could not carry is kept for the next step: sent + kept = gradient (+ old error).
    torch.testing.assert_close(sent + ps.errors[0][: 64 * 48].view(64, 48),
                               full_rank + 0.0, atol=2e-4, rtol=1e-4)
    assert float(ps.errors[0].abs().max()) > 0.1
