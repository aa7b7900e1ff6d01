"""Where a training step's time goes, from torch.profiler: the operators' own time, in groups."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

GROUPS = {
    "matmul": ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm"),
    "softmax_and_loss": ("aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data",
                         "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
                         "aten::nll_loss_backward", "aten::nll_loss2d_forward",
                         "aten::nll_loss2d_backward"),
    "dropout": ("_ScaledMask", "_ScaledMaskBackward", "aten::bernoulli_", "aten::native_dropout",
                "aten::native_dropout_backward"),
    "convolution": ("aten::mkldnn_convolution", "aten::convolution_backward",
                    "aten::slow_conv2d_forward", "aten::slow_conv2d_backward"),
    "normalization": ("aten::native_batch_norm", "aten::native_batch_norm_backward",
                      "aten::native_layer_norm", "aten::native_layer_norm_backward"),
    "optimizer": ("aten::_fused_adamw_", "aten::_foreach_mul_", "aten::_foreach_add_",
                  "aten::_foreach_addcmul_", "aten::_foreach_addcdiv_", "aten::_foreach_sqrt",
                  "aten::_foreach_div_", "aten::_foreach_norm"),
}
"""Operators by what they do; the rest is "other_ops" (element-wise work, copies, views)."""


def group_of(name: str) -> str:
    for group, names in GROUPS.items():
        if name in names:
            return group
    return "other_ops"


def split_seconds(events: list[tuple[str, float]], wall: float) -> dict[str, float]:
    """Seconds per group from (operator, own seconds) pairs; what no operator took (Python, the
    autograd engine between operators) is "outside_ops"."""
    out = dict.fromkeys([*GROUPS, "other_ops"], 0.0)
    for name, seconds in events:
        out[group_of(name)] += seconds
    out["outside_ops"] = max(wall - sum(out.values()), 0.0)
    return out


def profile_steps(step: Any, batches: Iterable[Any], n: int) -> dict[str, Any]:
    """Run ``n`` steps of ``step`` on the first of ``batches`` under torch.profiler (after one
    unprofiled warm-up step); per group, its seconds a step and its share of the step."""
    from torch.profiler import ProfilerActivity, profile

    batches = [b for _, b in zip(range(n + 1), batches, strict=False)]
    step(batches[0])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for batch in batches[1:]:
            step(batch)
        wall = time.perf_counter() - started
    events = [(e.key, e.self_cpu_time_total / 1e6) for e in prof.key_averages()]
    steps = len(batches) - 1
    seconds = split_seconds(events, wall)
    return {"steps": steps, "seconds_per_step": wall / steps,
            "seconds": {k: v / steps for k, v in seconds.items()},
            "share": {k: v / wall for k, v in seconds.items()}}
