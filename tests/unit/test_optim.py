import copy

import pytest
import torch
from torch import nn

from cpuft import optim
from cpuft.optim import build_optimizer, clip_step, grad_norm


class Tiny(nn.Module):
    def __init__(self, sparse: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(6, 4, sparse=sparse)
        self.head = nn.Linear(4, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids)).pow(2).mean()


def train(model: Tiny, batches: list[torch.Tensor], max_norm: float = 0.0, *,
          lazy: bool = False, fused: bool = True) -> None:
    opt = build_optimizer(model, lr=0.05, weight_decay=0.1, fused=fused, lazy_rows=lazy)
    for ids in batches:
        model(ids).backward()
        clip_step(opt, model.parameters(), max_norm)
        opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("max_norm", [0.0, 0.01])
def test_lazy_rows_match_dense_adamw_when_every_row_is_used(max_norm):
    torch.manual_seed(0)
    dense = Tiny(sparse=False)
    sparse = copy.deepcopy(dense)
    sparse.embed.sparse = True
    # Every row in every batch, some twice: lazy and dense AdamW then do the same thing.
    batches = [torch.tensor([[0, 1, 2, 3, 4, 5, 2]]) for _ in range(5)]
    train(dense, batches, max_norm)
    train(sparse, batches, max_norm, lazy=True)
    for a, b in zip(dense.parameters(), sparse.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("max_norm", [0.0, 0.01])
def test_sparse_rows_take_torchs_dense_adamw_on_the_whole_table(monkeypatch, kernel, fused,
                                                                max_norm):
    """Rows a batch skips still decay (moments and weights) as in torch's dense step: by the
    row kernel, or, without it, by torch's step on the gradient made dense."""
    if not kernel:
        monkeypatch.setattr(optim, "adamw_rows", lambda: (None, "no kernel here"))
    torch.manual_seed(0)
    dense = Tiny(sparse=False)
    sparse = copy.deepcopy(dense)
    sparse.embed.sparse = True
    # Rows 4 and 5 are never used; rows 0-3 are skipped by some steps, repeated in others.
    batches = [torch.tensor([[0, 1, 1]]), torch.tensor([[2, 3]]), torch.tensor([[3, 0, 3]])]
    ref_opt = torch.optim.AdamW([{"params": [dense.embed.weight, dense.head.weight],
                                  "weight_decay": 0.1},
                                 {"params": [dense.head.bias], "weight_decay": 0.0}], lr=0.05)
    for ids in batches:
        dense(ids).backward()
        if max_norm:
            torch.nn.utils.clip_grad_norm_(dense.parameters(), max_norm)
        ref_opt.step()
        ref_opt.zero_grad()
    before = sparse.embed.weight.detach().clone()
    train(sparse, batches, max_norm, fused=fused)
    assert not torch.equal(sparse.embed.weight[4:], before[4:])  # weight decay and momentum
    for a, b in zip(dense.parameters(), sparse.parameters(), strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)


def test_lazy_rows_a_batch_does_not_use_stay_put():
    torch.manual_seed(0)
    model = Tiny(sparse=True)
    before = model.embed.weight.detach().clone()
    train(model, [torch.tensor([[0, 1, 1]]), torch.tensor([[1, 0]])], lazy=True)
    after = model.embed.weight.detach()
    assert torch.equal(after[2:], before[2:])
    assert not torch.equal(after[:2], before[:2])


def test_clip_counts_a_repeated_row_once():
    torch.manual_seed(0)
    dense = Tiny(sparse=False)
    sparse = copy.deepcopy(dense)
    sparse.embed.sparse = True
    ids = torch.tensor([[3, 3, 1]])
    dense(ids).backward()
    sparse(ids).backward()
    total = grad_norm(sparse.parameters())
    torch.testing.assert_close(total, torch.nn.utils.get_total_norm(
        [p.grad for p in dense.parameters()]))
    torch.testing.assert_close(sparse.embed.weight.grad.to_dense(), dense.embed.weight.grad)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("max_norm", [0.0, 0.05, 100.0])
def test_clipping_in_the_step_equals_torch_clip_then_adamw(fused, max_norm):
    torch.manual_seed(0)
    ours = nn.Sequential(nn.Linear(5, 7), nn.GELU(), nn.Linear(7, 1))
    ref = copy.deepcopy(ours)
    opt = build_optimizer(ours, lr=0.05, weight_decay=0.1, fused=fused)
    ref_opt = torch.optim.AdamW([{"params": [ref[0].weight, ref[2].weight], "weight_decay": 0.1},
                                 {"params": [ref[0].bias, ref[2].bias], "weight_decay": 0.0}],
                                lr=0.05)
    for _ in range(4):
        x = torch.randn(8, 5)
        ours(x).pow(2).mean().backward()
        ref(x).pow(2).mean().backward()
        norm = clip_step(opt, ours.parameters(), max_norm)
        if max_norm:
            want = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
            assert norm == pytest.approx(float(want), rel=1e-6)  # before clipping, as torch's
        else:
            assert norm is None  # nothing clips: no norm computed
        ref_opt.step()
        opt.zero_grad(set_to_none=True)
        ref_opt.zero_grad(set_to_none=True)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert opt.grad_scale is None


def test_optimizer_state_round_trips():
    torch.manual_seed(0)
    model = Tiny(sparse=True)
    opt = build_optimizer(model, lr=0.05, weight_decay=0.1, fused=True)
    model(torch.tensor([[0, 2]])).backward()
    opt.step()
    again = build_optimizer(model, lr=0.05, weight_decay=0.1, fused=True)
    again.load_state_dict(opt.state_dict())
    state = again.state[model.embed.weight]
    assert float(state["step"]) == 1.0 and state["exp_avg"][2].abs().sum() > 0


def test_word_embeddings_go_sparse_unless_tied_to_the_output():
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

    from cpuft.speedups.sparse_embeddings import make_embeddings_sparse

    small = dict(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32)
    classifier = BertForSequenceClassification(BertConfig(**small))
    assert make_embeddings_sparse(classifier) == ""
    assert classifier.get_input_embeddings().sparse
    masked_lm = BertForMaskedLM(BertConfig(**small))  # decoder weight tied to the embedding
    assert "tied" in make_embeddings_sparse(masked_lm)
    assert not masked_lm.get_input_embeddings().sparse
    assert "no nn.Embedding" in make_embeddings_sparse(nn.Linear(2, 2))
