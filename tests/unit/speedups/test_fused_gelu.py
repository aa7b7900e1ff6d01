"""tanh-GELU computed op by op becomes torch's fused kernel: found by running, output kept."""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import AlbertConfig, AlbertForSequenceClassification

from cpuft.speedups.fused_gelu import fuse_tanh_gelu


def tiny_albert(act: str = "gelu_new") -> nn.Module:
    torch.manual_seed(0)
    cfg = AlbertConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                       num_attention_heads=2, intermediate_size=64, hidden_act=act,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                       classifier_dropout_prob=0.0, num_labels=2)
    return AlbertForSequenceClassification(cfg)


def test_an_op_by_op_gelu_is_fused_and_trains_the_same():
    model = tiny_albert()
    stock = copy.deepcopy(model)
    assert fuse_tanh_gelu(model) == 1  # ALBERT's one shared layer holds one activation
    assert sum(isinstance(m, nn.GELU) and m.approximate == "tanh" for m in model.modules()) == 1
    ids = torch.randint(0, 100, (3, 9), generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 1, 1])
    losses = []
    for m in (stock, model):
        loss = m(input_ids=ids, labels=labels).loss
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for (name, a), b in zip(stock.named_parameters(), model.parameters(), strict=True):
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_other_activations_and_stateful_modules_are_left_alone():
    assert fuse_tanh_gelu(tiny_albert("gelu")) == 0  # exact GELU: already one kernel
    norm = nn.BatchNorm1d(64, affine=False)  # no parameters, but running statistics
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.5), norm, nn.Identity())
    before = norm.running_mean.clone()
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    assert fuse_tanh_gelu(model) == 0
    assert torch.equal(torch.rand(2), expected)  # the dropout probe left the stream alone
    assert torch.equal(norm.running_mean, before)
    assert [type(m) for m in model] == [nn.Linear, nn.ReLU, nn.Dropout, nn.BatchNorm1d,
                                        nn.Identity]
