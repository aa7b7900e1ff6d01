"""The fused AdamW for bf16 weights (cpuft/kernels/adamw_bf16.c) against torch's AdamW."""

import copy
import math

import pytest
import torch

from cpuft.kernels import build
from cpuft.kernels.adamw import adamw_bf16, adamw_rows
from cpuft.optim import build_optimizer
from cpuft.speedups.bf16_weights import Bf16Weights
from tests.helpers import FAMILIES, backward

SIZES = [1, 7, 16, 33, 1000, 4099]  # tails shorter than a vector, and odd splits over threads


def kernel():
    loaded, note = adamw_bf16()
    assert loaded is not None, f"the kernel did not build: {note}"
    return loaded


def test_sum_squares_of_bf16_gradients_is_exact_to_double():
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(n, generator=gen).bfloat16() for n in SIZES]
    expected = sum(float(g.double().square().sum()) for g in grads)
    assert kernel().sum_squares(grads) == pytest.approx(expected, rel=1e-6)
    assert kernel().sum_squares([]) == 0.0


@pytest.mark.parametrize("grad_dtype", [torch.bfloat16, torch.float32])
def test_a_step_is_torchs_adamw_on_the_masters_and_rounds_them_into_the_weights(grad_dtype):
    gen = torch.Generator().manual_seed(0)
    masters = [torch.randn(n, generator=gen) for n in SIZES]
    reference = [torch.nn.Parameter(m.clone()) for m in masters]
    lr, wd, divisor = 1e-2, 0.1, 2.5
    torch_adamw = torch.optim.AdamW(reference, lr=lr, weight_decay=wd, fused=True)
    for _ in range(3):  # moments and a step count that are not where a first step starts
        for p in reference:
            p.grad = torch.randn(p.shape, generator=gen)
        torch_adamw.step()
    for m, p in zip(masters, reference, strict=True):
        m.copy_(p.detach())
    states = [copy.deepcopy(torch_adamw.state[p]) for p in reference]
    grads = [torch.randn(n, generator=gen).to(grad_dtype) for n in SIZES]
    for p, g in zip(reference, grads, strict=True):
        p.grad = g.float() / divisor
    torch_adamw.step()

    weights = [torch.empty(n, dtype=torch.bfloat16) for n in SIZES]
    step = float(states[0]["step"]) + 1
    kernel().step(grads=grads, masters=masters, exp_avgs=[s["exp_avg"] for s in states],
                  exp_avg_sqs=[s["exp_avg_sq"] for s in states], weights=weights,
                  decay=[1 - lr * wd] * len(SIZES),
                  step_size=[lr / (1 - 0.9**step)] * len(SIZES),
                  bc2_sqrt=[math.sqrt(1 - 0.999**step)] * len(SIZES),
                  beta1=0.9, beta2=0.999, eps=1e-8, grad_divisor=divisor)
    for m, p, s, w in zip(masters, reference, states, weights, strict=True):
        want = torch_adamw.state[p]
        torch.testing.assert_close(s["exp_avg"], want["exp_avg"], rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(s["exp_avg_sq"], want["exp_avg_sq"], rtol=1e-6, atol=1e-10)
        torch.testing.assert_close(m, p.detach(), rtol=1e-6, atol=1e-7)
        assert torch.equal(w, m.bfloat16())  # rounded to nearest even, as torch casts


def test_the_kernel_refuses_tensors_it_cannot_read():
    master = torch.zeros(4)
    with pytest.raises(ValueError, match="contiguous CPU"):
        kernel().step(grads=[torch.zeros(8, dtype=torch.bfloat16)[::2]], masters=[master],
                      exp_avgs=[torch.zeros(4)], exp_avg_sqs=[torch.zeros(4)],
                      weights=[torch.zeros(4, dtype=torch.bfloat16)], decay=[1.0],
                      step_size=[1.0], bc2_sqrt=[1.0], beta1=0.9, beta2=0.999, eps=1e-8,
                      grad_divisor=1.0)


def big_bert() -> torch.nn.Module:
    torch.manual_seed(0)
    model = FAMILIES["bert"]()
    model.bert.embeddings.word_embeddings.weight.data.mul_(40)  # large gradients: clipped
    return model


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_a_fused_step_matches_clip_step_then_publish(micro_batches):
    """One step from the same state: the masters, the weights and the fp32 embeddings."""
    start = {n: p.detach().clone() for n, p in big_bert().named_parameters()}
    runs = {}
    for fused in (False, True):
        model = big_bert()
        weights = Bf16Weights(model, fused=fused)
        assert weights.kernel_note.startswith("on" if fused else "off"), weights.kernel_note
        optimizer = build_optimizer(model, lr=1e-2, weight_decay=0.1, fused=True,
                                    stand_in=weights.master)
        trained = [p for g in optimizer.param_groups for p in g["params"]]
        for micro in range(micro_batches):
            torch.manual_seed(micro)
            model.bert.embeddings.token_type_embeddings.weight.data.normal_()
            backward(model)
            weights.fold_grads(last=micro == micro_batches - 1)
        norm = weights.step(optimizer, trained, max_norm=0.5)
        runs[fused] = (model, weights, optimizer, norm)
    (plain, plain_weights, plain_opt, plain_norm), (fused, fused_weights, fused_opt, fused_norm) \
        = runs[False], runs[True]
    # the norm before clipping, from the kernel's sums as from the folded fp32 gradients
    assert plain_norm is not None and plain_norm > 0
    assert fused_norm == pytest.approx(plain_norm, rel=1e-5)
    moved = 0
    for (name, a), b in zip(plain.named_parameters(), fused.parameters(), strict=True):
        ma, mb = plain_weights.master(a), fused_weights.master(b)
        torch.testing.assert_close(mb, ma, rtol=1e-6, atol=1e-7, msg=name)
        if b.dtype == torch.bfloat16:
            assert torch.equal(b.detach(), mb.bfloat16()), name
            assert b.grad is None and mb.grad is None
        moved += int(not torch.equal(mb, start[name]))
    assert moved > 0
    for a, b in zip(plain_opt.param_groups, fused_opt.param_groups, strict=True):
        for pa, pb in zip(a["params"], b["params"], strict=True):
            sa, sb = plain_opt.state[pa], fused_opt.state[pb]
            assert float(sa["step"]) == float(sb["step"]) == 1.0
            torch.testing.assert_close(sb["exp_avg"], sa["exp_avg"], rtol=1e-5, atol=1e-9)


def test_steps_reuse_their_arrays_until_a_loaded_state_brings_other_tensors(monkeypatch):
    """Three fused steps, the optimizer's state saved and loaded before the third: reading the
    tensors' addresses once (and again after the load) steps exactly as reading them at every
    step does."""
    import io

    prepares, steady = [], []
    original = type(kernel()).prepare
    monkeypatch.setattr(type(kernel()), "prepare",
                        lambda self, *a: prepares.append(len(a[0])) or original(self, *a))
    steady_step = Bf16Weights._steady_step

    def counted_steady_step(self, *args):
        norm = steady_step(self, *args)
        steady.append(norm is not None)  # None: the step went the long way
        return norm

    monkeypatch.setattr(Bf16Weights, "_steady_step", counted_steady_step)
    runs = {}
    for forget in (False, True):
        prepares.clear()
        steady.clear()
        model = big_bert()
        weights = Bf16Weights(model, fused=True)
        optimizer = build_optimizer(model, lr=1e-2, weight_decay=0.1, fused=True,
                                    stand_in=weights.master)
        trained = [p for g in optimizer.param_groups for p in g["params"]]
        for step in range(3):
            if step == 2:
                saved = io.BytesIO()
                torch.save(optimizer.state_dict(), saved)
                saved.seek(0)
                optimizer.load_state_dict(torch.load(saved, weights_only=True))
            if forget:  # every step reads the addresses and counts afresh
                weights._prepared.clear()
                weights._counts.clear()
                weights._steady = None
            torch.manual_seed(step)
            backward(model)
            weights.fold_grads(last=True)
            weights.step(optimizer, trained, max_norm=0.5)
        runs[forget] = (weights, optimizer, len(prepares))
        # the second step reuses the first's arrays; the load sends the third the long way
        assert steady == ([False] * 3 if forget else [False, True, False])
    (kept, kept_opt, kept_prepares), (fresh, fresh_opt, fresh_prepares) = runs[False], runs[True]
    groups = len(kept_opt.param_groups)
    # one array set a parameter group, read at the first step and again after the load
    assert kept_prepares == 2 * groups and fresh_prepares == 3 * groups
    for a, b in zip(fresh.masters, kept.masters, strict=True):
        assert torch.equal(a, b)
    for p, m in zip(kept.low, kept.masters, strict=True):
        assert torch.equal(p.detach(), m.bfloat16())
    for a, b in zip(fresh_opt.state.values(), kept_opt.state.values(), strict=True):
        assert float(a["step"]) == float(b["step"]) == 3.0
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
    # the counts, views of one tensor, save and load as separate counts
    saved = io.BytesIO()
    torch.save(kept_opt.state_dict(), saved)
    saved.seek(0)
    state = torch.load(saved, weights_only=True)["state"]
    assert len(state) == len(kept_opt.state)
    assert all(float(s["step"]) == 3.0 for s in state.values())


def test_without_a_compiler_the_step_falls_back_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("CPUFT_CACHE", str(tmp_path))
    build.load.cache_clear()
    adamw_bf16.cache_clear()
    try:
        torch.manual_seed(0)
        model = FAMILIES["bert"]()
        weights = Bf16Weights(model, fused=True)
        assert weights.kernel_note.startswith("off (") and "no-such-cc" in weights.kernel_note
        optimizer = build_optimizer(model, lr=1e-2, weight_decay=0.1, fused=True,
                                    stand_in=weights.master)
        backward(model)
        weights.fold_grads()
        assert all(m.grad is not None for m in weights.masters)  # folded: no kernel to read bf16
        before = [m.clone() for m in weights.masters]
        weights.step(optimizer, [p for g in optimizer.param_groups for p in g["params"]], 1.0)
        assert any(not torch.equal(a, b) for a, b in zip(before, weights.masters, strict=True))
        for p, m in zip(weights.low, weights.masters, strict=True):
            assert torch.equal(p.detach(), m.bfloat16())  # published
    finally:
        build.load.cache_clear()
        adamw_bf16.cache_clear()


def test_a_build_is_cached_per_source_compiler_and_cpu():
    name = build.library_name("k", b"int x;", "cc", "flags : avx512f")
    assert name == build.library_name("k", b"int x;", "cc", "flags : avx512f")
    assert name != build.library_name("k", b"int x;", "cc", "flags : avx2")
    assert name != build.library_name("k", b"int y;", "cc", "flags : avx512f")
    assert name != build.library_name("k", b"int x;", "clang", "flags : avx512f")


def test_an_optimizer_the_kernel_does_not_do_takes_the_bf16_gradients_through_torch():
    from cpuft.optim import AdamW, param_groups

    torch.manual_seed(0)
    model = FAMILIES["bert"]()
    weights = Bf16Weights(model, fused=True)
    optimizer = AdamW(param_groups(model, 0.1, weights.master), lr=1e-2, amsgrad=True)
    backward(model)
    weights.fold_grads(last=True)  # kept in bf16 for the kernel, which has no amsgrad
    assert all(m.grad is None for m in weights.masters)
    before = [m.clone() for m in weights.masters]
    weights.step(optimizer, [p for g in optimizer.param_groups for p in g["params"]], 1.0)
    assert all("max_exp_avg_sq" in optimizer.state[m] for m in weights.masters)
    assert sum(not torch.equal(a, b) for a, b in zip(before, weights.masters, strict=True)) > 10
    for p, m in zip(weights.low, weights.masters, strict=True):
        assert torch.equal(p.detach(), m.bfloat16())


def row_kernel():
    loaded, note = adamw_rows()
    assert loaded is not None, f"the kernel did not build: {note}"
    return loaded


@pytest.mark.parametrize("used", [[], [0], [3, 4, 98], list(range(100))])
def test_a_step_from_rows_is_torchs_dense_step_on_the_whole_table(used):
    """Rows split unevenly over threads, a used row at either end or none: every row moves as
    torch's fused AdamW moves it with the gradient zero outside ``used``."""
    gen = torch.Generator().manual_seed(0)
    table = torch.nn.Parameter(torch.randn(100, 33, generator=gen))
    reference = torch.optim.AdamW([table], lr=1e-2, weight_decay=0.1, fused=True)
    for _ in range(3):
        table.grad = torch.randn(table.shape, generator=gen)
        reference.step()
    ours = table.detach().clone()
    state = copy.deepcopy(reference.state[table])
    rows = torch.tensor(used, dtype=torch.int64)
    values = torch.randn(len(used), 33, generator=gen)
    table.grad = torch.zeros_like(table)
    table.grad[rows] = values / 2.5
    reference.step()
    step = float(state["step"]) + 1
    row_kernel().step(ours, state["exp_avg"], state["exp_avg_sq"], rows, values,
                      decay=1 - 1e-2 * 0.1, step_size=1e-2 / (1 - 0.9**step),
                      bc2_sqrt=math.sqrt(1 - 0.999**step), beta1=0.9, beta2=0.999, eps=1e-8,
                      grad_divisor=2.5)
    want = reference.state[table]
    torch.testing.assert_close(state["exp_avg"], want["exp_avg"], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(state["exp_avg_sq"], want["exp_avg_sq"], rtol=1e-6, atol=1e-10)
    torch.testing.assert_close(ours, table.detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("rows", "match"), [([2, 1], "sorted"), ([1, 1], "distinct"),
                                             ([0, 4], "inside"), ([-1], "inside")])
def test_the_row_kernel_refuses_rows_it_would_misread(rows, match):
    table = torch.zeros(4, 3)
    with pytest.raises(ValueError, match=match):
        row_kernel().step(table, torch.zeros(4, 3), torch.zeros(4, 3),
                          torch.tensor(rows), torch.zeros(len(rows), 3), decay=1.0,
                          step_size=1.0, bc2_sqrt=1.0, beta1=0.9, beta2=0.999, eps=1e-8,
                          grad_divisor=1.0)
