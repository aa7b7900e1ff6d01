import copy
from types import SimpleNamespace

import pytest
import torch
from transformers import FNetConfig, FNetForSequenceClassification

from cpuft.optim import build_optimizer
from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.bf16_weights import Bf16Weights, Bf16WeightsSpeedUp
from cpuft.speedups.registry import PatchContext
from tests.helpers import FAMILIES, backward


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_weights_train_in_bf16_and_the_masters_stay_fp32(family):
    torch.manual_seed(0)
    model = FAMILIES[family]()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    weights = Bf16Weights(model)
    tables = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    for name, p in model.named_parameters():
        expected = torch.float32 if id(p) in tables else torch.bfloat16
        assert p.dtype == expected, name
        assert torch.equal(weights.master(p), before[name])  # the masters are the fp32 values
    loss = backward(model)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)  # autocast keeps the loss fp32
    low = dict(zip(weights.low, weights.masters, strict=True))
    grads = {p: p.grad.clone() for p in low}
    assert all(g.dtype == torch.bfloat16 for g in grads.values())
    weights.fold_grads()
    backward(model)
    second = {p: p.grad.clone() for p in low}
    weights.fold_grads()  # a second micro-batch adds to the first in fp32
    for p, master in low.items():
        assert p.grad is None and master.grad.dtype == torch.float32
        assert torch.equal(master.grad, grads[p].float() + second[p].float())


def bert_with_masters() -> tuple[torch.nn.Module, Bf16Weights, torch.optim.Optimizer]:
    """A small BERT with bf16 weights and the fused AdamW over their fp32 masters."""
    torch.manual_seed(0)
    model = FAMILIES["bert"]()
    weights = Bf16Weights(model)
    return model, weights, build_optimizer(model, lr=1e-2, weight_decay=0.0, fused=True,
                                           stand_in=weights.master)


def test_a_new_step_overwrites_the_gradient_buffer_it_reuses():
    model, weights, optimizer = bert_with_masters()
    backward(model)
    weights.fold_grads()
    where = [m.grad.data_ptr() for m in weights.masters]
    optimizer.zero_grad(set_to_none=True)
    assert all(m.grad is None for m in weights.masters)
    torch.manual_seed(1)
    model.bert.embeddings.word_embeddings.weight.data.normal_()  # another loss, other gradients
    backward(model)
    fresh = [p.grad.float() for p in weights.low]
    weights.fold_grads()
    assert [m.grad.data_ptr() for m in weights.masters] == where
    for master, grad in zip(weights.masters, fresh, strict=True):
        assert torch.equal(master.grad, grad)  # nothing left of the first step


def test_publish_copies_the_masters_and_state_dict_and_restore_give_fp32():
    model, weights, optimizer = bert_with_masters()
    assert all(p.dtype == torch.float32 for g in optimizer.param_groups for p in g["params"])
    backward(model)
    weights.fold_grads()
    optimizer.step()
    weights.publish()
    for p, master in zip(weights.low, weights.masters, strict=True):
        assert torch.equal(p.detach(), master.bfloat16())
    state = weights.state_dict()
    assert all(v.dtype != torch.bfloat16 for v in state.values())
    pairs = [(p, m.clone()) for p, m in zip(weights.low, weights.masters, strict=True)]
    weights.restore()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert pairs and all(torch.equal(p, m) for p, m in pairs)
    assert torch.equal(model.classifier.weight, state["classifier.weight"])
    embeddings = model.bert.embeddings.word_embeddings
    assert embeddings(torch.tensor([1, 2])).dtype == torch.float32  # its hook is gone


def test_loss_and_gradients_match_autocast_to_bf16_rounding():
    torch.manual_seed(0)
    autocast = FAMILIES["bert"]()
    ours = copy.deepcopy(autocast)
    weights = Bf16Weights(ours)
    expected = backward(autocast)
    loss = backward(ours)
    weights.fold_grads()
    assert float(loss) == pytest.approx(float(expected), rel=2e-2)
    for (name, a), b in zip(autocast.named_parameters(), ours.parameters(), strict=True):
        got = weights.master(b).grad
        if got is None or float(a.grad.norm()) < 1e-6:
            continue
        cosine = torch.nn.functional.cosine_similarity(a.grad.flatten(), got.flatten(), dim=0)
        assert cosine > 0.98, f"{name}: {float(cosine)}"


def test_a_frozen_base_is_held_in_bf16_without_masters():
    torch.manual_seed(0)
    model = FAMILIES["bert"]()
    for name, p in model.named_parameters():
        p.requires_grad_("classifier" in name)  # as LoRA leaves a base: frozen but the head
    weights = Bf16Weights(model, fused=True)
    trained = {id(p) for p in model.parameters() if p.requires_grad}
    assert {id(p) for p in weights.low} == trained and len(weights.masters) == len(trained)
    assert weights.frozen and all(p.dtype == torch.bfloat16 for p in weights.frozen)
    backward(model)  # the frozen bf16 weights take bf16 activations
    weights.restore()
    assert all(p.dtype == torch.float32 for p in model.parameters())


def decided(model: torch.nn.Module, example=None) -> Decision:
    ctx = PatchContext(precision="bf16", example_input=example)
    return Bf16WeightsSpeedUp().apply(model, Decision(True, "on by default"), ctx)


def held_as_they_were(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    hooks = [h for m in model.modules() for h in (m._forward_hooks, m._forward_pre_hooks)]
    return (not any(hooks) and all(p.grad is None for p in model.parameters())
            and all(p.dtype == torch.float32 and torch.equal(p, before[n])
                    for n, p in model.named_parameters()))


def test_a_model_that_fails_with_bf16_weights_keeps_them_fp32():
    model = Summer(norm=torch.nn.GroupNorm(2, 8))  # torch's GroupNorm refuses fp32 input here
    model.config = None
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = torch.randn(4, 8)
    rng = torch.random.get_rng_state()
    decision = decided(model, example=x)
    assert not decision.on
    assert decision.reason.startswith("the model did not run with its weights in bf16 "
                                      "(RuntimeError: mixed dtype")
    assert held_as_they_were(model, before) and torch.equal(torch.random.get_rng_state(), rng)


def test_an_fp32_result_of_the_models_own_meets_bf16_layernorm_weights():
    # FNet adds its Fourier transform's fp32 result to bf16 activations, then normalises: the
    # LayerNorm's input is cast to its weights' bf16 (torch refuses fp32 input with bf16 weights)
    torch.manual_seed(0)
    model = FNetForSequenceClassification(FNetConfig(
        vocab_size=60, hidden_size=32, num_hidden_layers=2, intermediate_size=64))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert decided(model) == Decision(True, "on by default")
    assert held_as_they_were(model, before)
    weights = Bf16Weights(model)
    loss = backward(model)
    assert torch.isfinite(loss) and all(p.grad is not None for p in weights.low)
    weights.restore()
    model.zero_grad(set_to_none=True)
    assert held_as_they_were(model, before)  # no cast hook left behind either


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_model_that_runs_with_bf16_weights_keeps_them_and_is_left_as_it_was(family):
    torch.manual_seed(0)
    model = FAMILIES[family]()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert decided(model) == Decision(True, "on by default")
    assert held_as_they_were(model, before)


class Summer(torch.nn.Module):
    """Not a token model though its config names a vocabulary: a linear layer whose result,
    made fp32 and added to the input, is normalised by ``norm``."""

    def __init__(self, norm: torch.nn.Module) -> None:
        super().__init__()
        self.config = SimpleNamespace(vocab_size=100)
        self.linear, self.norm = torch.nn.Linear(8, 8), norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x).float() + x)


def test_a_model_the_made_up_batch_does_not_fit_keeps_bf16_weights():
    # the made-up token ids fail with fp32 weights too: that says nothing of bf16
    assert decided(Summer(torch.nn.GroupNorm(2, 8))).on


def test_a_model_without_vocabulary_is_tried_on_the_example_batch():
    model = Summer(torch.nn.GroupNorm(2, 8))
    model.config = None
    x = torch.randn(4, 8)
    assert not decided(model, example=lambda: x).on
    fine = Summer(torch.nn.LayerNorm(8))
    fine.config = None
    assert decided(fine, example=x).on
    assert decided(model).on  # no example: nothing to try it on
