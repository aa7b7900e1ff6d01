"""The speed-ups that patch a model, each one module registered here: its decision from the
settings and the machine, its patch, and whether loops of one's own get it.

The plan holds their decisions by name (``SpeedPlan.speedups``); ``decide`` makes them and
``apply_speedups`` applies them, in registration order, one loop each. Adding a speed-up is a
module with a ``SpeedUp`` subclass and one ``register`` call (and, for a switch users can flip,
a field in ``config.sections.SpeedupConfig``: flags and config files are built before torch
loads, from the settings alone).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cpuft.config import TrainConfig
from cpuft.speedplan.speed_plan import Decision, SpeedPlan
from cpuft.topology import Topology

BUILT_IN = {"fast_dropout": "dropout", "attention": "attention",
            "sparse_embeddings": "sparse_embeddings", "embedding_rows": "sparse_embeddings",
            "first_token_layer": "first_token",
            "counted_logits": "counted_logits", "fused_gelu": "fused_gelu",
            "relative_span": "relative_span", "dynamic_conv": "dynamic_conv",
            "channels_last": "channels_last", "bf16_weights": "bf16_weights"}
"""cpuft's own speed-ups and the modules that register them, in the order they patch a
model."""
_REGISTRY: dict[str, SpeedUp] = {}


@dataclass(frozen=True)
class PatchContext:
    """What a patch may need besides the model."""

    precision: str | None
    example_input: Any = None
    """An input batch to measure on (channels-last), or a function that gives one (drawn only
    where a speed-up needs it); None: there is none."""
    sequence_length: int = 0
    """The length the run's batches are padded to (their median), to measure attention at;
    0: not known."""

    def example(self) -> Any:
        return self.example_input() if callable(self.example_input) else self.example_input


class SpeedUp:
    """One speed-up. ``name`` is its setting (where it has one) and its summary.json field."""

    name: str
    own_loops: str = ""
    """Why loops of one's own (``cpuft.fit``, ``cpuft.optimize``) run without it; '' when they
    get it too."""

    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        """On or off (or which variant), and why, from the settings and the machine alone."""
        return switch(getattr(cfg.speedups, self.name, True))

    def apply(self, model: Any, decision: Decision, ctx: PatchContext) -> Decision:
        """Patch ``model`` as ``decision`` (which is on) says; the decision as the model now
        runs: off with the reason where the patch could not apply."""
        raise NotImplementedError


def switch(requested: bool, default_reason: str = "on by default") -> Decision:
    """The decision of a speed-up that its setting alone turns on or off."""
    return Decision(True, default_reason) if requested else Decision(False, "requested")


class PatchSpeedUp(SpeedUp):
    """A speed-up that is one patch function, decided by its switch: ``patch(model)`` returns
    why it could not apply, or '' where it did."""

    def __init__(self, name: str, patch: Callable[[Any], str], own_loops: str = "") -> None:
        self.name, self.own_loops, self._patch = name, own_loops, patch

    def apply(self, model: Any, decision: Decision, ctx: PatchContext) -> Decision:
        why_not = self._patch(model)
        return Decision(False, why_not) if why_not else decision


def register(speedup: SpeedUp) -> SpeedUp:
    """Add ``speedup``, after those already registered; a name again replaces its entry."""
    _REGISTRY[speedup.name] = speedup
    return speedup


def registered() -> dict[str, SpeedUp]:
    """Every registered speed-up by name: cpuft's own first, in patching order (whatever order
    their modules were imported in), then the others in the order they were registered."""
    for module in BUILT_IN.values():
        importlib.import_module(f"cpuft.speedups.{module}")
    order = list(BUILT_IN)

    def rank(name: str) -> int:
        return order.index(name) if name in order else len(order)

    return {name: _REGISTRY[name] for name in sorted(_REGISTRY, key=rank)}


def decide(cfg: TrainConfig, topo: Topology, *, own_loop: bool = False) -> dict[str, Decision]:
    """Each speed-up's decision; in a loop of one's own, off where it needs a recipe."""
    return {name: (Decision(False, s.own_loops) if own_loop and s.own_loops
                   else s.decide(cfg, topo)) for name, s in registered().items()}


def apply_speedups(model: Any, plan: SpeedPlan, example_input: Any = None,
                   sequence_length: int = 0) -> SpeedPlan:
    """Apply each speed-up the plan has on, in order; the plan with what the model really runs
    and why each patch that could not apply did not."""
    ctx = PatchContext(precision=plan.precision, example_input=example_input,
                       sequence_length=sequence_length)
    speedups = registered()
    applied = {name: speedups[name].apply(model, d, ctx) if d.on else d
               for name, d in plan.speedups.items()}
    return plan.replaced(speedups=applied)
