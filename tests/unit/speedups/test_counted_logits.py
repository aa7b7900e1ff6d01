"""The vocabulary head at counted positions: the stock loss and gradients."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from cpuft.data.lm import IGNORE
from cpuft.speedups.counted_logits import kept_positions, use_counted_logits
from tests.helpers import make_tiny_llama


def _llama(tmp_path: Path) -> nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(make_tiny_llama(tmp_path / "m"))


def _batch(vocab: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (3, 10), generator=gen)
    labels = ids.clone()
    labels[0, :7] = IGNORE           # a prompt, then a 3-token response
    labels[1, :4] = IGNORE
    labels[1, 8:] = IGNORE           # padding at the end
    labels[2, :] = IGNORE            # nothing counts in this row
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _loss_and_grads(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[float, list]:
    model.train()
    model.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in model.parameters() if p.requires_grad]


def test_kept_positions_are_those_whose_next_token_counts() -> None:
    labels = torch.tensor([[IGNORE, IGNORE, 5, 6], [IGNORE, 3, IGNORE, IGNORE]])
    assert kept_positions(labels).tolist() == [[False, True, True, False],
                                               [True, False, False, False]]


@pytest.mark.parametrize("lora", [False, True])
def test_the_loss_and_gradients_are_the_stock_ones(tmp_path: Path, lora: bool) -> None:
    model = _llama(tmp_path)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear",
                                                 lora_dropout=0.0, task_type="CAUSAL_LM"))
    stock = copy.deepcopy(model)
    assert use_counted_logits(model) == ""
    batch = _batch(model.config.vocab_size)
    want_loss, want = _loss_and_grads(stock, dict(batch))
    got_loss, got = _loss_and_grads(model, dict(batch))
    assert got_loss == pytest.approx(want_loss, rel=1e-5)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    # Only the counted positions were projected: 3 + 4 + 0 of 30.
    model.train()
    assert model(**batch).logits.shape == (7, model.config.vocab_size)


def test_evaluation_and_unlabelled_calls_run_the_stock_forward(tmp_path: Path) -> None:
    model = _llama(tmp_path)
    assert use_counted_logits(model) == ""
    batch = _batch(model.config.vocab_size)
    model.eval()
    assert model(**batch).logits.shape == (3, 10, model.config.vocab_size)
    model.train()
    unlabelled = {k: v for k, v in batch.items() if k != "labels"}
    assert model(**unlabelled).logits.shape == (3, 10, model.config.vocab_size)


def test_a_batch_with_nothing_counted_gives_a_zero_loss_with_a_graph(tmp_path: Path) -> None:
    model = _llama(tmp_path)
    use_counted_logits(model)
    batch = _batch(model.config.vocab_size)
    batch["labels"][:] = IGNORE
    model.train()
    loss = model(**batch).loss
    loss.backward()
    assert float(loss.detach()) == 0.0


def test_models_it_cannot_patch_say_why(tmp_path: Path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    classifier = BertForSequenceClassification(BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32))
    assert use_counted_logits(classifier) == (
        "the model's forward takes no logits_to_keep and labels: it is not a causal LM "
        "that can skip positions")

    model = _llama(tmp_path)
    head = model.lm_head

    class Scaled(nn.Module):  # a head the mask reaches but whose loss the check sees differ
        def __init__(self) -> None:
            super().__init__()
            self.inner = head
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return self.inner(x) * (2.0 if self.calls % 2 == 0 else 1.0)

    model.lm_head = Scaled()
    why = use_counted_logits(model)
    assert why.startswith("the loss over the kept positions")
    model.train()  # the stock forward is back: every position gets a logit
    batch = _batch(model.config.vocab_size)
    assert model(**batch).logits.shape == (3, 10, model.config.vocab_size)

