"""bf16 weights with fp32 masters: the model computes in bf16 end to end, the optimizer updates
fp32 copies (the way Megatron-LM and DeepSpeed train in bf16).

Autocast alone keeps the weights in fp32 and casts each weight, and each fp32 activation that
meets a matmul, to bf16 at every use, then casts the weight gradients back (hundreds of casts
a step; figures in docs/speedups.md). Here each weight is cast once per step (from its
master, after the optimizer step), activations stay bf16 between layers, and the gradients
are cast once into the masters' fp32 gradients, where they accumulate. Autocast stays on
around the forward, so losses are still computed in fp32.

Embedding tables stay fp32 (with --sparse-embeddings, a word embedding's sparse rows take the
lazy AdamW in place); their outputs are cast to bf16 for the layers that follow. Buffers are
left as they are.

With ``fused`` (and a C compiler), ``step`` clips, steps and publishes in one pass of
cpuft.kernels.adamw_bf16 that reads the bf16 gradients as they are: 28 bytes moved a
parameter, where casting the gradients, torch's fused AdamW, the norm and the cast back moved
48.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from cpuft.config import TrainConfig
from cpuft.kernels.adamw import (
    AdamWBf16,
    Prepared,
    adamw_bf16,
    address_array,
    bf16_addresses,
    size_array,
)
from cpuft.optim import AdamW, clip_step, grad_norm
from cpuft.speedplan.choices import choose_bf16_weights
from cpuft.speedplan.speed_plan import Decision, SpeedPlan
from cpuft.speedups.registry import PatchContext, SpeedUp, register
from cpuft.speedups.trial import error_line, made_up_ids, train_pass, untouched
from cpuft.topology import Topology

TRIED_UP_TO = 2_000_000_000
"""Weights a model may have for its bf16 trial: above, the trial's bf16 copy beside the fp32
weights could need memory the run itself never does."""


def _to_bf16(_module: nn.Module, _inputs: Any, output: torch.Tensor) -> torch.Tensor:
    return output.to(torch.bfloat16)


def _norm_input_to_bf16(module: nn.Module, inputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
    # torch's CPU LayerNorm takes fp32 input with fp32 weights or bf16 input with bf16 or fp32
    # weights: an fp32 result of the model's own (FNet's Fourier transform) meets bf16 weights.
    x = inputs[0] if inputs else None
    if isinstance(x, torch.Tensor) and x.dtype == torch.float32 \
            and module.weight is not None and module.weight.dtype == torch.bfloat16:
        return (x.to(torch.bfloat16), *inputs[1:])
    return None


def _casts(model: nn.Module, embeddings: list[nn.Embedding]) -> list[Any]:
    """The hooks bf16 weights need: embedding outputs cast to bf16, fp32 inputs of LayerNorms
    cast to their bf16 weights' dtype."""
    return ([m.register_forward_hook(_to_bf16) for m in embeddings]
            + [m.register_forward_pre_hook(_norm_input_to_bf16) for m in model.modules()
               if isinstance(m, nn.LayerNorm) and m.elementwise_affine])


def why_weights_stay_fp32(model: nn.Module) -> str | None:
    """Why ``model``'s weights cannot be held in bf16 (BatchNorm's statistics and affine
    weights are computed in fp32 under autocast), or None where they can."""
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return "the model has BatchNorm layers, kept fp32 under autocast"
    return None


def _held(model: nn.Module) -> tuple[list[nn.Embedding], list[nn.Parameter]]:
    """The embedding tables (kept fp32, their outputs cast) and the parameters held in bf16."""
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    kept = {id(p) for m in embeddings for p in m.parameters(recurse=False)}
    return embeddings, [p for p in model.parameters()
                        if p.dtype == torch.float32 and id(p) not in kept]


def _trial_inputs(model: nn.Module,
                  example: Callable[[], Any]) -> dict[str, Any] | tuple[Any, ...] | None:
    """Keyword inputs of made-up token ids where the model has a vocabulary, else ``example()``
    (the run's example batch) as positional or keyword inputs; None where there is none."""
    ids = made_up_ids(getattr(model, "config", None), 7)
    if ids is not None:
        return {"input_ids": ids[0], "attention_mask": ids[1]}
    batch = example()
    if isinstance(batch, torch.Tensor):
        return (batch,)
    if isinstance(batch, Mapping) and all(isinstance(k, str) for k in batch):
        return dict(batch)
    return None


def why_bf16_weights_fail(model: nn.Module, example: Callable[[], Any] = lambda: None
                          ) -> str | None:
    """What a training pass raised with ``model``'s weights held in bf16 as ``Bf16Weights``
    holds them, where the same pass runs with fp32 weights (some models mix in fp32 results of
    their own, such as FNet's Fourier transform, which then meet bf16 weights); None where it
    ran or could not be tried. The model is left as it was."""
    inputs = _trial_inputs(model, example)
    if inputs is None or sum(p.numel() for p in model.parameters()) > TRIED_UP_TO:
        return None
    embeddings, held = _held(model)
    fp32 = [p.data for p in held]
    hooks = _casts(model, embeddings)
    failed = None
    with untouched(model):
        try:
            for p in held:
                p.data = p.data.to(torch.bfloat16)
            train_pass(model, inputs, "bf16")
        except Exception as e:
            failed = error_line(e, 120)
        finally:
            for p, data in zip(held, fp32, strict=True):
                p.data, p.grad = data, None
            for hook in hooks:
                hook.remove()
        if failed:
            try:  # made-up inputs this model does not take say nothing of bf16
                train_pass(model, inputs, "bf16")
            except Exception:
                failed = None
    return failed


@dataclass(frozen=True)
class _Steady:
    """What a steady step (every held weight with its bf16 gradient, nothing folded, the
    optimizer's state and groups those of the last step) reuses, one entry a parameter group
    holding masters: its index, its bf16 weights, the kernel's arrays and the step counts."""

    state: Any
    roster: list[list[tuple[torch.Tensor, torch.Tensor]]]
    groups: list[tuple[int, list[torch.Tensor], Prepared, torch.Tensor]]
    sizes: ctypes.Array[ctypes.c_int64]
    """Every group's sizes in turn, for the norm over all of them."""


class Bf16Weights:
    """Casts ``model``'s fp32 parameters (but its embeddings') to bf16 in place and keeps their
    fp32 masters. ``restore()`` puts the masters back, leaving the model fp32 again."""

    def __init__(self, model: nn.Module, *, fused: bool = False) -> None:
        self.model = model
        self._kernel: AdamWBf16 | None = None
        self.kernel_note = "off: torch's AdamW on fp32 copies of the gradients"
        if fused:
            self._kernel, note = adamw_bf16()
            self.kernel_note = (f"on: {note}" if self._kernel is not None
                                else f"off ({note}): torch's AdamW on fp32 copies of the gradients")
        self._folded = False
        # per parameter group (and gradient dtype): the step counts as views of one tensor,
        # and the kernel's arrays of the tensors stepped
        self._counts: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = {}
        self._prepared: dict[tuple[int, bool], Prepared] = {}
        self._roster_of: tuple[Any, list[list[tuple[torch.Tensor, torch.Tensor]]]] = ((), [])
        self._steady: _Steady | None = None
        self._others_of: tuple[Any, list[torch.Tensor]] = ((), [])
        embeddings, held = _held(model)
        self.low: list[torch.Tensor] = []
        self.masters: list[torch.Tensor] = []
        self._master_of: dict[int, torch.Tensor] = {}
        self.frozen: list[torch.Tensor] = []
        for p in held:
            if not p.requires_grad:  # a frozen base (LoRA): bf16 alone, no master to keep
                p.data = p.data.to(torch.bfloat16)
                self.frozen.append(p)
                continue
            master = p.detach().clone()
            # .data keeps the Parameter object, so hooks, DDP and the optimizer's names hold.
            p.data = p.data.to(torch.bfloat16)
            self.low.append(p)
            self.masters.append(master)
            self._master_of[id(p)] = master
        # The masters' gradients live in one buffer, allocated once: folding is then one
        # cast-and-copy call into memory already mapped, not a fresh tensor per weight.
        buffer = torch.empty(sum(m.numel() for m in self.masters), dtype=torch.float32)
        self._grad_slots = [part.view_as(m) for part, m in
                            zip(buffer.split([m.numel() for m in self.masters]), self.masters,
                                strict=True)]
        self._low_of = {id(m): p for p, m in zip(self.low, self.masters, strict=True)}
        self._names = {name: self._master_of[id(p)]
                       for name, p in model.named_parameters(remove_duplicate=False)
                       if id(p) in self._master_of}
        self._hooks = _casts(model, embeddings)

    def master_names(self) -> dict[str, torch.Tensor]:
        """The masters by their parameters' names in the model."""
        return dict(self._names)

    def master(self, p: torch.Tensor) -> torch.Tensor:
        """The tensor the optimizer updates for ``p``: its master, or ``p`` itself if kept fp32."""
        return self._master_of.get(id(p), p)

    def fold_grads(self, *, last: bool = True) -> None:
        """Move the bf16 gradients into the masters' fp32 gradients (adding to what is there),
        after each micro-batch of a step; ``last`` for its last one. With the kernel, a step of
        one micro-batch keeps its bf16 gradients, which the kernel reads as they are."""
        if last and self._kernel is not None and not self._folded:
            return
        self._fold()

    def _fold(self) -> None:
        self._folded = True
        slots: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []
        for p, master, slot in zip(self.low, self.masters, self._grad_slots, strict=True):
            if p.grad is None:
                continue
            if master.grad is None:
                master.grad = slot
                slots.append(slot)
                grads.append(p.grad)
            else:
                master.grad.add_(p.grad)
            p.grad = None
        if slots:
            torch._foreach_copy_(slots, grads)

    def step(self, optimizer: AdamW, params: list[torch.Tensor],
             max_norm: float) -> float | None:
        """``clip_step(optimizer, params, max_norm)`` then ``publish()``: with the kernel, the
        masters are stepped by it and the other parameters (the fp32 embeddings) by
        ``optimizer``, clipped by one norm over all of them. The gradients' norm before
        clipping (None where it was not computed)."""
        groups = optimizer.param_groups
        if self._kernel is None or any(g["amsgrad"] or g["maximize"] for g in groups):
            self._fold()  # what the kernel would have read as bf16
            self._folded = False
            norm = clip_step(optimizer, params, max_norm)
            self.publish()
            return norm
        norm = self._steady_step(optimizer, params, max_norm)
        if norm is not None:
            return norm
        self._steady = None
        low_of = self._low_of
        steady = not self._folded
        roster = self._roster(groups)
        ours = [[m for m, p in pairs if m.grad is not None or p.grad is not None]
                for pairs in roster]
        grads: dict[int, torch.Tensor] = {}
        for m in (m for group in ours for m in group):
            grad = m.grad if m.grad is not None else low_of[id(m)].grad
            assert grad is not None
            grads[id(m)] = grad.contiguous()
        squares = self._kernel.sum_squares(
            [g for g in grads.values() if g.dtype == torch.bfloat16])
        folded = [m for group in ours for m in group if m.grad is not None]
        if folded:
            squares += float(grad_norm(folded)) ** 2
        squares = self._all_squares(squares, params)
        divisor = _divisor(squares, max_norm)
        for index, masters in enumerate(ours):
            self._kernel_step(optimizer, index, masters, grads, low_of, divisor)
        if steady and all(len(a) == len(b) for a, b in zip(ours, roster, strict=True)) \
                and all(g.dtype == torch.bfloat16 for g in grads.values()):
            self._steady = self._steady_for(optimizer, roster)
        for m in self.masters:
            m.grad = None
        for p in self.low:
            p.grad = None
        self._folded = False
        # The masters hold no gradient now, so this steps the others alone (and, with none,
        # still counts a step for the schedulers and hooks that watch the optimizer).
        optimizer.step(grad_scale=torch.tensor(divisor))
        return math.sqrt(squares)

    def _all_squares(self, squares: float, params: list[torch.Tensor]) -> float:
        """The squared norm over the held weights' gradients (``squares``) and those of the
        other parameters (the embeddings)."""
        others = [p for p in self._others(params) if p.grad is not None]
        if others:
            squares += float(grad_norm(others)) ** 2
        return squares

    def _others(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """The parameters of ``params`` that are not held in bf16 (the embeddings)."""
        key = (id(params), len(params))
        if self._others_of[0] != key:
            self._others_of = (key, [p for p in params if id(p) not in self._low_of])
        return self._others_of[1]

    def _steady_for(self, optimizer: AdamW, roster: list[list[tuple[torch.Tensor, torch.Tensor]]]
                    ) -> _Steady | None:
        """What the next steps reuse, after a step that stepped every held weight from its
        bf16 gradient; None where a group's arrays or counts are not this step's."""
        groups = []
        for index, pairs in enumerate(roster):
            if not pairs:
                continue
            prepared, counts = self._prepared.get((index, True)), self._counts.get(index)
            if prepared is None or counts is None or len(prepared.sizes) != len(pairs):
                return None
            groups.append((index, [p for _, p in pairs], prepared, counts[0]))
        sizes = [size for _, _, prepared, _ in groups for size in prepared.sizes]
        return _Steady(optimizer.state, roster, groups, size_array(sizes))

    def _steady_step(self, optimizer: AdamW, params: list[torch.Tensor],
                     max_norm: float) -> float | None:
        """The step as ``step`` takes it, in fewer passes over the weights: MobileBERT's
        1100 took ~1 us each a pass in Python beside a kernel that needs 18 ms. Its norm; None,
        with nothing changed, where the last step's arrays do not hold for this one."""
        steady, groups = self._steady, optimizer.param_groups
        if steady is None or self._folded or steady.state is not optimizer.state \
                or steady.roster is not self._roster(groups):
            return None
        found = []
        for _, lows, prepared, _ in steady.groups:
            at = bf16_addresses([p.grad for p in lows], prepared.sizes)
            if at is None:
                return None
            found.append(at)
        assert self._kernel is not None
        squares = self._kernel.sum_squares_at(address_array([a for at in found for a in at]),
                                              steady.sizes)
        squares = self._all_squares(squares, params)
        divisor = _divisor(squares, max_norm)
        for at, (index, _, prepared, counts) in zip(found, steady.groups, strict=True):
            counts.add_(1.0)
            self._kernel.step_at(address_array(at), True, prepared=prepared,
                                 grad_divisor=divisor,
                                 **_adamw_terms(groups[index], counts.tolist()))
        for p in self.low:
            p.grad = None
        optimizer.step(grad_scale=torch.tensor(divisor))
        return math.sqrt(squares)

    def _roster(self, groups: list[dict[str, Any]]
                ) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Each parameter group's masters with their bf16 weights, found again only where the
        groups' lists of parameters changed."""
        key = tuple((id(g["params"]), len(g["params"])) for g in groups)
        if self._roster_of[0] != key:
            low_of = self._low_of
            self._roster_of = (key, [[(m, low_of[id(m)]) for m in g["params"] if id(m) in low_of]
                                     for g in groups])
        return self._roster_of[1]

    def _kernel_step(self, optimizer: AdamW, index: int, masters: list[torch.Tensor],
                     grads: dict[int, torch.Tensor], low_of: dict[int, torch.Tensor],
                     divisor: float) -> None:
        """One kernel call per gradient dtype for ``masters`` of parameter group ``index``,
        its state kept as torch's AdamW keeps it (so checkpoints load in either)."""
        assert self._kernel is not None
        group = optimizer.param_groups[index]
        states = []
        for m in masters:
            state = optimizer.state[m]
            if not state:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(m, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(m, memory_format=torch.preserve_format)
            states.append(state)
        if not states:
            return
        steps = self._counted(index, states)
        for low in (True, False):
            picked = [i for i, m in enumerate(masters)
                      if (grads[id(m)].dtype == torch.bfloat16) == low]
            if not picked:
                continue
            prepared = self._prepared_for(
                (index, low), [masters[i] for i in picked], [states[i]["exp_avg"] for i in picked],
                [states[i]["exp_avg_sq"] for i in picked],
                [low_of[id(masters[i])] for i in picked])
            self._kernel.step(grads=[grads[id(masters[i])] for i in picked],
                              prepared=prepared, grad_divisor=divisor,
                              **_adamw_terms(group, [steps[i] for i in picked]))

    def _counted(self, index: int, states: list[dict[str, Any]]) -> list[float]:
        """Add one to each state's step count and return the counts. The counts are views of
        one tensor, so that this is one add, not one a weight (torch's foreach add runs a loop
        on CPU: 1.2 ms a step for MobileBERT's 1100 weights); states whose counts are not yet
        those views (new, or loaded from a checkpoint) are given them first."""
        flat, views = self._counts.get(index, (None, ()))
        if flat is None or len(views) != len(states) or any(
                s["step"] is not v for s, v in zip(states, views, strict=False)):
            flat = torch.tensor([float(s["step"]) for s in states], dtype=torch.float32)
            views = flat.unbind()
            for state, view in zip(states, views, strict=True):
                state["step"] = view
            self._counts[index] = (flat, views)
        flat.add_(1.0)
        return flat.tolist()

    def _prepared_for(self, slot: tuple[int, bool], masters: list[torch.Tensor],
                      exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
                      weights: list[torch.Tensor]) -> Prepared:
        """The kernel's arrays of these tensors, read again where they are other tensors than
        last step's (a state loaded from a checkpoint). Their storage is never swapped while
        they are held: the masters and weights are this object's (``restore`` forgets the
        arrays), the moments torch's optimizer state, which it updates in place."""
        assert self._kernel is not None
        now = (masters, exp_avgs, exp_avg_sqs, weights)
        prepared = self._prepared.get(slot)
        if prepared is None or any(
                len(a) != len(b) or any(x is not y for x, y in zip(a, b, strict=True))
                for a, b in zip(prepared.tensors, now, strict=True)):
            prepared = self._prepared[slot] = self._kernel.prepare(*now)
        return prepared

    @torch.no_grad()
    def publish(self) -> None:
        """Copy the masters, as the optimizer left them, into the bf16 weights."""
        if self.low:
            torch._foreach_copy_(self.low, self.masters)

    def state_dict(self) -> dict[str, Any]:
        """The model's state with the fp32 masters in place of the bf16 weights."""
        state = self.model.state_dict()
        for name, master in self._names.items():
            if name in state:
                state[name] = master
        return state

    def restore(self) -> None:
        """Make the model fp32 again, holding the masters' values; the hooks are removed."""
        for p, master in zip(self.low, self.masters, strict=True):
            p.data = master
            p.grad = None
        for p in self.frozen:
            p.data = p.data.float()
        for hook in self._hooks:
            hook.remove()
        self.low, self.masters, self._hooks, self._grad_slots = [], [], [], []
        self._prepared, self._counts, self._roster_of = {}, {}, ((), [])
        self._steady, self._others_of = None, ((), [])
        self.frozen = []
        self._low_of = {}


def _adamw_terms(group: dict[str, Any], steps: list[float]) -> dict[str, Any]:
    """The kernel's AdamW terms for tensors of parameter ``group`` at their ``steps``."""
    lr, (beta1, beta2) = float(group["lr"]), group["betas"]
    return {"decay": [1 - lr * group["weight_decay"]] * len(steps),
            "step_size": [lr / (1 - beta1 ** n) for n in steps],
            "bc2_sqrt": [math.sqrt(1 - beta2 ** n) for n in steps],
            "beta1": beta1, "beta2": beta2, "eps": group["eps"]}


def _divisor(squares: float, max_norm: float) -> float:
    """What every gradient is divided by, to clip their norm ``sqrt(squares)`` to
    ``max_norm``; NaN where the norm is not finite, as clip_step's clamp passes it on (the
    loss check then stops the run)."""
    if not math.isfinite(squares):
        return math.nan
    return max(1.0, (math.sqrt(squares) + 1e-6) / max_norm) if max_norm > 0 else 1.0


def weights_for(plan: SpeedPlan) -> Callable[[nn.Module, bool], Bf16Weights] | None:
    """What makes the training loop's weight holder (an ``engine.weights.WeightsFactory``)
    where the plan holds bf16 weights; None otherwise."""
    if plan.precision != "bf16" or not plan.on(Bf16WeightsSpeedUp.name):
        return None

    def hold(model: nn.Module, fused: bool) -> Bf16Weights:
        return Bf16Weights(model, fused=fused)

    return hold


class Bf16WeightsSpeedUp(SpeedUp):
    """Decided here, held by the training loop: the engine gets ``Bf16Weights`` as its weight
    holder (``cpuft.job.build.fit_config``, ``cpuft.optimize``)."""

    name = "bf16_weights"

    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        return Decision(*choose_bf16_weights(cfg.speedups.bf16_weights,
                                             cfg.distributed.grad_compression))

    def apply(self, model: nn.Module, decision: Decision, ctx: PatchContext) -> Decision:
        if ctx.precision != "bf16":
            return decision
        why = why_weights_stay_fp32(model)
        if why:
            return Decision(False, why)
        failed = why_bf16_weights_fail(model, ctx.example)
        if failed:
            return Decision(False, f"the model did not run with its weights in bf16 ({failed}): "
                                   "they stay fp32 under autocast")
        return decision


register(Bf16WeightsSpeedUp())
