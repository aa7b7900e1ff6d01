import copy

import pytest
import torch
from torch import nn
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    ElectraConfig,
    ElectraForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
)

from cpuft.speedups.attention import register_attention
from cpuft.speedups.first_token import use_first_token_layer

SMALL = dict(vocab_size=60, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
             intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def batch() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(3, 60, (4, 9))
    mask = torch.ones(4, 9, dtype=torch.long)
    mask[1, 5:] = 0  # padded rows: the first token must not attend to their padding
    mask[3, 2:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1, 1, 0])}


def loss_and_grads(model: nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    loss = model(**batch()).loss
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("attention", ["eager", "sdpa", "cpuft_eager"])
@pytest.mark.parametrize("family", ["bert", "roberta", "electra"])
def test_first_token_layer_gives_the_same_loss_and_gradients(attention, family):
    register_attention()
    torch.manual_seed(0)
    if family == "bert":
        full = BertForSequenceClassification(BertConfig(**SMALL))
    elif family == "roberta":
        full = RobertaForSequenceClassification(RobertaConfig(**SMALL, pad_token_id=1))
    else:
        full = ElectraForSequenceClassification(ElectraConfig(**SMALL, embedding_size=32))
    full.set_attn_implementation(attention)
    full.train()
    cut = copy.deepcopy(full)
    assert use_first_token_layer(cut) == ""
    assert list(cut.state_dict()) == list(full.state_dict())

    full_loss, full_grads = loss_and_grads(full)
    cut_loss, cut_grads = loss_and_grads(cut)
    torch.testing.assert_close(cut_loss, full_loss)
    for name, grad in full_grads.items():
        # Every parameter still gets a gradient, the last layer's query included.
        assert cut_grads[name] is not None, name
        torch.testing.assert_close(cut_grads[name], grad, atol=1e-6, rtol=1e-4)
    # Without padding the model may build no mask at all.
    ids = batch()["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(cut.eval()(input_ids=ids).logits,
                                   full.eval()(input_ids=ids).logits)


def test_the_last_layer_really_runs_on_one_position():
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**SMALL)).eval()
    use_first_token_layer(model)
    seen = []
    model.bert.encoder.layer[-1].intermediate.register_forward_hook(
        lambda _m, _i, out: seen.append(out.shape))
    with torch.no_grad():
        model(input_ids=batch()["input_ids"])
    assert seen == [torch.Size([4, 1, 64])]


def test_models_whose_head_reads_more_than_the_first_token_are_left_alone():
    masked_lm = BertForMaskedLM(BertConfig(**SMALL))
    assert "not a BERT-family classifier" in use_first_token_layer(masked_lm)
    decoder = BertForSequenceClassification(BertConfig(**SMALL, is_decoder=True))
    assert "decoder" in use_first_token_layer(decoder)
    assert "not a BERT-family classifier" in use_first_token_layer(nn.Linear(2, 2))


def test_folded_keys_and_values_match_projected_ones_under_dropout():
    """With attention dropout the kept weights no longer sum to 1: the value bias must be
    weighted by what they do sum to. Both ways draw one mask of the same size from the same
    seed, so they drop the same weights."""
    from cpuft.speedups.dropout import fast_dropout
    from cpuft.speedups.first_token import _first_token_attention

    torch.manual_seed(0)
    config = BertConfig(**{**SMALL, "attention_probs_dropout_prob": 0.5})
    config._attn_implementation = register_attention()
    model = BertForSequenceClassification(config).train()
    sa = model.bert.encoder.layer[-1].attention.self
    for linear in (sa.key, sa.value):
        nn.init.normal_(linear.bias)
    hidden = torch.randn(4, 9, 32)
    mask = torch.zeros(4, 1, 1, 9)
    mask[1, ..., 5:] = torch.finfo(torch.float32).min

    torch.manual_seed(5)
    folded = _first_token_attention(sa, hidden, mask)

    torch.manual_seed(5)
    query = sa.query(hidden[:, :1]).view(4, 1, 4, 8).transpose(1, 2)
    key = sa.key(hidden).view(4, 9, 4, 8).transpose(1, 2)
    value = sa.value(hidden).view(4, 9, 4, 8).transpose(1, 2)
    probs = torch.softmax(query @ key.transpose(2, 3) * sa.scaling + mask, dim=-1)
    probs = fast_dropout(probs, 0.5)
    expected = (probs @ value).transpose(1, 2).reshape(4, 1, 32)
    torch.testing.assert_close(folded, expected, atol=1e-5, rtol=1e-4)
    assert probs[1, ..., 5:].abs().sum() == 0
