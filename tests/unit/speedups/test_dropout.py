import pytest
import torch
from torch import nn

from cpuft.speedups.dropout import (
    FastDropout,
    fast_dropout,
    keep_mask,
    scaled_keep_mask,
    swap_dropout,
)


def test_keep_rate_and_scale():
    torch.manual_seed(0)
    x = torch.ones(200_000)
    y = fast_dropout(x, 0.1)
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.9) < 0.005
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / 0.9))
    assert abs(y.mean().item() - 1.0) < 0.01  # unbiased, like nn.Dropout


def test_masks_follow_the_torch_seed():
    torch.manual_seed(7)
    a = keep_mask(torch.Size([3, 1001]), 0.3)
    torch.manual_seed(7)
    b = keep_mask(torch.Size([3, 1001]), 0.3)
    assert torch.equal(a, b) and a.shape == (3, 1001)
    assert not torch.equal(a, keep_mask(torch.Size([3, 1001]), 0.3))


def test_gradient_is_mask_times_scale():
    torch.manual_seed(1)
    x = torch.randn(64, 50, requires_grad=True)
    y = fast_dropout(x, 0.25)
    y.sum().backward()
    kept = y.detach() != 0
    assert torch.allclose(x.grad, kept.float() / 0.75)


def test_eval_mode_and_swap():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1), nn.Sequential(nn.Dropout(0.2)),
                          nn.Dropout(0.0))
    assert swap_dropout(model) == 2
    assert isinstance(model[1], FastDropout) and model[2][0].p == 0.2
    assert type(model[3]) is nn.Dropout
    model.eval()
    x = torch.randn(3, 4)
    assert torch.equal(model[1](x), x)


def test_cpuft_attention_masks_padding(tmp_path):
    """A sample's logits must not depend on how much padding its batch has."""
    from transformers import BertConfig, BertForSequenceClassification

    from cpuft.speedups.attention import register_attention

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, initializer_range=0.5)).eval()
    model.set_attn_implementation(register_attention())
    ids = torch.tensor([[2, 7, 9, 3]])
    alone = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    padded_ids = torch.tensor([[2, 7, 9, 3, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0]])
    padded = model(input_ids=padded_ids, attention_mask=mask).logits
    assert torch.allclose(alone, padded, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_scaled_mask_is_the_keep_mask_times_the_scale_in_its_dtype(dtype):
    shape = torch.Size([5, 7, 33])
    torch.manual_seed(3)
    keep = keep_mask(shape, 0.1)
    torch.manual_seed(3)
    mask = scaled_keep_mask(shape, 0.1, dtype)
    assert mask.dtype == dtype and mask.shape == shape
    expected = keep.to(dtype) * torch.tensor(1 / 0.9, dtype=dtype)
    assert torch.equal(mask, expected)
    assert 0 < int(keep.sum()) < shape.numel()


def test_cpuft_attention_takes_the_softmax_of_bf16_scores_in_fp32():
    """torch's bf16 CPU softmax rounds an fp32 computation, so the values are the same either
    way; what differs is the kernel, and the bf16 one is several times slower."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from cpuft.speedups.attention import eager_attention

    class SoftmaxDtypes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[torch.dtype] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten._softmax,
                                       torch.ops.aten._softmax_backward_data):
                self.seen.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    torch.manual_seed(4)
    query, key, value = (torch.randn(2, 3, 5, 8, dtype=torch.bfloat16, requires_grad=True)
                         for _ in range(3))
    mask = torch.zeros(2, 1, 1, 5, dtype=torch.bfloat16)
    mask[1, ..., 3:] = torch.finfo(torch.bfloat16).min
    with SoftmaxDtypes() as mode:
        out, weights = eager_attention(nn.Module().eval(), query, key, value, mask, scaling=0.3)
        out.sum().backward()
    assert mode.seen == [torch.float32, torch.float32]
    scores = torch.matmul(query, key.transpose(2, 3)) * 0.3 + mask
    assert weights.dtype == out.dtype == torch.bfloat16
    assert torch.equal(weights, torch.softmax(scores.float(), dim=-1).to(torch.bfloat16))
    assert torch.equal(weights[1, ..., 3:], torch.zeros_like(weights[1, ..., 3:]))


def test_masks_come_from_the_kernel_and_depend_on_the_seed_not_the_threads():
    from cpuft.speedups import dropout as fd

    assert fd._mask_kernel() is not None, "the dropout-mask kernel did not build"
    shape = torch.Size([64, 1001])  # enough words for the parallel loop, and a ragged tail
    threads = torch.get_num_threads()
    masks = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            torch.manual_seed(5)
            masks.append(scaled_keep_mask(shape, 0.1, torch.bfloat16))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(masks[0], masks[1])
    kept = (masks[0] != 0).float().mean().item()
    assert abs(kept - 0.9) < 0.005
    tail = masks[0].flatten()[-3:]  # 64 * 1001 is not a multiple of 4: the last word's part
    assert all(float(v) in (0.0, float(torch.tensor(1 / 0.9, dtype=torch.bfloat16))) for v in tail)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_without_the_kernel_numpy_makes_the_same_kind_of_mask(monkeypatch, dtype):
    from cpuft.speedups import dropout as fd

    monkeypatch.setattr(fd, "_mask_kernel", lambda: None)
    shape = torch.Size([40, 999])
    torch.manual_seed(3)
    keep = keep_mask(shape, 0.2)
    torch.manual_seed(3)
    mask = scaled_keep_mask(shape, 0.2, dtype)
    assert torch.equal(mask, keep.to(dtype) * torch.tensor(1 / 0.8, dtype=dtype))
    assert abs(keep.float().mean().item() - 0.8) < 0.01


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_a_seed_gives_the_same_mask_with_or_without_the_kernel(monkeypatch, dtype):
    from cpuft.speedups import dropout as fd

    assert fd._mask_kernel() is not None, "the dropout-mask kernel did not build"
    shape = torch.Size([37, 1001])  # a ragged last word, and enough for the parallel loop
    made = {}
    for path in ("kernel", "numpy"):
        if path == "numpy":
            monkeypatch.setattr(fd, "_mask_kernel", lambda: None)
        torch.manual_seed(11)
        made[path] = (scaled_keep_mask(shape, 0.15, dtype), keep_mask(shape, 0.3))
    assert torch.equal(made["kernel"][0], made["numpy"][0])
    assert torch.equal(made["kernel"][1], made["numpy"][1])
    assert not torch.equal(made["numpy"][0] != 0, made["numpy"][1])  # two draws, two masks


def test_the_numpy_stream_is_splitmix64():
    from cpuft.speedups.dropout import splitmix_draws

    def splitmix(seed, w):  # the reference algorithm, one word at a time
        z = (seed + (w + 1) * 0x9E3779B97F4A7C15) % 2**64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
        return z ^ (z >> 31)

    seed = 2**62 + 12345
    draws = splitmix_draws(10, seed)
    expected = [(splitmix(seed, j // 4) >> (16 * (j % 4))) & 0xFFFF for j in range(10)]
    assert draws.tolist() == expected
