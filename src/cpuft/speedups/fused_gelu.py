"""tanh-approximated GELU in one fused kernel, where a model computes it op by op.

Some models (ALBERT, GPT-2 and others with "gelu_new") compute GELU's tanh approximation in
Python: a power, three multiplications, two additions and a tanh, each a pass over the
activations forward and more backward. torch's ``gelu(approximate="tanh")`` is the same formula
in one pass each way. On an ALBERT-base step (batch 16, 32 tokens, bf16) those element-wise
passes were about a fifth of the step's time (benchmarks/history.md).

Which modules compute it is found by running them, never by their name: every module without
parameters or children is given a made-up tensor, and one whose output matches the fused
kernel's (to fp32 rounding) is replaced by ``nn.GELU(approximate="tanh")``.
"""

from __future__ import annotations

import torch
from torch import nn

from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.registry import PatchContext, SpeedUp, register
from cpuft.speedups.swap import replace_children

TOLERANCE = 1e-6


def _probe() -> torch.Tensor:
    """Values across GELU's curve, from a generator of their own (torch's stream stays put)."""
    return torch.randn(2, 64, generator=torch.Generator().manual_seed(0)) * 4


def computes_tanh_gelu(module: nn.Module, probe: torch.Tensor) -> bool:
    """Whether ``module`` (a leaf without parameters or buffers) gives tanh-GELU of its
    input."""
    if isinstance(module, nn.GELU) or any(True for _ in module.parameters()) or any(
            True for _ in module.buffers()) or any(True for _ in module.children()):
        return False  # buffers: it may keep state (running statistics) that a probe would move
    rng = torch.random.get_rng_state()
    try:
        with torch.no_grad():
            out = module(probe)
    except Exception:  # not an element-wise function of one tensor
        return False
    finally:
        torch.random.set_rng_state(rng)
    expected = nn.functional.gelu(probe, approximate="tanh")
    return (isinstance(out, torch.Tensor) and out.shape == probe.shape
            and bool(torch.allclose(out.float(), expected, rtol=TOLERANCE, atol=TOLERANCE)))


def fuse_tanh_gelu(model: nn.Module) -> int:
    """Replace each module that computes tanh-GELU op by op; how many were replaced."""
    probe = _probe()
    return replace_children(model, lambda child: nn.GELU(approximate="tanh")
                            if computes_tanh_gelu(child, probe) else None)


class FusedGeluSpeedUp(SpeedUp):
    name = "fused_gelu"

    def apply(self, model: nn.Module, decision: Decision, ctx: PatchContext) -> Decision:
        count = fuse_tanh_gelu(model)
        if not count:
            return Decision(False, "no module computes tanh-GELU op by op")
        return Decision(True, f"{count} tanh-GELU module(s) computed op by op, now torch's "
                              "fused kernel")


register(FusedGeluSpeedUp())
