"""Recipes: one module per kind of job, each turning a config into a ``Task`` (``base``).
Adding a recipe is one module and one line in ``RECIPES``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cpuft.errors import CpuftError

if TYPE_CHECKING:
    from cpuft.recipes.base import Recipe

RECIPES = {
    "classifier": "cpuft.recipes.classifier:ClassifierRecipe",
    "causal-lm": "cpuft.recipes.causal_lm:CausalLmRecipe",
}
"""Recipe name (``--recipe``) to the class that implements it, imported when chosen."""


def get_recipe(name: str) -> Recipe:
    import importlib

    if name not in RECIPES:
        raise CpuftError(f"unknown recipe {name!r}: use {', '.join(RECIPES)}")
    module, _, cls = RECIPES[name].partition(":")
    recipe: Recipe = getattr(importlib.import_module(module), cls)()
    return recipe
