"""Replacing a model's modules in place, wherever they sit."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn


def replace_children(model: nn.Module, replacement: Callable[[nn.Module], nn.Module | None]
                     ) -> int:
    """Put ``replacement(child)`` in the place of every child of every module of ``model``
    where it is not None; how many places were replaced. A module shared by several places is
    replaced in each, and ``replacement`` asked once for it."""
    count = 0
    asked: dict[int, nn.Module | None] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) not in asked:
                asked[id(child)] = replacement(child)
            new = asked[id(child)]
            if new is not None:
                setattr(parent, name, new)
                count += 1
    return count
