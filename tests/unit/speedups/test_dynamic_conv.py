"""ConvBERT's mixed attention with its dynamic convolution as shifted sums: the same loss and
gradients as the stock module's gathered windows, checked before it is kept."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import ConvBertConfig, ConvBertForSequenceClassification

from cpuft.speedups.dynamic_conv import serves, speed_up_mixed_attention


def tiny_convbert(kernel: int = 5) -> nn.Module:
    torch.manual_seed(0)
    cfg = ConvBertConfig(vocab_size=100, hidden_size=32, embedding_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=64, conv_kernel_size=kernel,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         num_labels=2)
    return ConvBertForSequenceClassification(cfg)


def loss_and_grads(model: nn.Module, length: int):
    g = torch.Generator().manual_seed(length)
    ids = torch.randint(4, 100, (3, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1, length - 2:] = 0
    loss = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 0])).loss
    loss.backward()
    return loss, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("length", [2, 5, 17])  # 2: shorter than the kernel's reach
def test_the_shifted_sums_train_the_same(length):
    model = tiny_convbert()
    stock = copy.deepcopy(model)
    assert speed_up_mixed_attention(model) == (2, "")
    loss, grads = loss_and_grads(model, length)
    stock_loss, stock_grads = loss_and_grads(stock, length)
    torch.testing.assert_close(loss, stock_loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == stock_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, stock_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_under_bf16_autocast_the_logits_stay_close():
    model = tiny_convbert(9)
    stock = copy.deepcopy(model)
    speed_up_mixed_attention(model)
    ids = torch.randint(4, 100, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        ours, theirs = model(input_ids=ids).logits, stock(input_ids=ids).logits
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=0.05, atol=0.02)


def test_a_model_without_it_is_told_so():
    assert speed_up_mixed_attention(nn.Linear(2, 2)) == (
        0, "no mixed attention with dynamic convolution heads (ConvBERT's form)")


def test_an_even_kernel_is_not_taken():
    model = tiny_convbert(4)
    assert not any(serves(m) for m in model.modules())


def test_a_form_that_only_looks_like_it_is_undone():
    model = tiny_convbert()
    attention = next(m for m in model.modules() if serves(m))
    stock_forward = attention.forward

    def reversed_heads(hidden_states, attention_mask=None, **kwargs):
        context, probs = stock_forward(hidden_states, attention_mask, **kwargs)
        return context.flip(-1), probs  # the convolution heads first: another layout

    attention.forward = reversed_heads
    count, why = speed_up_mixed_attention(model)
    assert count == 0 and why.startswith("patched, the model did not give the same output")
    assert attention.forward is reversed_heads  # put back as it was
    assert not any("forward" in m.__dict__ for m in model.modules() if m is not attention)
