"""Recipes: one module per kind of job, each turning a config into a ``Task`` (``base``).
They are chosen by name from ``cpuft.config.recipes``, where each registers with its own
settings."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from cpuft.config.recipes import recipe_spec

if TYPE_CHECKING:
    from cpuft.recipes.base import Recipe


def get_recipe(name: str) -> Recipe:
    """The recipe registered as ``name``, its module imported now."""
    make = recipe_spec(name).recipe
    if isinstance(make, str):
        module, _, attr = make.partition(":")
        make = getattr(importlib.import_module(module), attr)
    recipe: Recipe = make()
    return recipe
