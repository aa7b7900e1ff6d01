"""Build a TrainConfig: defaults, then a config file (TOML, YAML or JSON), then flags.

Keys are the flat setting names (``batch_size`` or ``batch-size``) or HF TrainingArguments'
(``learning_rate``), at the top level, under a ``[train]`` table, or under their section's
table (``[optimization] batch_size = 16``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import tomllib
from collections.abc import Iterable
from dataclasses import asdict, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cpuft.config.fields import Setting, all_sections, settings
from cpuft.config.hf_names import HF_SETTING
from cpuft.config.recipes import recipe_spec
from cpuft.config.sections import SECTIONS, CausalLmConfig, ClassifierConfig, TrainConfig
from cpuft.durations import parse_duration
from cpuft.errors import CpuftError, CpuftTypeError


def load_config_file(path: str) -> dict[str, Any]:
    """The flat settings a TOML, YAML or JSON file holds (dashes or underscores in keys, or
    HF TrainingArguments' names: ``learning_rate``)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise CpuftError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        elif p.suffix == ".json":
            data = json.loads(text)
        else:
            raise CpuftError(f"config file {path}: use a .toml, .yaml, .yml or .json file")
    except (tomllib.TOMLDecodeError, ValueError) as e:
        raise CpuftError(f"config file {path} does not parse: {e}") from None
    except Exception as e:  # yaml.YAMLError without importing yaml at module level
        if type(e).__module__.startswith("yaml"):
            raise CpuftError(f"config file {path} does not parse: {e}") from None
        raise
    if not isinstance(data, dict):
        raise CpuftError(f"config file {path}: expected a table of settings")
    data = data.get("train", data)
    known = settings()
    tables = {section.replace("-", "_"): section for section in all_sections()}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = HF_SETTING.get(str(key), str(key).replace("-", "_"))
        if name in tables and isinstance(value, dict):
            for inner, inner_value in value.items():
                inner_name = str(inner).replace("-", "_")
                if known.get(inner_name) is None or known[inner_name].section != tables[name]:
                    raise CpuftError(f"config file {path}: unknown setting {key}.{inner}")
                out[inner_name] = _from_file(known[inner_name], inner_value)
            continue
        if name not in known:
            raise CpuftError(f"config file {path}: unknown setting {key!r}")
        out[name] = _from_file(known[name], value)
    return out


def _from_file(setting: Setting, value: Any) -> Any:
    if setting.kind is list and isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def _checked(setting: Setting, value: Any) -> Any:
    """``value`` as the setting's type, or one line saying what is wrong."""
    kind = setting.kind
    if isinstance(value, bool) and {"yes", "no"} <= set(setting.choices):
        value = "yes" if value else "no"  # resume=True, as the Python API and files say it
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = (isinstance(value, list) and all(isinstance(v, str) for v in value) if kind is list
          else isinstance(value, kind) and (kind is bool) == isinstance(value, bool))
    if not ok:
        raise CpuftTypeError(f"setting {setting.name}: expected {kind.__name__}, got {value!r}")
    if setting.choices and value not in setting.choices:
        raise CpuftError(f"setting {setting.name}: {value!r} is not one of "
                         f"{', '.join(setting.choices)}")
    if kind is float and not math.isfinite(value):
        raise CpuftError(f"--{setting.name.replace('_', '-')} must be a finite number")
    return value


def config_from(values: dict[str, Any], base: TrainConfig | None = None) -> TrainConfig:
    """``base`` (default: the defaults) with the flat ``values`` set, each checked."""
    known = settings()
    by_section: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        if name not in known:
            raise CpuftError(f"unknown setting {name!r}")
        by_section.setdefault(known[name].section, {})[name] = _checked(known[name], value)
    cfg = base or TrainConfig()
    shared = {section: replace(getattr(cfg, section), **changed)
              for section, changed in by_section.items() if section in SECTIONS}
    own = {section: replace(cfg.recipes[section], **changed)
           for section, changed in by_section.items() if section not in SECTIONS}
    return replace(cfg, **shared, recipes=MappingProxyType({**cfg.recipes, **own}))


def to_flat(cfg: TrainConfig) -> dict[str, Any]:
    """Every setting by its flat name, as run folders record them (cpuft_run.json)."""
    sections = [getattr(cfg, name) for name in SECTIONS] + list(cfg.recipes.values())
    return {name: value for section in sections for name, value in asdict(section).items()}


def validate(cfg: TrainConfig) -> None:
    """Reject settings that cannot work, before anything is loaded."""
    d, o, s, dist = cfg.data, cfg.optimization, cfg.speedups, cfg.distributed
    lm, columns = cfg.of(CausalLmConfig), cfg.of(ClassifierConfig)
    checks = [
        (o.batch_size > 0, "--batch-size must be positive"),
        (o.grad_accum > 0, "--grad-accum must be positive"),
        (o.eval_batch_size > 0, "--eval-batch-size must be positive"),
        (d.max_seq_length > 1, "--max-seq-length must be at least 2"),
        (o.max_steps >= 0, "--max-steps must be 0 or positive"),
        (o.max_steps > 0 or o.epochs > 0, "--epochs must be positive"),
        (o.lr > 0, "--lr must be positive"),
        (0 <= o.warmup_ratio < 1, "--warmup-ratio must be in [0, 1)"),
        (o.warmup_steps >= 0, "--warmup-steps must be 0 or positive"),
        (0 < d.validation_split < 1, "--validation-split must be in (0, 1)"),
        (cfg.output.save_steps >= 0, "--save-steps must be 0 or positive"),
        (cfg.output.save_total_limit >= 0, "--save-total-limit must be 0 or positive"),
        (cfg.evaluation.eval_steps >= 0, "--eval-steps must be 0 or positive"),
        (cfg.evaluation.eval_steps > 0 or not (cfg.evaluation.load_best_model_at_end
                                                or cfg.evaluation.metric_for_best_model),
         "--load-best-model-at-end and --metric-for-best-model need --eval-steps: the best "
         "model is picked among the evaluations while training"),
        (cfg.evaluation.load_best_model_at_end or not cfg.evaluation.metric_for_best_model,
         "--metric-for-best-model picks the model that --load-best-model-at-end saves: add "
         "--load-best-model-at-end"),
        (cfg.output.log_steps > 0, "--log-steps must be positive"),
        (o.weight_decay >= 0, "--weight-decay must be 0 or positive"),
        (o.max_grad_norm >= 0, "--max-grad-norm must be 0 (no clipping) or positive"),
        (s.threads >= 0, "--threads must be 0 (one per physical core) or positive"),
        (dist.bucket_cap_mb >= 0, "--bucket-cap-mb must be 0 (by gradient type) or positive"),
        (dist.comm_timeout > 0, "--comm-timeout must be positive"),
        (len(columns.text_columns) <= 2, "--text-columns takes one or two columns"),
        (d.max_train_samples >= 0, "--max-train-samples must be 0 (all) or positive"),
        (d.max_eval_samples >= 0, "--max-eval-samples must be 0 (all) or positive"),
        (lm.lora_r >= 0, "--lora-r must be 0 (full fine-tuning) or positive"),
        (lm.lora_alpha > 0, "--lora-alpha must be positive"),
        (0 <= lm.lora_dropout < 1, "--lora-dropout must be in [0, 1)"),
    ]
    for ok, message in checks:
        if not ok:
            raise CpuftError(message)
    if cfg.output.save_every:
        parse_duration(cfg.output.save_every, "--save-every")
    if cfg.output.report_to == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        raise CpuftError("--report-to tensorboard needs TensorBoard: pip install "
                         "'cpuft[tensorboard]'")


def refuse_other_recipes(recipe: str, given: Iterable[str]) -> None:
    """One line for the first setting given that only another recipe reads: left alone, it
    would be silently ignored."""
    known = settings()
    for name in given:
        owner = known[name].recipe if name in known else ""
        if owner and owner != recipe:
            raise CpuftError(f"--{name.replace('_', '-')} is a setting of the {owner} recipe, "
                             f"which this run does not use (--recipe {recipe}): drop it, or "
                             f"pass --recipe {owner}")


def build_config(file_values: dict[str, Any], flag_values: dict[str, Any]) -> TrainConfig:
    """Defaults, the recipe's defaults, the config file, then the flags the user gave."""
    given = {**file_values, **flag_values}
    recipe = given.get("recipe", settings()["recipe"].default)
    spec = recipe_spec(recipe)
    refuse_other_recipes(recipe, given)
    cfg = config_from({**spec.defaults, **given})
    validate(cfg)
    return cfg
