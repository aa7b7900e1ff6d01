"""Attention at fine-tuning lengths: matmul attention where it measures faster, the model's own
(sdpa) elsewhere."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification

from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups import attention
from cpuft.speedups.attention import matmul_attention_gain, measured_choice
from cpuft.speedups.registry import PatchContext

MODEL = SimpleNamespace(config=SimpleNamespace(num_attention_heads=12, hidden_size=768,
                                               attention_probs_dropout_prob=0.1))
RULE = ("cpuft_eager", "auto: sequences of at most 128 tokens ...")


@pytest.mark.parametrize("gain, rule_choice, chosen", [
    (1.3, "cpuft_eager", "cpuft_eager"),
    (0.8, "cpuft_eager", "default"),
    (1.1, "default", "cpuft_eager"),  # past the length rule, yet matmul measured faster
    (1.1, "eager", "eager"),  # --no-fast-dropout's matmul attention stays torch's eager
])
def test_the_faster_attention_is_chosen(monkeypatch, gain, rule_choice, chosen):
    seen = []
    monkeypatch.setattr(attention, "matmul_attention_gain",
                        lambda *shape: seen.append(shape) or gain)
    value, reason = measured_choice(MODEL, rule_choice, 128, "bf16", RULE)
    assert value == chosen and seen == [(12, 64, 128, torch.bfloat16, 0.1)]
    assert reason.startswith(f"auto: measured at 128 tokens, 12 heads of 64, dropout 0.1: "
                             f"matmul attention ran {gain:.2f}x sdpa's speed forward and "
                             "backward")


def test_a_model_without_heads_keeps_the_length_rule():
    assert measured_choice(SimpleNamespace(), "cpuft_eager", 128, "fp32", RULE) == RULE


def test_the_measurement_runs_both_kernels():
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    assert matmul_attention_gain(2, 8, 16, torch.float32, 0.1, batch=2, rounds=1) > 0
    assert torch.equal(torch.rand(2), expected)  # its dropout draws left the stream as it was


@pytest.mark.parametrize("family", ["fnet", "squeezebert"])
def test_a_model_outside_the_attention_interface_keeps_its_own(family, monkeypatch):
    # FNet has no attention, SqueezeBERT computes its own: transformers accepts any name for
    # them, so the plan would claim matmul attention where nothing runs it
    monkeypatch.setattr(attention, "matmul_attention_gain", lambda *shape: pytest.fail("timed"))
    config = AutoConfig.for_model(family, vocab_size=60, hidden_size=32, num_hidden_layers=1,
                                  embedding_size=32, num_attention_heads=4, intermediate_size=64)
    model = AutoModelForSequenceClassification.from_config(config)
    ctx = PatchContext(precision="bf16", sequence_length=32)
    decided = attention.AttentionSpeedUp().apply(model, Decision("cpuft_eager", "auto: ..."), ctx)
    assert decided.reason.startswith("the model computes its attention its own way")
    assert model.config._attn_implementation == decided.value != "cpuft_eager"


def test_the_heads_are_read_off_the_attention_not_the_layers_width(monkeypatch):
    # MobileBERT's attention is 4 heads of 8 inside 64-wide layers: timing 4 heads of 16 once
    # chose sdpa for it, whose math fallback then cost a tenth of its step
    config = AutoConfig.for_model("mobilebert", vocab_size=60, hidden_size=64,
                                  true_hidden_size=32, intra_bottleneck_size=32,
                                  embedding_size=32, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=64)
    model = AutoModelForSequenceClassification.from_config(config)
    assert attention.head_shape(model) == (4, 8)
    seen = []
    monkeypatch.setattr(attention, "matmul_attention_gain",
                        lambda *shape: seen.append(shape) or 1.2)
    _, reason = measured_choice(model, "cpuft_eager", 32, "bf16", RULE)
    assert seen == [(4, 8, 32, torch.bfloat16, 0.1)]
    assert reason.startswith("auto: measured at 32 tokens, 4 heads of 8, dropout 0.1")
