"""Recipes by name, each with its own settings and defaults (no torch here).

A recipe registers a ``RecipeSpec``: its name (``--recipe``), its ``Recipe`` class (the class,
or a ``"module:Class"`` string imported only when the recipe runs), its own settings section (a
frozen dataclass with a docstring under each field: its flags form a group of their own, and
every other recipe refuses them), and the shared settings whose default it changes. A recipe of
one's own is one module that declares these and calls ``register_recipe``; cpuft's two are
registered here by name, so that flags and config files are built before torch loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cpuft.config.sections import CausalLmConfig, ClassifierConfig
from cpuft.errors import CpuftError


@dataclass(frozen=True)
class RecipeSpec:
    name: str
    """``--recipe NAME``; its settings section's config-file table too."""
    recipe: str | Callable[[], Any]
    """The recipe: a class (or any callable) that makes it, or ``'module:Class'``."""
    settings: type | None = None
    """Its own settings: a frozen, keyword-only dataclass whose defaults work."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Shared settings whose default differs for this recipe; a file or a flag overrides them."""


_RECIPES: dict[str, RecipeSpec] = {}


def register_recipe(spec: RecipeSpec) -> RecipeSpec:
    """Make ``spec`` a choice of ``--recipe`` (a name again replaces its entry)."""
    from cpuft.config.fields import settings

    _RECIPES[spec.name] = spec
    settings.cache_clear()
    return spec


def registered_recipes() -> dict[str, RecipeSpec]:
    """Every registered recipe by name, in registration order."""
    return dict(_RECIPES)


def recipe_spec(name: str) -> RecipeSpec:
    if name not in _RECIPES:
        raise CpuftError(f"unknown recipe {name!r}: use {', '.join(_RECIPES)}")
    return _RECIPES[name]


register_recipe(RecipeSpec("classifier", "cpuft.recipes.classifier:ClassifierRecipe",
                           ClassifierConfig))
register_recipe(RecipeSpec(
    "causal-lm", "cpuft.recipes.causal_lm:CausalLmRecipe", CausalLmConfig,
    # LoRA adapters start at zero and train a few million weights: they take a larger step.
    defaults={"lr": 1e-3, "eval_batch_size": 32}))
