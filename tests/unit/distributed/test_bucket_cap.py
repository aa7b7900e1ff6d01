"""How big DDP's gradient buckets are when --bucket-cap-mb is left at 0."""

import torch

from cpuft.distributed.group import bucket_cap_for


def _param(n: int, dtype: torch.dtype, trained: bool = True) -> torch.Tensor:
    return torch.zeros(n, dtype=dtype, requires_grad=trained)


def test_fp32_gradients_take_ddps_default():
    assert bucket_cap_for([_param(100, torch.float32)]) == 25.0


def test_bf16_gradients_take_half_the_bytes_per_bucket():
    assert bucket_cap_for([_param(100, torch.bfloat16)]) == 12.5


def test_a_mix_is_weighted_by_how_many_gradients_each_type_has():
    # 3 bf16 gradients for each fp32 one: 2.5 bytes each on average
    mixed = [_param(300, torch.bfloat16), _param(100, torch.float32)]
    assert bucket_cap_for(mixed) == 25.0 * 2.5 / 4


def test_frozen_parameters_do_not_count_and_a_request_wins():
    params = [_param(100, torch.bfloat16), _param(10_000, torch.float32, trained=False)]
    assert bucket_cap_for(params) == 12.5
    assert bucket_cap_for(params, requested=4.0) == 4.0
    assert bucket_cap_for([]) == 25.0
