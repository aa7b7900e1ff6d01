import copy

import pytest
import torch
from torch import nn
from transformers import (
    AlbertConfig,
    AlbertForSequenceClassification,
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    ConvBertConfig,
    ConvBertForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    ElectraConfig,
    ElectraForSequenceClassification,
    ErnieConfig,
    ErnieForSequenceClassification,
    FNetConfig,
    FNetForSequenceClassification,
    MobileBertConfig,
    MobileBertForSequenceClassification,
    MPNetConfig,
    MPNetForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
    XLNetConfig,
    XLNetForSequenceClassification,
)

from cpuft.errors import CpuftError
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


def build(family: str) -> nn.Module:
    if family == "bert":
        return BertForSequenceClassification(BertConfig(**SMALL))
    if family == "roberta":
        return RobertaForSequenceClassification(RobertaConfig(**SMALL, pad_token_id=1))
    if family == "electra":
        return ElectraForSequenceClassification(ElectraConfig(**SMALL, embedding_size=32))
    if family == "ernie":
        return ErnieForSequenceClassification(ErnieConfig(**SMALL))
    if family == "mpnet":
        return MPNetForSequenceClassification(MPNetConfig(**SMALL, pad_token_id=1))
    if family == "albert":  # one layer, shared by the three
        return AlbertForSequenceClassification(AlbertConfig(**SMALL, embedding_size=16))
    if family == "convbert":  # a kernel of 5: the first token's span reaches 2 tokens on
        return ConvBertForSequenceClassification(ConvBertConfig(**SMALL, embedding_size=32,
                                                                conv_kernel_size=5))
    if family == "distilbert":
        return DistilBertForSequenceClassification(DistilBertConfig(
            vocab_size=60, dim=32, n_layers=3, n_heads=4, hidden_dim=64, dropout=0.0,
            attention_dropout=0.0, seq_classif_dropout=0.0))
    if family.startswith("mobilebert"):  # its three bottleneck settings
        settings = {"mobilebert": {}, "mobilebert-narrow-values": {
            "use_bottleneck_attention": True}, "mobilebert-no-bottleneck": {
            "use_bottleneck": False}}[family]
        return MobileBertForSequenceClassification(MobileBertConfig(
            **SMALL, intra_bottleneck_size=16, embedding_size=16, num_feedforward_networks=2,
            **settings))
    raise ValueError(family)


FAMILIES = ["bert", "roberta", "electra", "ernie", "mpnet", "distilbert", "convbert", "albert",
            "mobilebert", "mobilebert-narrow-values", "mobilebert-no-bottleneck"]
OWN_ATTENTION = ("mpnet", "convbert")
"""Families that compute their attention themselves, not through transformers' interface."""


@pytest.mark.parametrize("family, attention", [
    (family, attention) for family in FAMILIES
    for attention in (["eager"] if family in OWN_ATTENTION else ["eager", "sdpa", "cpuft_eager"])])
def test_first_token_layer_gives_the_same_loss_and_gradients(attention, family):
    register_attention()
    torch.manual_seed(0)
    full = build(family)
    if family not in OWN_ATTENTION:
        full.set_attn_implementation(attention)
    full.train()
    cut = copy.deepcopy(full)
    assert use_first_token_layer(cut) == ""
    assert list(cut.state_dict()) == list(full.state_dict())

    full_loss, full_grads = loss_and_grads(full)
    cut_loss, cut_grads = loss_and_grads(cut)
    torch.testing.assert_close(cut_loss, full_loss)
    for name, grad in full_grads.items():
        # Every parameter still gets a gradient, the last layer's query included (but one the
        # model holds and never uses: MobileBERT's shared bottleneck where values are narrowed)
        assert (cut_grads[name] is None) is (grad is None), name
        if grad is None:
            continue
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


def test_a_shared_layer_runs_the_first_token_way_on_its_last_run_alone():
    torch.manual_seed(0)
    model = build("albert").eval()
    assert use_first_token_layer(model) == ""
    seen = []
    model.albert.encoder.albert_layer_groups[0].albert_layers[0].ffn.register_forward_hook(
        lambda _m, _i, out: seen.append(tuple(out.shape)))
    with torch.no_grad():
        model(input_ids=batch()["input_ids"])
        model(input_ids=batch()["input_ids"])  # the count starts again each forward pass
    assert seen == [(4, 9, 64), (4, 9, 64), (4, 1, 64)] * 2
    # A model that comes to run the layer more often than it did when checked says so.
    model.config.num_hidden_layers = 4
    with pytest.raises(CpuftError, match="ran its shared last layer 4 times, not the 3"):
        model(input_ids=batch()["input_ids"])


def test_a_shared_layer_under_gradient_checkpointing_is_left_alone():
    model = build("albert")
    model.albert.encoder.gradient_checkpointing = True  # as transformers' switch sets it
    assert "gradient checkpointing" in use_first_token_layer(model)
    assert all("forward" not in vars(m) for m in model.modules())


def test_models_whose_head_reads_more_than_the_first_token_are_left_alone(monkeypatch):
    masked_lm = BertForMaskedLM(BertConfig(**SMALL))
    assert use_first_token_layer(masked_lm) == \
        "the head reads more of the last layer than its first position"
    # XLNet's summary reads the last token, not the first.
    xlnet = XLNetForSequenceClassification(XLNetConfig(vocab_size=60, d_model=32, n_layer=2,
                                                       n_head=4, d_inner=64))
    assert "reads more of the last layer" in use_first_token_layer(xlnet)
    decoder = BertForSequenceClassification(BertConfig(**SMALL, is_decoder=True))
    assert "decoder" in use_first_token_layer(decoder)
    assert "no stack of layers" in use_first_token_layer(nn.Linear(2, 2))
    # ConvBERT's attention, its convolution heads unseen, is BERT's by its names, but its
    # context is twice as wide: it does not run the first-token way; RoFormer's rotates its
    # queries and keys: other logits. Both are named and undone.
    from transformers import RoFormerConfig, RoFormerForSequenceClassification

    from cpuft.speedups import first_token

    monkeypatch.setattr(first_token.dynamic_conv, "serves", lambda module: False)
    convbert = build("convbert")
    assert "taken as query/key/value with an output block, did not run" in \
        use_first_token_layer(convbert)
    roformer = RoFormerForSequenceClassification(RoFormerConfig(**SMALL, embedding_size=32))
    assert use_first_token_layer(roformer).startswith(
        "the last layer is given sinusoidal_pos besides its input")
    for model in (masked_lm, xlnet, convbert, roformer):  # nothing was patched
        assert all("forward" not in vars(m) for m in model.modules())


def test_a_layer_of_no_form_served_is_named_and_one_that_changes_the_logits_is_undone():
    from cpuft.speedups import first_token

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**SMALL)).eval()
    layer = model.bert.encoder.layer[-1]
    # A query that is no plain linear layer (it runs the same): no form matches.
    layer.attention.self.query = nn.Sequential(layer.attention.self.query)
    why = use_first_token_layer(model)
    assert why.startswith("the last layer's attention has none of the forms served")
    assert "its linear layers: 0, dense, key, value" in why

    model = BertForSequenceClassification(BertConfig(**SMALL)).eval()
    wrong = first_token.Form("a form whose sums are off", first_token._bert_form(
        model.bert.encoder.layer[-1]).attention, lambda ctx, first: first * 2)
    first_token.FORMS = (lambda _layer: wrong, *first_token.FORMS)
    try:
        assert use_first_token_layer(model).startswith(
            "the last layer as a form whose sums are off gave another output at the first position")
    finally:
        first_token.FORMS = first_token.FORMS[1:]
    assert "forward" not in vars(model.bert.encoder.layer[-1])


def test_no_speed_up_decides_by_a_model_class_name():
    """Speed-ups decide from what a model is and does, never from what its class is called."""
    import pathlib
    import re

    import transformers

    names = {n for n in dir(transformers) if re.fullmatch(
        r"[A-Z]\w*(For\w+|Model|LMHeadModel|Layer|Attention)", n)}
    folder = pathlib.Path(first_token_module().__file__).parent
    for path in folder.glob("*.py"):
        text = path.read_text()
        found = sorted(n for n in names if re.search(rf"\b{n}\b", text))
        assert not found, f"{path.name} names {found}"
        assert "__name__" not in re.sub(r"type\(\w+\)\.__name__}", "", text) or \
            path.name == "registry.py", path.name


def first_token_module():
    from cpuft.speedups import first_token

    return first_token


def test_folded_keys_and_values_match_projected_ones_under_dropout():
    """With attention dropout the kept weights no longer sum to 1: the value bias must be
    weighted by what they do sum to. Both ways draw one mask of the same size from the same
    seed, so they drop the same weights."""
    from cpuft.speedups.dropout import fast_dropout
    from cpuft.speedups.first_token import _bert_form, first_token_attention

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
    folded = first_token_attention(_bert_form(model.bert.encoder.layer[-1]).attention, hidden,
                                   mask)

    torch.manual_seed(5)
    query = sa.query(hidden[:, :1]).view(4, 1, 4, 8).transpose(1, 2)
    key = sa.key(hidden).view(4, 9, 4, 8).transpose(1, 2)
    value = sa.value(hidden).view(4, 9, 4, 8).transpose(1, 2)
    probs = torch.softmax(query @ key.transpose(2, 3) * sa.scaling + mask, dim=-1)
    probs = fast_dropout(probs, 0.5)
    expected = (probs @ value).transpose(1, 2).reshape(4, 1, 32)
    torch.testing.assert_close(folded, expected, atol=1e-5, rtol=1e-4)
    assert probs[1, ..., 5:].abs().sum() == 0


def test_a_layer_whose_tokens_mix_without_weights_runs_on_one_position():
    # FNet mixes tokens with a Fourier transform: the first position's mix still reads every
    # token, the output block and feed-forward chunk then run on that position alone
    torch.manual_seed(0)
    full = FNetForSequenceClassification(FNetConfig(
        vocab_size=60, hidden_size=32, num_hidden_layers=3, intermediate_size=64,
        hidden_dropout_prob=0.0)).train()
    cut = copy.deepcopy(full)
    assert use_first_token_layer(cut) == ""
    ids, labels = batch()["input_ids"], batch()["labels"]  # FNet takes no attention mask
    seen = []
    cut.fnet.encoder.layer[-1].intermediate.register_forward_hook(
        lambda _m, _i, out: seen.append(tuple(out.shape)))
    full_loss, cut_loss = full(input_ids=ids, labels=labels).loss, cut(input_ids=ids,
                                                                        labels=labels).loss
    full_loss.backward()
    cut_loss.backward()
    assert seen == [(4, 1, 64)]
    torch.testing.assert_close(cut_loss, full_loss)
    grads = dict(cut.named_parameters())
    for name, p in full.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, atol=1e-6, rtol=1e-4)
