"""The settings of a run: sections (``sections``), their flat names (``fields``), and how a
config is built from defaults, a file and flags (``build``). No torch here."""

from cpuft.config.build import build_config, config_from, load_config_file, to_flat, validate
from cpuft.config.sections import (
    DEFAULT_TASK,
    DataConfig,
    DistributedConfig,
    ModelConfig,
    OptimizationConfig,
    OutputConfig,
    SpeedupConfig,
    TrainConfig,
)

__all__ = [
    "DEFAULT_TASK", "DataConfig", "DistributedConfig", "ModelConfig", "OptimizationConfig",
    "OutputConfig", "SpeedupConfig", "TrainConfig", "build_config", "config_from",
    "load_config_file", "to_flat", "validate",
]
