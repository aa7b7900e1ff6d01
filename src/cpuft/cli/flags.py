"""argparse flags built from the config's settings, so each setting is declared once."""

from __future__ import annotations

import argparse
from typing import Any

from cpuft.config import TrainConfig, build_config, load_config_file
from cpuft.config.fields import all_sections, settings
from cpuft.config.sections import SECTIONS


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, grouped by section; unset flags stay absent, so a config file can
    fill them."""
    parser.add_argument("--config", metavar="FILE", help="TOML or YAML file of these settings; "
                        "flags given on the command line override it.")
    groups = {name: parser.add_argument_group(
        f"{name} settings" if name in SECTIONS else f"{name} recipe settings (other recipes "
        "refuse them)") for name in all_sections()}
    for s in settings().values():
        kwargs: dict[str, Any] = {
            "dest": s.name,
            "default": argparse.SUPPRESS,
            "help": f"{s.help} (default: {s.default!r})",
        }
        if s.kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif s.kind is list:
            kwargs["type"] = _comma_list
            kwargs["metavar"] = "A[,B]"
        elif s.choices:
            kwargs["choices"] = s.choices
        else:
            kwargs["type"] = s.kind
            kwargs["metavar"] = s.name.upper()
        groups[s.section].add_argument("--" + s.name.replace("_", "-"), **kwargs)


def given_flags(args: argparse.Namespace) -> dict[str, Any]:
    names = settings().keys()
    return {k: v for k, v in vars(args).items() if k in names}


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config these parsed train flags give, over their --config file if any."""
    return build_config(load_config_file(args.config) if args.config else {}, given_flags(args))
