"""DeBERTa's disentangled attention over the relative positions a batch reaches: the same loss
and gradients as over the whole span, checked before it is kept."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

from cpuft.speedups.relative_span import SPAN, narrow_relative_span


def tiny_deberta(share_att_key: bool) -> nn.Module:
    torch.manual_seed(0)
    cfg = DebertaV2Config(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=64,
                          max_position_embeddings=64, position_buckets=16,
                          relative_attention=True, pos_att_type=["p2c", "c2p"],
                          share_att_key=share_att_key, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, num_labels=2)
    return DebertaV2ForSequenceClassification(cfg)


def loss_and_grads(model: nn.Module, length: int):
    g = torch.Generator().manual_seed(length)
    ids = torch.randint(4, 100, (3, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1, length - 3:] = 0
    loss = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 0])).loss
    loss.backward()
    return loss, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("share_att_key", [False, True])
@pytest.mark.parametrize("length", [5, 12, 40])  # 40: past the 16-row span, the whole table
def test_the_narrowed_attention_trains_the_same(share_att_key, length):
    model = tiny_deberta(share_att_key)
    stock = copy.deepcopy(model)
    assert narrow_relative_span(model) == (2, "")
    loss, grads = loss_and_grads(model, length)
    stock_loss, stock_grads = loss_and_grads(stock, length)
    torch.testing.assert_close(loss, stock_loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == stock_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, stock_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    assert all(getattr(m, SPAN, 16) == 16 for m in model.modules())  # the span put back


def test_a_model_without_it_is_told_so():
    assert narrow_relative_span(nn.Linear(2, 2)) == (
        0, "no disentangled relative attention (DeBERTa's form) in the model")


def test_a_bias_that_reads_the_whole_table_is_not_narrowed():
    model = tiny_deberta(False)
    attention = next(m for m in model.modules() if hasattr(m, "disentangled_attention_bias"))

    def whole_table(query_layer, key_layer, relative_pos, rel_embeddings, scale_factor):
        # a score for each key that depends on how many rows it is given
        return key_layer.sum(-1).unsqueeze(-2) * rel_embeddings.shape[0] * 0.1

    attention.disentangled_attention_bias = whole_table
    count, why = narrow_relative_span(model)
    assert count == 0 and why.startswith("patched, the model did not give the same output")
    # undone: no narrowed method is left on any module (the classes' own are back)
    assert not any("disentangled_attention_bias" in m.__dict__ for m in model.modules())
