"""The settings of a run: sections (``sections``), their flat names (``fields``), and how a
config is built from defaults, a file and flags (``build``), and the recipes with their own
settings (``recipes``). No torch here."""

from cpuft.config.build import build_config, config_from, load_config_file, to_flat, validate
from cpuft.config.recipes import RecipeSpec, recipe_spec, register_recipe, registered_recipes
from cpuft.config.sections import (
    DEFAULT_TASK,
    CausalLmConfig,
    ClassifierConfig,
    DataConfig,
    DistributedConfig,
    EvaluationConfig,
    ModelConfig,
    OptimizationConfig,
    OutputConfig,
    SpeedupConfig,
    TrainConfig,
)

__all__ = [
    "DEFAULT_TASK", "CausalLmConfig", "ClassifierConfig", "DataConfig", "DistributedConfig",
    "EvaluationConfig", "ModelConfig", "OptimizationConfig", "OutputConfig", "RecipeSpec",
    "SpeedupConfig",
    "TrainConfig", "build_config", "config_from", "load_config_file", "recipe_spec",
    "register_recipe", "registered_recipes", "to_flat", "validate",
]
