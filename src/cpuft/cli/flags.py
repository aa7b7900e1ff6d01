"""argparse flags built from the config's settings, so each setting is declared once: cpuft
train's, and those of other commands that take a train setting."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cpuft.cli.hf_only import add_hf_only_flags, hf_only_settings
from cpuft.config import TrainConfig, build_config, load_config_file
from cpuft.config.fields import Setting, all_sections, settings
from cpuft.config.hf_names import HF_NAMES
from cpuft.config.sections import SECTIONS


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _flag(group: Any, s: Setting, aliases: Sequence[str] = (),
          default: tuple[Any, str] | None = None) -> None:
    """One setting's flag, absent from the parsed arguments unless given (or, with
    ``default``, that value, shown as its text)."""
    shown = repr(s.default) if default is None else default[1]
    # A help text that names its own default (one that depends on the recipe) keeps it alone.
    said = "(default:" in s.help
    kwargs: dict[str, Any] = {
        "dest": s.name,
        "default": argparse.SUPPRESS if default is None else default[0],
        "help": s.help if said else f"{s.help} (default: {shown})",
    }
    if s.kind is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif s.kind is list:
        kwargs["type"] = _comma_list
        kwargs["metavar"] = "A[,B]"
    elif {"yes", "no"} <= set(s.choices):  # --resume alone is yes; --resume auto
        kwargs.update(nargs="?", const="yes", choices=s.choices)
    elif s.choices:
        kwargs["choices"] = s.choices
    else:
        kwargs["type"] = s.kind  # non-finite numbers: config_from refuses them, one line
        kwargs["metavar"] = s.name.upper()
    group.add_argument("--" + s.name.replace("_", "-"), *aliases, **kwargs)


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, grouped by section; unset flags stay absent, so a config file can
    fill them."""
    parser.add_argument("--config", metavar="FILE", help="TOML or YAML file of these settings; "
                        "flags given on the command line override it.")
    groups = {name: parser.add_argument_group(
        f"{name} settings" if name in SECTIONS else f"{name} recipe settings (other recipes "
        "refuse them)") for name in all_sections()}
    for s in settings().values():
        _flag(groups[s.section], s, HF_NAMES.get(s.name, ()))
    groups["speedups"].add_argument(
        "--bf16", dest="precision", action="store_const", const="bf16",
        default=argparse.SUPPRESS, help="HF Trainer's --bf16: --precision bf16")
    add_hf_only_flags(parser)


def add_setting_flags(group: Any, names: Iterable[str],
                      aliases: Mapping[str, Sequence[str]] | None = None,
                      defaults: Mapping[str, tuple[Any, str]] | None = None) -> None:
    """Flags for the train settings ``names``, as ``cpuft train`` declares them, for another
    command: with older spellings in ``aliases``, and the command's own ``defaults`` (value,
    text for help) where a setting's differs."""
    known = settings()
    for name in names:
        _flag(group, known[name], (aliases or {}).get(name, ()), (defaults or {}).get(name))


def given_flags(args: argparse.Namespace, names: Iterable[str] | None = None
                ) -> dict[str, Any]:
    """The train settings given on the command line (of ``names`` only, where given)."""
    wanted = set(settings()) if names is None else set(names)
    return {k: v for k, v in vars(args).items() if k in wanted}


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config these parsed train flags give (HF's own among them), over their --config
    file if any."""
    given = given_flags(args)
    given |= hf_only_settings(args, given)
    return build_config(load_config_file(args.config) if args.config else {}, given)


def rank_train_config(train_args: Sequence[str], min_nodes: int | None = None,
                      max_nodes: int | None = None) -> TrainConfig:
    """The settings ``cpuft train TRAIN_ARGS`` takes, checked here once rather than on every
    rank of a job: its flags, and with ``min_nodes`` (an elastic job) that its batch splits
    over every node count it may run on."""
    from cpuft.cli.main import build_parser
    from cpuft.launch.elastic import check_batch_splits

    cfg = config_from_args(build_parser().parse_args(["train", *train_args]))
    if min_nodes is not None and max_nodes is not None:
        check_batch_splits(cfg.optimization.batch_size, min_nodes, max_nodes)
    return cfg
