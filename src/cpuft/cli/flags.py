"""argparse flags built from TrainConfig's fields, so each setting is declared once."""

from __future__ import annotations

import argparse
from typing import Any

from cpuft.config import config_fields, field_default


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field; unset flags stay absent, so a config file can fill them."""
    parser.add_argument("--config", metavar="FILE", help="TOML or YAML file of these settings; "
                        "flags given on the command line override it.")
    for f in config_fields():
        flag = "--" + f.name.replace("_", "-")
        default = field_default(f)
        kwargs: dict[str, Any] = {
            "dest": f.name,
            "default": argparse.SUPPRESS,
            "help": f"{f.metadata['help']} (default: {default!r})",
        }
        if isinstance(default, bool):
            kwargs["action"] = argparse.BooleanOptionalAction
        elif isinstance(default, list):
            kwargs["type"] = _comma_list
            kwargs["metavar"] = "A[,B]"
        else:
            kwargs["type"] = type(default)
            kwargs["metavar"] = f.name.upper()
        if "choices" in f.metadata:
            kwargs["choices"] = f.metadata["choices"]
            kwargs.pop("metavar", None)
        parser.add_argument(flag, **kwargs)


def given_flags(args: argparse.Namespace) -> dict[str, Any]:
    names = {f.name for f in config_fields()}
    return {k: v for k, v in vars(args).items() if k in names}
